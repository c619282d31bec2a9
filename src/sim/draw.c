/* anyccl-topo on fabric files (docs/simulation.md): a summary and a
 * Graphviz drawing of the cluster a fabric file describes. Large fabrics
 * are drawn in part: the first hosts (DRAW_HOSTS), their leaves, the
 * spine, and a note of what was left out. */
#include <stdio.h>
#include <stdlib.h>
#include "sim.h"

#define DRAW_HOSTS 4

static int leafOfNic(const struct simFabric* f, int host, int nic) {
  int groups = (f->hosts + f->hostsPerLeaf - 1) / f->hostsPerLeaf;
  if (f->kind == SIM_FATTREE) return host / f->hostsPerLeaf;
  return nic * groups + host / f->hostsPerLeaf;
}

void simFabricDescribe(const struct simFabric* f, FILE* out) {
  const struct simCalib* c = &f->calib;
  int ports = f->kind == SIM_FATTREE ? f->hostsPerLeaf * f->nicsPerHost : f->hostsPerLeaf;
  fprintf(out, "%s: OK (%d host%s x %d GPUs, %d NIC%s of %g Gb/s each; %s, %d lea%s of %d hosts, uplink %g GB/s "
               "(%g:1); %g us per hop; %d links)\n",
          f->name, f->hosts, f->hosts > 1 ? "s" : "", f->gpusPerHost, f->nicsPerHost, f->nicsPerHost > 1 ? "s" : "",
          f->nicGbps, f->kind == SIM_RAIL ? "rail-optimized" : "fat-tree", f->nLeaves, f->nLeaves > 1 ? "ves" : "f",
          f->hostsPerLeaf, ports * f->nicGbps / 8 / f->oversub, f->oversub, f->hopLatUs, f->nLinks);
  fprintf(out, "  device %s: block %g GB/s, NVLink %g GB/s, PCIe %g GB/s, launch %g us (graph %g; onto an idle stream "
               "%g, graph %g), steps LL %g / simple %g us, LL efficiency %g, NVLink latency %g us; %s model\n",
          f->device, c->blockGBps, c->nvlinkGBps, c->pcieGBps, c->launchUs, c->graphLaunchUs, c->idleLaunchUs,
          c->graphIdleLaunchUs, c->llStepUs,
          c->simpleStepUs, c->llEfficiency, c->nvlinkLatUs, c->model == SIM_MODEL_DATAFLOW ? "dataflow" : "lock-step");
  fprintf(out, "  one-host kernels: launch %g us (graph %g), LL block %g GB/s, staged block %g GB/s, barrier %g us, "
               "copy %g GB/s\n",
          c->symmLaunchUs, c->symmGraphLaunchUs, c->symmLLBlockGBps, c->symmBlockGBps, c->symmBarrierUs,
          c->symmCopyGBps);
}

ncclResult_t simFabricWriteDot(const struct simFabric* f, FILE* out) {
  const struct simCalib* c = &f->calib;
  int hosts = f->hosts < DRAW_HOSTS ? f->hosts : DRAW_HOSTS;
  fprintf(out, "digraph fabric {\n  graph [fontname=\"Helvetica\", rankdir=BT, labelloc=t, label=\"%s: %d hosts x %d "
               "GPUs, %s%s\"];\n",
          f->name, f->hosts, f->gpusPerHost, f->kind == SIM_RAIL ? "rail-optimized" : "fat-tree",
          hosts < f->hosts ? " (the first hosts drawn)" : "");
  fprintf(out, "  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9, dir=none];\n");
  int ports = f->kind == SIM_FATTREE ? f->hostsPerLeaf * f->nicsPerHost : f->hostsPerLeaf;
  double up = ports * f->nicGbps / 8 / f->oversub;
  if (f->nLeaves > 1) fprintf(out, "  spine [shape=box, style=filled, fillcolor=\"#dddddd\", label=\"spine\"];\n");
  /* the leaves the drawn hosts use */
  char* drawn = calloc(f->nLeaves, 1);
  if (drawn == NULL) return ncclSystemError;
  int nDrawn = 0;
  for (int h = 0; h < hosts; h++)
    for (int k = 0; k < f->nicsPerHost; k++) {
      int l = leafOfNic(f, h, k);
      if (drawn[l]) continue;
      drawn[l] = 1, nDrawn++;
      fprintf(out, "  leaf%d [shape=box, style=filled, fillcolor=\"#cfe2f3\", label=\"leaf %d%s%d\"];\n", l, l,
              f->kind == SIM_RAIL ? "\\nrail " : "\\nhosts from ", f->kind == SIM_RAIL ? k : l * f->hostsPerLeaf);
      if (f->nLeaves > 1)
        fprintf(out, "  leaf%d -> spine [label=\"%.0f GB/s\"%s];\n", l, up, f->oversub > 1 ? ", color=\"#cc0000\"" : "");
    }
  if (nDrawn < f->nLeaves)
    fprintf(out, "  moreleaves [shape=note, label=\"%d more leaves\"];\n  moreleaves -> spine [style=dotted];\n",
            f->nLeaves - nDrawn);
  free(drawn);
  for (int h = 0; h < hosts; h++) {
    fprintf(out, "  subgraph cluster_host%d {\n    label=\"host %d\"; style=rounded;\n", h, h);
    fprintf(out, "    h%d_nvs [shape=hexagon, label=\"NVSwitch\"];\n", h);
    for (int g = 0; g < f->gpusPerHost; g++) {
      fprintf(out, "    h%d_g%d [shape=box, style=filled, fillcolor=\"#d9ead3\", label=\"GPU %d\"];\n", h, g, g);
      fprintf(out, "    h%d_g%d -> h%d_nvs [label=\"%.0f\", color=\"#2e8b22\"];\n", h, g, h, c->nvlinkGBps);
    }
    for (int k = 0; k < f->nicsPerHost; k++) {
      fprintf(out, "    h%d_n%d [shape=ellipse, style=filled, fillcolor=\"#fce5cd\", label=\"NIC %d\"];\n", h, k, k);
      for (int g = 0; g < f->gpusPerHost; g++)
        if (g * f->nicsPerHost / f->gpusPerHost == k)
          fprintf(out, "    h%d_g%d -> h%d_n%d [label=\"PCIe %.0f\", style=dashed];\n", h, g, h, k, c->pcieGBps);
    }
    fprintf(out, "  }\n");
    for (int k = 0; k < f->nicsPerHost; k++)
      fprintf(out, "  h%d_n%d -> leaf%d [label=\"%.0f GB/s\"];\n", h, k, leafOfNic(f, h, k), f->nicGbps / 8);
  }
  if (hosts < f->hosts) fprintf(out, "  morehosts [shape=note, label=\"%d more hosts\"];\n", f->hosts - hosts);
  fprintf(out, "  legend [shape=plaintext, label=\"GB/s per direction; NVLink per GPU\"];\n}\n");
  return ferror(out) ? ncclSystemError : ncclSuccess;
}
