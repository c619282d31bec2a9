/* Paths between the GPUs of a host, and from GPUs to NICs: their type (NVL,
 * NVB, PIX, PXB, PHB, SYS; NET across hosts) and bandwidth (the narrowest
 * link on the way), with NCCL's link speeds. */
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "debug.h"
#include "topo.h"

#define LOC_BW 5000.0f

static const char* pathNames[] = {"LOC", "NVL", "NVB", "PIX", "PXB", "PHB", "SYS", "NET", "DIS"};

const char* anycclTopoPathName(int type) {
  return type >= 0 && type <= TOPO_PATH_DIS ? pathNames[type] : "?";
}

const char* anycclTopoTransportName(int transport) {
  static const char* names[] = {"P2P", "SHM", "NET"};
  return transport >= 0 && transport <= TOPO_TRANSPORT_NET ? names[transport] : "?";
}

/* NCCL's default P2P level is PXB: beyond it (through the CPU) shared memory
 * is used; across hosts the network. */
anycclTopoTransport anycclTopoPathTransport(int type) {
  if (type >= TOPO_PATH_NET) return TOPO_TRANSPORT_NET;
  if (type >= TOPO_PATH_PHB) return TOPO_TRANSPORT_SHM;
  return TOPO_TRANSPORT_P2P;
}

/* GB/s of one NVLink, by compute capability (NCCL's figures). */
static float nvlinkBw(int sm) {
  if (sm < 70) return 18.0f;
  if (sm < 80) return 20.0f;
  if (sm < 86) return 20.0f;
  if (sm < 90) return 12.0f;
  if (sm < 100) return 20.6f;
  return 40.1f;
}

/* GB/s between two CPU sockets / NUMA nodes. */
static float interCpuBw(const struct anycclTopoNode* cpu) {
  switch (cpu->cpu.arch) {
  case TOPO_ARCH_POWER: return 32.0f;
  case TOPO_ARCH_ARM: return 6.0f;
  default: break;
  }
  switch (cpu->cpu.vendor) {
  case TOPO_VENDOR_INTEL:
    if (cpu->cpu.familyId == 6 && cpu->cpu.modelId >= 0xCF) return 40.0f; /* Emerald Rapids */
    if (cpu->cpu.familyId == 6 && cpu->cpu.modelId >= 0x8F) return 22.0f; /* Sapphire Rapids */
    if (cpu->cpu.familyId == 6 && cpu->cpu.modelId >= 0x55) return 10.0f; /* Skylake */
    return 6.0f;                                                          /* Broadwell */
  case TOPO_VENDOR_AMD: return 16.0f;
  case TOPO_VENDOR_ZHAOXIN: return cpu->cpu.familyId == 7 && cpu->cpu.modelId == 0x5B ? 9.0f : 6.0f;
  default: return 6.0f;
  }
}

static float minf(float a, float b) { return a < b ? a : b; }

/* GB/s of the direct NVLinks from GPU a to GPU b (as a lists them, else as b does). */
static float directNvl(const struct anycclTopoGpu* a, const struct anycclTopoGpu* b) {
  float bw = 0;
  for (int pass = 0; pass < 2 && bw == 0; pass++) {
    const struct anycclTopoGpu *from = pass ? b : a, *to = pass ? a : b;
    for (int s = 0; s < from->node->nSubs; s++) {
      const struct anycclTopoNode* l = from->node->subs[s];
      if (l->kind == TOPO_NVLINK && (l->nvlink.tclass >> 16) == 0x03 && strcmp(l->nvlink.target, to->busId) == 0)
        bw += l->nvlink.count * nvlinkBw(from->node->gpu.sm);
    }
  }
  return bw;
}

#define MAX_DEPTH 64
/* The chain from a node up to its <cpu>: chain[0] = node. */
static int ancestors(const struct anycclTopoNode* n, const struct anycclTopoNode** chain) {
  int k = 0;
  while (n && k < MAX_DEPTH) {
    chain[k++] = n;
    if (n->kind == TOPO_CPU) break;
    n = n->parent;
  }
  return k;
}

/* Path between two attachment points (a <pci> or a <cpu>) of one host. */
static struct anycclTopoPath pciPath(const struct anycclTopoNode* x, const struct anycclTopoNode* y) {
  const struct anycclTopoNode *cx[MAX_DEPTH], *cy[MAX_DEPTH];
  int nx = ancestors(x, cx), ny = ancestors(y, cy);
  struct anycclTopoPath p = {TOPO_PATH_DIS, 0};
  if (x == y) return (struct anycclTopoPath){TOPO_PATH_LOC, LOC_BW};
  /* Lowest common ancestor: i in cx, j in cy. */
  int li = -1, lj = -1;
  for (int i = 0; i < nx && li < 0; i++)
    for (int j = 0; j < ny; j++)
      if (cx[i] == cy[j]) {
        li = i, lj = j;
        break;
      }
  float bw = LOC_BW;
  int iEnd = li >= 0 ? li : nx, jEnd = lj >= 0 ? lj : ny;
  for (int i = 0; i < iEnd; i++)
    if (cx[i]->kind == TOPO_PCI) bw = minf(bw, cx[i]->pci.bw);
  for (int j = 0; j < jEnd; j++)
    if (cy[j]->kind == TOPO_PCI) bw = minf(bw, cy[j]->pci.bw);
  if (li < 0) { /* different CPUs */
    const struct anycclTopoNode* cpu = cx[nx - 1];
    if (cpu->kind != TOPO_CPU || cy[ny - 1]->kind != TOPO_CPU) return p;
    p.type = TOPO_PATH_SYS;
    p.bw = minf(bw, minf(interCpuBw(cpu), interCpuBw(cy[ny - 1])));
    return p;
  }
  if (cx[li]->kind == TOPO_CPU) {
    p.type = TOPO_PATH_PHB;
  } else {
    /* PCIe switches between the two ends: the common one and those below it. */
    int switches = (li > 1 ? li - 1 : 0) + (lj > 1 ? lj - 1 : 0); /* strictly below the common one */
    if (li > 0 && lj > 0) switches++;                               /* the common one, unless an end */
    p.type = switches <= 1 ? TOPO_PATH_PIX : TOPO_PATH_PXB;
  }
  p.bw = bw;
  return p;
}

static const struct anycclTopoNode* netAttach(const struct anycclTopoHost* h, int n) {
  return h->nets[n].pci ? h->nets[n].pci : h->cpus[h->nets[n].cpu];
}

ncclResult_t anycclTopoComputePaths(struct anycclTopoHost* h) {
  int ng = h->nGpus, nn = h->nNets;
  free(h->gpuPaths);
  free(h->netPaths);
  h->gpuPaths = NULL;
  h->netPaths = NULL;
  ANYCCL_CALLOC(h->gpuPaths, ng * ng > 0 ? ng * ng : 1);
  ANYCCL_CALLOC(h->netPaths, ng * nn > 0 ? ng * nn : 1);
  for (int g = 0; g < ng; g++) {
    struct anycclTopoGpu* gpu = h->gpus + g;
    int links = 0;
    for (int s = 0; s < gpu->node->nSubs; s++) {
      const struct anycclTopoNode* l = gpu->node->subs[s];
      if (l->kind == TOPO_NVLINK && l->nvlink.tclass == TOPO_CLASS_NVSWITCH) links += l->nvlink.count;
    }
    gpu->nvsBw = links * nvlinkBw(gpu->node->gpu.sm);
  }
  for (int a = 0; a < ng; a++) {
    for (int b = 0; b < ng; b++) {
      struct anycclTopoPath* p = h->gpuPaths + a * ng + b;
      const struct anycclTopoGpu *ga = h->gpus + a, *gb = h->gpus + b;
      if (a == b) {
        *p = (struct anycclTopoPath){TOPO_PATH_LOC, LOC_BW};
        continue;
      }
      float nvl = directNvl(ga, gb);
      if (ga->nvsBw > 0 && gb->nvsBw > 0 && minf(ga->nvsBw, gb->nvsBw) > nvl) nvl = minf(ga->nvsBw, gb->nvsBw);
      if (nvl > 0) {
        *p = (struct anycclTopoPath){TOPO_PATH_NVL, nvl};
        continue;
      }
      float nvb = 0;
      for (int c = 0; c < ng; c++) {
        if (c == a || c == b) continue;
        float bw = minf(directNvl(ga, h->gpus + c), directNvl(h->gpus + c, gb));
        if (bw > nvb) nvb = bw;
      }
      if (nvb > 0) *p = (struct anycclTopoPath){TOPO_PATH_NVB, nvb};
      else *p = pciPath(ga->pci, gb->pci);
    }
    for (int n = 0; n < nn; n++) {
      struct anycclTopoPath p = pciPath(h->gpus[a].pci, netAttach(h, n));
      if (p.type == TOPO_PATH_LOC) p.type = TOPO_PATH_PIX;
      p.bw = minf(p.bw, h->nets[n].bw);
      h->netPaths[a * nn + n] = p;
    }
  }
  return ncclSuccess;
}

int anycclTopoFindGpu(const struct anycclTopoHost* host, const char* busId) {
  char norm[ANYCCL_TOPO_BUSID_LEN];
  if (host == NULL || anycclTopoParseBusId(busId, norm, NULL) != 0) return -1;
  for (int g = 0; g < host->nGpus; g++)
    if (strcmp(host->gpus[g].busId, norm) == 0) return g;
  return -1;
}

struct anycclTopoPath anycclTopoGpuPath(const struct anycclTopoHost* h, int a, int b) {
  if (a < 0 || b < 0 || a >= h->nGpus || b >= h->nGpus) return (struct anycclTopoPath){TOPO_PATH_DIS, 0};
  return h->gpuPaths[a * h->nGpus + b];
}

struct anycclTopoPath anycclTopoNetPath(const struct anycclTopoHost* h, int g, int n) {
  if (g < 0 || n < 0 || g >= h->nGpus || n >= h->nNets) return (struct anycclTopoPath){TOPO_PATH_DIS, 0};
  return h->netPaths[g * h->nNets + n];
}

/* Better: lower type, then more bandwidth. */
static int better(struct anycclTopoPath x, struct anycclTopoPath y) {
  return x.type < y.type || (x.type == y.type && x.bw > y.bw);
}

static int bestNet(const struct anycclTopoHost* h, int g) {
  int best = -1;
  for (int n = 0; n < h->nNets; n++)
    if (best < 0 || better(anycclTopoNetPath(h, g, n), anycclTopoNetPath(h, g, best))) best = n;
  return best;
}

struct anycclTopoPath anycclTopoPathBetween(const struct anycclTopoHost* ha, int a, int na,
                                            const struct anycclTopoHost* hb, int b, int nb) {
  if (ha == hb) return anycclTopoGpuPath(ha, a, b);
  struct anycclTopoPath p = {TOPO_PATH_NET, 1.25f}; /* no NIC known: a 10 Gb/s socket */
  float bw = LOC_BW;
  int any = 0;
  if (ha && a >= 0 && a < ha->nGpus) {
    if (na < 0) na = bestNet(ha, a);
    if (na >= 0) bw = minf(bw, anycclTopoNetPath(ha, a, na).bw), any = 1;
  }
  if (hb && b >= 0 && b < hb->nGpus) {
    if (nb < 0) nb = bestNet(hb, b);
    if (nb >= 0) bw = minf(bw, anycclTopoNetPath(hb, b, nb).bw), any = 1;
  }
  if (any) p.bw = bw;
  return p;
}
