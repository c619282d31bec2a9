/* Graphviz DOT of a topology: a box per host; CPUs, PCIe switches, GPUs,
 * NICs; PCIe links labelled with their bandwidth, NVLinks in green (to an
 * NVSwitch node or between GPUs), the inter-socket link dashed. */
#include <stdio.h>
#include <string.h>
#include "checks.h"
#include "topo.h"

/* DOT identifiers from content (stable across runs): bus ids, NUMA and net dev numbers. */
static void busIdName(const char* busId, char* buf, size_t len) {
  snprintf(buf, len, "%s", busId);
  for (char* p = buf; *p; p++)
    if (*p == ':' || *p == '.') *p = '_';
}

static void nodeId(const struct anycclTopoNode* n, int host, char* buf, size_t len) {
  char b[ANYCCL_TOPO_BUSID_LEN];
  switch (n->kind) {
  case TOPO_CPU: snprintf(buf, len, "h%d_cpu%d", host, n->cpu.numaId < 0 ? 999 : n->cpu.numaId); break;
  case TOPO_PCI: busIdName(n->pci.busId, b, sizeof(b)), snprintf(buf, len, "h%d_pci_%s", host, b); break;
  case TOPO_NET: snprintf(buf, len, "h%d_net%d", host, n->net.dev); break;
  default: snprintf(buf, len, "h%d_%s", host, anycclTopoKindName(n->kind)); break;
  }
}

static const struct anycclTopoNode* childOf(const struct anycclTopoNode* n, anycclTopoKind kind) {
  for (int s = 0; s < n->nSubs; s++)
    if (n->subs[s]->kind == kind) return n->subs[s];
  return NULL;
}

/* parentId: the node drawn above; link: the label of the edge from it. */
static void drawTree(FILE* f, const struct anycclTopoHost* h, const struct anycclTopoNode* n, const char* parentId,
                     const char* link) {
  char id[96], label[64] = "";
  nodeId(n, h->index, id, sizeof(id));
  const char* next = id;
  switch (n->kind) {
  case TOPO_CPU:
    fprintf(f, "    %s [shape=box, style=\"rounded,filled\", fillcolor=\"#dbe8f7\", label=\"CPU %d\\n%s\"];\n", id,
            n->cpu.numaId, anycclTopoGetAttr(n, "arch"));
    break;
  case TOPO_PCI: {
    const struct anycclTopoNode* gpu = childOf(n, TOPO_GPU);
    snprintf(label, sizeof(label), "%.0f GB/s", n->pci.bw);
    if (gpu) {
      fprintf(f, "    %s [shape=box3d, style=filled, fillcolor=\"#c8f0c0\", label=\"GPU %d\\n%s\\nsm_%d\"];\n", id,
              gpu->gpu.dev, n->pci.busId, gpu->gpu.sm);
    } else if (childOf(n, TOPO_NIC)) { /* the NIC's own PCI function: drawn as the NIC */
      next = parentId;
      break;
    } else {
      fprintf(f, "    %s [shape=ellipse, label=\"PCI %s\"];\n", id, n->pci.busId);
    }
    fprintf(f, "    %s -> %s [dir=none, label=\"%s\", fontsize=9];\n", parentId, id, label);
    label[0] = '\0';
    break;
  }
  case TOPO_NET: {
    const struct anycclTopoNode* pci = n->parent->parent;
    char where[40] = "";
    if (pci->kind == TOPO_PCI) snprintf(where, sizeof(where), "%s\\n", pci->pci.busId);
    fprintf(f, "    %s [shape=box, style=filled, fillcolor=\"#fde2c0\", label=\"NIC %d %s\\n%s%d Gb/s\"];\n", id,
            n->net.dev, n->net.name, where, (n->net.speed > 0 ? n->net.speed : 10000) / 1000);
    fprintf(f, "    %s -> %s [dir=none, label=\"%s\", fontsize=9];\n", parentId, id, link ? link : "");
    break;
  }
  case TOPO_NIC: next = parentId; snprintf(label, sizeof(label), "%s", link ? link : ""); break;
  default: return; /* <gpu> children, <pcilink>: drawn elsewhere or not at all */
  }
  for (int s = 0; s < n->nSubs; s++) drawTree(f, h, n->subs[s], next, label[0] ? label : NULL);
}

static void drawHost(FILE* f, const struct anycclTopoHost* h) {
  fprintf(f, "  subgraph cluster_host%d {\n    label=\"host %s (%d GPUs, %d NICs)\";\n    style=rounded;\n", h->index,
          h->name, h->nGpus, h->nNets);
  char root[64];
  snprintf(root, sizeof(root), "h%d_root", h->index);
  fprintf(f, "    %s [shape=point, style=invis];\n", root);
  for (int c = 0; c < h->nCpus; c++) {
    char id[96];
    drawTree(f, h, h->cpus[c], root, NULL);
    nodeId(h->cpus[c], h->index, id, sizeof(id));
    fprintf(f, "    %s -> %s [style=invis];\n", root, id);
    if (c > 0) {
      char prev[96];
      nodeId(h->cpus[c - 1], h->index, prev, sizeof(prev));
      fprintf(f, "    %s -> %s [dir=none, style=dashed, label=\"SYS\", constraint=false];\n", prev, id);
    }
  }
  int nvs = 0;
  for (int g = 0; g < h->nGpus; g++) nvs |= h->gpus[g].nvsBw > 0;
  if (nvs) fprintf(f, "    h%d_nvswitch [shape=hexagon, style=filled, fillcolor=\"#7dc46f\", label=\"NVSwitch\"];\n", h->index);
  for (int g = 0; g < h->nGpus; g++) {
    const struct anycclTopoGpu* gpu = h->gpus + g;
    char gid[96];
    nodeId(gpu->pci, h->index, gid, sizeof(gid));
    if (gpu->nvsBw > 0)
      fprintf(f, "    %s -> h%d_nvswitch [dir=none, color=\"#2e8b22\", penwidth=2, label=\"%.0f GB/s\", fontsize=9];\n",
              gid, h->index, gpu->nvsBw);
    for (int o = g + 1; o < h->nGpus; o++) {
      struct anycclTopoPath p = anycclTopoGpuPath(h, g, o);
      int direct = 0;
      for (int s = 0; s < gpu->node->nSubs; s++) {
        const struct anycclTopoNode* l = gpu->node->subs[s];
        direct |= l->kind == TOPO_NVLINK && strcmp(l->nvlink.target, h->gpus[o].busId) == 0;
      }
      for (int s = 0; s < h->gpus[o].node->nSubs; s++) {
        const struct anycclTopoNode* l = h->gpus[o].node->subs[s];
        direct |= l->kind == TOPO_NVLINK && strcmp(l->nvlink.target, gpu->busId) == 0;
      }
      if (!direct) continue;
      char oid[96];
      nodeId(h->gpus[o].pci, h->index, oid, sizeof(oid));
      fprintf(f, "    %s -> %s [dir=none, color=\"#2e8b22\", penwidth=2, label=\"NVL %.0f GB/s\", fontsize=9, constraint=false];\n",
              gid, oid, p.bw);
    }
  }
  fprintf(f, "  }\n");
}

ncclResult_t anycclTopoWriteDot(const struct anycclTopo* topo, int host, FILE* f) {
  if (host >= topo->nHosts) return ncclInvalidArgument;
  fprintf(f, "digraph topology {\n  graph [fontname=\"Helvetica\", rankdir=TB, label=\"%s\", labelloc=t];\n",
          topo->file ? topo->file : "detected");
  fprintf(f, "  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\"];\n");
  for (int h = 0; h < topo->nHosts; h++)
    if (host < 0 || h == host) drawHost(f, topo->hosts + h);
  if (host < 0 && topo->nHosts > 1)
    fprintf(f, "  network [shape=doublecircle, label=\"network\"];\n");
  for (int h = 0; host < 0 && topo->nHosts > 1 && h < topo->nHosts; h++)
    for (int n = 0; n < topo->hosts[h].nNets; n++) {
      char id[96];
      nodeId(topo->hosts[h].nets[n].node, h, id, sizeof(id));
      fprintf(f, "  %s -> network [dir=none, style=dotted];\n", id);
    }
  fprintf(f, "}\n");
  return ferror(f) ? ncclSystemError : ncclSuccess;
}
