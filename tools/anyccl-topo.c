/* anyccl-topo: detect, load, validate, dump and draw topologies in NCCL's XML
 * format, and show the rings anyccl builds on them.
 *
 *   anyccl-topo detect [-o OUT.xml]
 *   anyccl-topo load FILE [--host H]
 *   anyccl-topo validate FILE...
 *   anyccl-topo dump FILE [--host H] [-o OUT.xml]
 *   anyccl-topo draw FILE [--host H] [-o OUT.dot|OUT.svg|OUT.png]
 *   anyccl-topo rings FILE --hosts N --gpus-per-host G [--channels C]
 *
 * FILE.fabric (the sim backend's cluster) and FILE.calib (its calibration)
 * can be validated and loaded; a fabric can be drawn.
 *
 * --host H picks host H the way NCCL_HOSTID=H does: FILE_node<H>.xml when it
 * exists, else host H of a multi-host FILE. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "sim/sim.h"
#include "topo.h"

static void usage(FILE* f) {
  fprintf(f,
          "usage: anyccl-topo COMMAND ...\n"
          "  detect [-o OUT.xml]                      print the topology of this machine (NCCL's XML)\n"
          "  load FILE [--host H]                     load and summarise: GPUs, NICs, paths\n"
          "  validate FILE...                         check files; exit 1 on the first error of each\n"
          "  dump FILE [--host H] [-o OUT.xml]        write the topology back as NCCL's XML\n"
          "  draw FILE [--host H] [-o OUT.dot|.svg|.png]  Graphviz drawing (svg/png need 'dot')\n"
          "  rings FILE --hosts N --gpus-per-host G [--channels C]\n"
          "                                           the rings anyccl builds over N hosts of G GPUs\n"
          "--host H selects a host as NCCL_HOSTID=H does (FILE_node<H>.xml, or host H of FILE).\n"
          "FILE.fabric (sim backend cluster) and FILE.calib (calibration): validate, load; draw a .fabric.\n");
}

struct opts {
  const char* file;
  const char* host;
  const char* out;
  int hosts, gpus, channels;
  int nFiles;
  char** files;
};

static int parseOpts(int argc, char** argv, struct opts* o) {
  memset(o, 0, sizeof(*o));
  o->channels = 2;
  o->files = calloc(argc + 1, sizeof(char*));
  for (int i = 0; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if ((!strcmp(a, "-o") || !strcmp(a, "--host") || !strcmp(a, "--hosts") || !strcmp(a, "--gpus-per-host") ||
         !strcmp(a, "--channels")) && v == NULL) {
      fprintf(stderr, "anyccl-topo: %s needs a value\n", a);
      return -1;
    }
    if (!strcmp(a, "-o")) o->out = v, i++;
    else if (!strcmp(a, "--host")) o->host = v, i++;
    else if (!strcmp(a, "--hosts")) o->hosts = atoi(v), i++;
    else if (!strcmp(a, "--gpus-per-host")) o->gpus = atoi(v), i++;
    else if (!strcmp(a, "--channels")) o->channels = atoi(v), i++;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout), exit(0), 0;
    else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "anyccl-topo: unknown option %s\n", a);
      return -1;
    } else o->files[o->nFiles++] = (char*)a;
  }
  o->file = o->nFiles ? o->files[0] : NULL;
  return 0;
}

static struct anycclTopo* load(const struct opts* o) {
  char err[ANYCCL_TOPO_ERR_LEN] = "";
  struct anycclTopo* topo = NULL;
  ncclResult_t res = o->host ? anycclTopoLoadHost(o->file, o->host, &topo, err, sizeof(err))
                             : anycclTopoLoad(o->file, &topo, err, sizeof(err));
  if (res != ncclSuccess) {
    fprintf(stderr, "%s\n", err[0] ? err : "anyccl-topo: loading failed");
    return NULL;
  }
  return topo;
}

static int writeXml(const struct anycclTopo* topo, const char* out) {
  if (out == NULL) return anycclTopoWrite(topo, -1, stdout) == ncclSuccess ? 0 : 1;
  if (anycclTopoWriteFile(topo, -1, out) != ncclSuccess) {
    fprintf(stderr, "anyccl-topo: cannot write %s: %s\n", out, strerror(errno));
    return 1;
  }
  return 0;
}

static void summary(const struct anycclTopo* topo) {
  printf("%s: %d host%s\n", topo->file ? topo->file : "detected", topo->nHosts, topo->nHosts > 1 ? "s" : "");
  for (int hi = 0; hi < topo->nHosts; hi++) {
    const struct anycclTopoHost* h = topo->hosts + hi;
    printf("host %d \"%s\" (host hash 0x%016llx): %d CPU%s, %d GPU%s, %d NIC%s\n", hi, h->name,
           (unsigned long long)h->hostHash, h->nCpus, h->nCpus == 1 ? "" : "s", h->nGpus, h->nGpus == 1 ? "" : "s",
           h->nNets, h->nNets == 1 ? "" : "s");
    for (int g = 0; g < h->nGpus; g++) {
      const struct anycclTopoGpu* gpu = h->gpus + g;
      printf("  GPU%-2d dev %d  %s  sm_%d  NUMA %d", g, gpu->node->gpu.dev, gpu->busId, gpu->node->gpu.sm,
             h->cpus[gpu->cpu]->cpu.numaId);
      if (gpu->nvsBw > 0) printf("  NVSwitch %.1f GB/s", gpu->nvsBw);
      printf("\n");
    }
    for (int n = 0; n < h->nNets; n++) {
      const struct anycclTopoNet* net = h->nets + n;
      printf("  NIC%-2d dev %d  %-10s %s  %.1f GB/s  NUMA %d\n", n, net->node->net.dev, net->node->net.name,
             net->pci ? net->pci->pci.busId : "(no PCI)", net->bw, h->cpus[net->cpu]->cpu.numaId);
    }
    if (h->nGpus == 0) continue;
    printf("  paths (type, GB/s):\n  %7s", "");
    for (int g = 0; g < h->nGpus; g++) printf(" %9s%-2d", "GPU", g);
    for (int n = 0; n < h->nNets; n++) printf(" %9s%-2d", "NIC", n);
    printf("\n");
    for (int a = 0; a < h->nGpus; a++) {
      printf("  GPU%-4d", a);
      for (int b = 0; b < h->nGpus; b++) {
        struct anycclTopoPath p = anycclTopoGpuPath(h, a, b);
        if (a == b) printf(" %11s", "X");
        else printf(" %4s %6.1f", anycclTopoPathName(p.type), p.bw);
      }
      for (int n = 0; n < h->nNets; n++) {
        struct anycclTopoPath p = anycclTopoNetPath(h, a, n);
        printf(" %4s %6.1f", anycclTopoPathName(p.type), p.bw);
      }
      printf("\n");
    }
  }
}

static int endsWith(const char* s, const char* suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A sim fabric or calibration file: 1 if `file` is one (*rc: 0 ok, 1 bad;
 * loaded fabrics go to *fab when it is not NULL). */
static int simFile(const char* file, int* rc, struct simFabric* fab) {
  char err[1024] = "";
  if (endsWith(file, ".calib")) {
    struct simCalib c;
    simCalibDefaults(&c);
    *rc = simCalibLoad(file, &c, err, sizeof(err)) != ncclSuccess;
    if (*rc) fprintf(stderr, "%s\n", err);
    else printf("%s: OK (block %g GB/s, NVLink %g GB/s, launch %g us, steps LL %g / simple %g us; %s model)\n", file,
                c.blockGBps, c.nvlinkGBps, c.launchUs, c.llStepUs, c.simpleStepUs,
                c.model == SIM_MODEL_DATAFLOW ? "dataflow" : "lock-step");
    return 1;
  }
  if (!endsWith(file, ".fabric")) return 0;
  struct simFabric f;
  *rc = simFabricLoad(file, 1, &f, err, sizeof(err)) != ncclSuccess;
  if (*rc) {
    fprintf(stderr, "%s\n", err);
  } else if (fab) {
    *fab = f;
  } else {
    simFabricDescribe(&f, stdout);
    simFabricFree(&f);
  }
  return 1;
}

static int cmdValidate(const struct opts* o) {
  int bad = 0;
  if (o->nFiles == 0) {
    fprintf(stderr, "anyccl-topo validate: no file given\n");
    return 2;
  }
  for (int i = 0; i < o->nFiles; i++) {
    int rc;
    if (simFile(o->files[i], &rc, NULL)) {
      bad |= rc;
      continue;
    }
    char err[ANYCCL_TOPO_ERR_LEN] = "";
    struct anycclTopo* topo = NULL;
    if (anycclTopoLoad(o->files[i], &topo, err, sizeof(err)) != ncclSuccess) {
      fprintf(stderr, "%s\n", err);
      bad = 1;
      continue;
    }
    int g = 0, n = 0;
    for (int h = 0; h < topo->nHosts; h++) g += topo->hosts[h].nGpus, n += topo->hosts[h].nNets;
    printf("%s: OK (%d host%s, %d GPUs, %d NICs)\n", o->files[i], topo->nHosts, topo->nHosts > 1 ? "s" : "", g, n);
    anycclTopoFree(topo);
  }
  return bad;
}

static int runDot(const char* format, const char* dotFile, const char* out) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    char fmt[16];
    snprintf(fmt, sizeof(fmt), "-T%s", format);
    execlp("dot", "dot", fmt, "-o", out, dotFile, (char*)NULL);
    _exit(127);
  }
  int status;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The DOT source of a topology or (topo NULL) a sim fabric. */
static ncclResult_t writeDot(const struct anycclTopo* topo, const struct simFabric* fab, FILE* f) {
  return topo ? anycclTopoWriteDot(topo, -1, f) : simFabricWriteDot(fab, f);
}

static int cmdDraw(const struct opts* o, const struct anycclTopo* topo, const struct simFabric* fab) {
  if (o->out == NULL) return writeDot(topo, fab, stdout) == ncclSuccess ? 0 : 1;
  const char* format = endsWith(o->out, ".svg") ? "svg" : endsWith(o->out, ".png") ? "png" : NULL;
  char dotFile[4096];
  if (format) snprintf(dotFile, sizeof(dotFile), "%.*s.dot", (int)(strlen(o->out) - 4), o->out);
  else snprintf(dotFile, sizeof(dotFile), "%s", o->out);
  FILE* f = fopen(dotFile, "w");
  if (f == NULL) {
    fprintf(stderr, "anyccl-topo: cannot write %s: %s\n", dotFile, strerror(errno));
    return 1;
  }
  int bad = writeDot(topo, fab, f) != ncclSuccess;
  bad |= fclose(f) != 0;
  if (bad) {
    fprintf(stderr, "anyccl-topo: writing %s failed\n", dotFile);
    return 1;
  }
  if (format == NULL) {
    printf("wrote %s\n", dotFile);
    return 0;
  }
  int rc = runDot(format, dotFile, o->out);
  if (rc == 127) {
    fprintf(stderr,
            "anyccl-topo: Graphviz is not installed (no 'dot' in PATH), so %s was not made.\n"
            "  The drawing is in %s; install graphviz (apt-get install graphviz) and run:\n"
            "  dot -T%s -o %s %s\n",
            o->out, dotFile, format, o->out, dotFile);
    return 1;
  }
  if (rc != 0) {
    fprintf(stderr, "anyccl-topo: 'dot -T%s' failed (status %d); the DOT source is %s\n", format, rc, dotFile);
    return 1;
  }
  printf("wrote %s (and %s)\n", o->out, dotFile);
  return 0;
}

static int cmdRings(const struct opts* o) {
  if (o->hosts < 1 || o->gpus < 1 || o->channels < 1) {
    fprintf(stderr, "anyccl-topo rings: need --hosts N (>= 1) and --gpus-per-host G (>= 1); --channels C >= 1\n");
    return 2;
  }
  int nRanks = o->hosts * o->gpus, rc = 1;
  struct anycclTopo** topos = calloc(o->hosts, sizeof(*topos));
  const struct anycclTopoHost** hosts = calloc(o->hosts, sizeof(*hosts));
  struct anycclTopoRank* ranks = calloc(nRanks, sizeof(*ranks));
  struct anycclTopoRings* rings = NULL;
  if (!topos || !hosts || !ranks) goto out;
  for (int h = 0; h < o->hosts; h++) {
    char id[16], err[ANYCCL_TOPO_ERR_LEN] = "", file[4096];
    snprintf(id, sizeof(id), "%d", h);
    anycclTopoHostFile(o->file, id, file, sizeof(file));
    if (anycclTopoLoadHost(o->file, id, &topos[h], err, sizeof(err)) != ncclSuccess) {
      fprintf(stderr, "%s\n", err);
      goto out;
    }
    hosts[h] = topos[h]->hosts;
    if (hosts[h]->nGpus < o->gpus) {
      fprintf(stderr, "anyccl-topo rings: host %d (%s) has %d GPUs, fewer than --gpus-per-host %d\n", h, file,
              hosts[h]->nGpus, o->gpus);
      goto out;
    }
    printf("host %d: %s (%d GPUs, %d NICs)\n", h, file, hosts[h]->nGpus, hosts[h]->nNets);
    for (int g = 0; g < o->gpus; g++) {
      ranks[h * o->gpus + g].host = h;
      snprintf(ranks[h * o->gpus + g].busId, ANYCCL_TOPO_BUSID_LEN, "%s", hosts[h]->gpus[g].busId);
    }
  }
  if (anycclTopoBuildRings(hosts, o->hosts, ranks, nRanks, o->channels, &rings) != ncclSuccess) {
    fprintf(stderr, "anyccl-topo rings: building the rings failed\n");
    goto out;
  }
  printf("%d rank%s (rank = host * %d + GPU), %d channel%s; links: -NVL- within a host, =NET= between hosts\n",
         nRanks, nRanks > 1 ? "s" : "", o->gpus, o->channels, o->channels > 1 ? "s" : "");
  for (int c = 0; c < o->channels; c++) {
    printf("channel %d:", c);
    for (int h = 0; h < o->hosts && o->hosts > 1; h++) {
      int n = rings->nic[c * o->hosts + h];
      printf(" host%d=%s", h, n >= 0 ? hosts[h]->nets[n].node->net.name : "-");
    }
    printf("\n  ");
    for (int i = 0; i < nRanks; i++) {
      int a = rings->order[c * nRanks + i], b = rings->order[c * nRanks + (i + 1) % nRanks];
      int ha = ranks[a].host, hb = ranks[b].host;
      struct anycclTopoPath p = anycclTopoPathBetween(hosts[ha], rings->gpu[a], rings->nic[c * o->hosts + ha],
                                                      hosts[hb], rings->gpu[b], rings->nic[c * o->hosts + hb]);
      if (nRanks == 1) printf("%d", a);
      else if (ha == hb) printf("%d -%s- ", a, anycclTopoPathName(p.type));
      else printf("%d =NET %.0fGB/s= ", a, p.bw);
      if (i == nRanks - 1 && nRanks > 1) printf("(%d)", b);
    }
    printf("\n");
  }
  rc = 0;
out:
  anycclTopoRingsFree(rings);
  for (int h = 0; topos && h < o->hosts; h++) anycclTopoFree(topos[h]);
  free(topos);
  free(hosts);
  free(ranks);
  return rc;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char* cmd = argv[1];
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  struct opts o;
  if (parseOpts(argc - 2, argv + 2, &o) != 0) return 2;
  int rc = 2;
  if (!strcmp(cmd, "detect")) {
    struct anycclTopo* topo;
    if (anycclTopoDetect(&topo) != ncclSuccess) {
      fprintf(stderr, "anyccl-topo: detection failed\n");
      rc = 1;
    } else {
      rc = writeXml(topo, o.out);
      anycclTopoFree(topo);
    }
  } else if (!strcmp(cmd, "validate")) {
    rc = cmdValidate(&o);
  } else if (!strcmp(cmd, "load") || !strcmp(cmd, "dump") || !strcmp(cmd, "draw") || !strcmp(cmd, "rings")) {
    if (o.file == NULL) {
      fprintf(stderr, "anyccl-topo %s: no file given\n", cmd);
    } else if (!strcmp(cmd, "rings")) {
      rc = cmdRings(&o);
    } else if (endsWith(o.file, ".calib") || (endsWith(o.file, ".fabric") && strcmp(cmd, "draw"))) {
      if (!strcmp(cmd, "dump")) fprintf(stderr, "anyccl-topo dump: %s is not an XML topology\n", o.file);
      else simFile(o.file, &rc, NULL);
    } else if (endsWith(o.file, ".fabric")) {
      struct simFabric fab;
      if (simFile(o.file, &rc, &fab) && rc == 0) {
        rc = cmdDraw(&o, NULL, &fab);
        simFabricFree(&fab);
      }
    } else {
      struct anycclTopo* topo = load(&o);
      rc = 1;
      if (topo) {
        if (!strcmp(cmd, "load")) summary(topo), rc = 0;
        else if (!strcmp(cmd, "dump")) rc = writeXml(topo, o.out);
        else rc = cmdDraw(&o, topo, NULL);
        anycclTopoFree(topo);
      }
    }
  } else {
    fprintf(stderr, "anyccl-topo: unknown command %s\n", cmd);
    usage(stderr);
  }
  free(o.files);
  return rc;
}
