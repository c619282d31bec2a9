/* The topology model: elements, attributes, their checks, and the per-host
 * indexes built over a checked tree. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "debug.h"
#include "topo.h"

static const char* kindNames[TOPO_KINDS] = {"cluster", "system", "cpu", "pci", "pcilink",
                                            "gpu",     "nvlink", "c2c", "nic", "net"};

const char* anycclTopoKindName(anycclTopoKind kind) {
  return kind >= 0 && kind < TOPO_KINDS ? kindNames[kind] : "?";
}

ncclResult_t anycclTopoError(char* err, size_t errLen, const char* fmt, ...) {
  char buf[ANYCCL_TOPO_ERR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (err && errLen) {
    /* Keep the first error: later frames add nothing. */
    if (err[0] == '\0') snprintf(err, errLen, "%s", buf);
  } else {
    WARN("%s", buf);
  }
  return ncclInvalidUsage;
}

/* ---- nodes and attributes -------------------------------------------------- */
struct anycclTopoNode* anycclTopoNodeNew(anycclTopoKind kind, struct anycclTopoNode* parent) {
  struct anycclTopoNode* n = calloc(1, sizeof(*n));
  if (n == NULL) return NULL;
  n->kind = kind;
  if (parent) {
    if (parent->nSubs == parent->capSubs) {
      int cap = parent->capSubs ? 2 * parent->capSubs : 4;
      struct anycclTopoNode** s = realloc(parent->subs, cap * sizeof(*s));
      if (s == NULL) {
        free(n);
        return NULL;
      }
      parent->subs = s;
      parent->capSubs = cap;
    }
    parent->subs[parent->nSubs++] = n;
    n->parent = parent;
  }
  return n;
}

void anycclTopoNodeFree(struct anycclTopoNode* node) {
  if (node == NULL) return;
  for (int s = 0; s < node->nSubs; s++) anycclTopoNodeFree(node->subs[s]);
  for (int a = 0; a < node->nAttrs; a++) {
    free(node->attrs[a].key);
    free(node->attrs[a].value);
  }
  free(node->subs);
  free(node->attrs);
  free(node);
}

const char* anycclTopoGetAttr(const struct anycclTopoNode* node, const char* key) {
  for (int a = 0; a < node->nAttrs; a++)
    if (strcmp(node->attrs[a].key, key) == 0) return node->attrs[a].value;
  return NULL;
}

ncclResult_t anycclTopoSetAttr(struct anycclTopoNode* node, const char* key, const char* value) {
  for (int a = 0; a < node->nAttrs; a++) {
    if (strcmp(node->attrs[a].key, key) == 0) {
      char* v = strdup(value);
      if (v == NULL) goto oom;
      free(node->attrs[a].value);
      node->attrs[a].value = v;
      return ncclSuccess;
    }
  }
  if (node->nAttrs == node->capAttrs) {
    int cap = node->capAttrs ? 2 * node->capAttrs : 8;
    struct anycclTopoAttr* at = realloc(node->attrs, cap * sizeof(*at));
    if (at == NULL) goto oom;
    node->attrs = at;
    node->capAttrs = cap;
  }
  char* k = strdup(key);
  char* v = strdup(value);
  if (k == NULL || v == NULL) {
    free(k);
    free(v);
    goto oom;
  }
  node->attrs[node->nAttrs].key = k;
  node->attrs[node->nAttrs].value = v;
  node->nAttrs++;
  return ncclSuccess;
oom:
  WARN("Topology: out of memory setting attribute %s", key);
  return ncclSystemError;
}

/* ---- parsing attribute values -------------------------------------------- */
int anycclTopoParseBusId(const char* s, char out[ANYCCL_TOPO_BUSID_LEN], int64_t* id) {
  /* NCCL's placeholder for an NVLink peer that the VM does not show. */
  if (strcasecmp(s, "fffffff:ffff:ff") == 0) {
    if (out) snprintf(out, ANYCCL_TOPO_BUSID_LEN, "fffffff:ffff:ff");
    if (id) *id = 0xfffffffffffffLL;
    return 0;
  }
  int nd = 0;
  while (isxdigit((unsigned char)s[nd])) nd++;
  if (nd < 1 || nd > 8 || s[nd] != ':') return -1;
  const char* p = s + nd + 1;
  if (!isxdigit((unsigned char)p[0]) || !isxdigit((unsigned char)p[1]) || p[2] != ':') return -1;
  if (!isxdigit((unsigned char)p[3]) || !isxdigit((unsigned char)p[4]) || p[5] != '.') return -1;
  if (p[6] < '0' || p[6] > '7' || p[7] != '\0') return -1;
  unsigned long long dom = strtoull(s, NULL, 16);
  unsigned bus = (unsigned)strtoul((char[]){p[0], p[1], 0}, NULL, 16);
  unsigned dev = (unsigned)strtoul((char[]){p[3], p[4], 0}, NULL, 16);
  if (out) {
    int i = 0;
    for (; s[i] && i < ANYCCL_TOPO_BUSID_LEN - 1; i++) out[i] = (char)tolower((unsigned char)s[i]);
    out[i] = '\0';
  }
  if (id) *id = (int64_t)((dom << 20) | (bus << 12) | (dev << 4) | (unsigned)(p[6] - '0'));
  return 0;
}

static int parseLong(const char* s, int base, long long* v) {
  if (s == NULL || *s == '\0' || isspace((unsigned char)*s)) return -1;
  char* end;
  errno = 0;
  *v = strtoll(s, &end, base);
  return (errno || *end) ? -1 : 0;
}

static int parseHex64(const char* s, uint64_t* v) {
  if (s == NULL || *s == '\0' || isspace((unsigned char)*s) || *s == '-') return -1;
  char* end;
  errno = 0;
  *v = strtoull(s, &end, 16);
  return (errno || *end) ? -1 : 0;
}

/* "16.0 GT/s PCIe", "8 GT/s", "" (unknown): usable Gb/s per lane, as NCCL
 * counts it (8b/10b up to 5 GT/s, 128b/130b and protocol overhead above). */
static int parseLinkSpeed(const char* s, float* laneGbps) {
  if (*s == '\0') {
    *laneGbps = 6.0f; /* unknown: count as PCIe Gen3 */
    return 0;
  }
  char* end;
  errno = 0;
  float gt = strtof(s, &end);
  if (errno || end == s || gt <= 0) return -1;
  if (strcmp(end, " GT/s") != 0 && strcmp(end, " GT/s PCIe") != 0) return -1;
  *laneGbps = gt <= 5.0f ? gt * 0.6f : gt * 0.75f;
  return 0;
}

static int validAffinity(const char* s) {
  int digits = 0;
  for (; *s; s++) {
    if (*s == ',') {
      if (digits == 0) return 0;
      digits = 0;
    } else if (isxdigit((unsigned char)*s)) {
      digits++;
    } else {
      return 0;
    }
  }
  return digits > 0;
}

/* ---- element checks --------------------------------------------------------- */
struct checkCtx {
  struct anycclTopoNode* node;
  const char* file;
  char* err;
  size_t errLen;
};

static void where(const struct checkCtx* c, char* buf, size_t len) {
  if (c->node->line > 0) snprintf(buf, len, "%s:%d", c->file, c->node->line);
  else snprintf(buf, len, "%s", c->file);
}

static ncclResult_t missing(const struct checkCtx* c, const char* key, const char* what) {
  char w[300];
  where(c, w, sizeof(w));
  return anycclTopoError(c->err, c->errLen, "%s: <%s> is missing attribute \"%s\" (%s)", w,
                         kindNames[c->node->kind], key, what);
}

static ncclResult_t bad(const struct checkCtx* c, const char* key, const char* what, const char* got) {
  char w[300];
  where(c, w, sizeof(w));
  return anycclTopoError(c->err, c->errLen, "%s: <%s> attribute \"%s\": expected %s, got \"%s\"", w,
                         kindNames[c->node->kind], key, what, got);
}

/* An integer attribute in [lo, hi]; absent: *v = dflt, an error if required. */
static ncclResult_t getInt(const struct checkCtx* c, const char* key, int required, long long lo, long long hi,
                           int dflt, int* v) {
  const char* s = anycclTopoGetAttr(c->node, key);
  char what[96];
  if (lo == -1 && hi > 1000000) snprintf(what, sizeof(what), "an integer (-1 or more)");
  else if (hi > 1000000) snprintf(what, sizeof(what), "an integer (%lld or more)", lo);
  else snprintf(what, sizeof(what), "an integer in %lld..%lld", lo, hi);
  if (s == NULL) {
    if (required) return missing(c, key, what);
    *v = dflt;
    return ncclSuccess;
  }
  long long x;
  if (parseLong(s, 0, &x) != 0 || x < lo || x > hi) return bad(c, key, what, s);
  *v = (int)x;
  return ncclSuccess;
}

static ncclResult_t getHexAttr(const struct checkCtx* c, const char* key, int required, uint64_t max, uint64_t* v) {
  const char* s = anycclTopoGetAttr(c->node, key);
  const char* what = max == 0xffffff ? "a PCI class such as \"0x060400\"" : "a hexadecimal number such as \"0x10de\"";
  if (s == NULL) {
    if (required) return missing(c, key, what);
    return ncclSuccess;
  }
  if (parseHex64(s, v) != 0 || *v > max) return bad(c, key, what, s);
  return ncclSuccess;
}

static ncclResult_t getBusId(const struct checkCtx* c, const char* key, char out[ANYCCL_TOPO_BUSID_LEN],
                             int64_t* id) {
  const char* s = anycclTopoGetAttr(c->node, key);
  const char* what = "a PCI bus id such as \"0000:17:00.0\"";
  if (s == NULL) return missing(c, key, what);
  if (anycclTopoParseBusId(s, out, id) != 0) return bad(c, key, what, s);
  return ncclSuccess;
}

static ncclResult_t checkSystem(struct checkCtx* c) {
  struct anycclTopoNode* n = c->node;
  if (anycclTopoGetAttr(n, "version") == NULL) return missing(c, "version", "NCCL's topology format version, 1");
  NCCLCHECK(getInt(c, "version", 1, 0, 1000000000, 0, &n->system.version));
  if (n->system.version != 1) return bad(c, "version", "1 (NCCL's topology format version)", anycclTopoGetAttr(n, "version"));
  return ncclSuccess;
}

static ncclResult_t checkCpu(struct checkCtx* c) {
  struct anycclTopoNode* n = c->node;
  NCCLCHECK(getInt(c, "numaid", 1, -1, 1 << 20, 0, &n->cpu.numaId));
  const char* s = anycclTopoGetAttr(n, "host_hash");
  if (s) {
    if (parseHex64(s, &n->cpu.hostHash) != 0) return bad(c, "host_hash", "a hexadecimal number such as \"0x5d3f0a1b2c3d4e5f\"", s);
    n->cpu.hasHostHash = 1;
  }
  s = anycclTopoGetAttr(n, "affinity");
  if (s && !validAffinity(s)) return bad(c, "affinity", "a CPU mask such as \"00000000,00ffffff\"", s);
  const char* archWhat = "one of x86_64, arm64, ppc64";
  s = anycclTopoGetAttr(n, "arch");
  if (s == NULL) return missing(c, "arch", archWhat);
  if (strcmp(s, "x86_64") == 0) n->cpu.arch = TOPO_ARCH_X86;
  else if (strcmp(s, "arm64") == 0) n->cpu.arch = TOPO_ARCH_ARM;
  else if (strcmp(s, "ppc64") == 0) n->cpu.arch = TOPO_ARCH_POWER;
  else return bad(c, "arch", archWhat, s);
  n->cpu.vendor = TOPO_VENDOR_OTHER;
  if (n->cpu.arch != TOPO_ARCH_X86) return ncclSuccess;
  s = anycclTopoGetAttr(n, "vendor");
  if (s == NULL) return missing(c, "vendor", "the CPU vendor id, such as GenuineIntel or AuthenticAMD; required on x86_64");
  if (strcmp(s, "GenuineIntel") == 0) n->cpu.vendor = TOPO_VENDOR_INTEL;
  else if (strcmp(s, "AuthenticAMD") == 0) n->cpu.vendor = TOPO_VENDOR_AMD;
  else if (strcmp(s, "CentaurHauls") == 0 || strcmp(s, "  Shanghai  ") == 0) n->cpu.vendor = TOPO_VENDOR_ZHAOXIN;
  int needModel = n->cpu.vendor == TOPO_VENDOR_INTEL || n->cpu.vendor == TOPO_VENDOR_ZHAOXIN;
  NCCLCHECK(getInt(c, "familyid", needModel, 0, 1 << 20, 0, &n->cpu.familyId));
  NCCLCHECK(getInt(c, "modelid", needModel, 0, 1 << 20, 0, &n->cpu.modelId));
  return ncclSuccess;
}

static ncclResult_t checkPci(struct checkCtx* c) {
  struct anycclTopoNode* n = c->node;
  NCCLCHECK(getBusId(c, "busid", n->pci.busId, &n->pci.id));
  uint64_t v = 0;
  NCCLCHECK(getHexAttr(c, "class", 1, 0xffffff, &v));
  n->pci.cls = (int)v;
  static const char* const ids[] = {"vendor", "device", "subsystem_vendor", "subsystem_device"};
  for (int i = 0; i < 4; i++) NCCLCHECK(getHexAttr(c, ids[i], 0, 0xffff, &v));
  const char* s = anycclTopoGetAttr(n, "link_speed");
  const char* speedWhat = "a PCIe link speed such as \"16.0 GT/s PCIe\" or \"8 GT/s\" (empty: unknown)";
  if (s == NULL) return missing(c, "link_speed", speedWhat);
  if (parseLinkSpeed(s, &n->pci.laneGbps) != 0) return bad(c, "link_speed", speedWhat, s);
  s = anycclTopoGetAttr(n, "link_width");
  if (s == NULL) return missing(c, "link_width", "the number of PCIe lanes, such as 16");
  if (*s == '\0') {
    n->pci.width = 0;
  } else {
    NCCLCHECK(getInt(c, "link_width", 1, 0, 64, 0, &n->pci.width));
  }
  n->pci.bw = (n->pci.width ? n->pci.width : 16) * n->pci.laneGbps / 8.0f;
  return ncclSuccess;
}

static ncclResult_t checkGpu(struct checkCtx* c) {
  struct anycclTopoNode* n = c->node;
  NCCLCHECK(getInt(c, "dev", 1, 0, 1 << 20, 0, &n->gpu.dev));
  NCCLCHECK(getInt(c, "sm", 1, 10, 10000, 0, &n->gpu.sm));
  NCCLCHECK(getInt(c, "rank", 0, -1, 1 << 30, -1, &n->gpu.rank));
  NCCLCHECK(getInt(c, "gdr", 0, 0, 1, 0, &n->gpu.gdr));
  return ncclSuccess;
}

static ncclResult_t checkNvlink(struct checkCtx* c) {
  struct anycclTopoNode* n = c->node;
  int64_t id;
  NCCLCHECK(getBusId(c, "target", n->nvlink.target, &id));
  NCCLCHECK(getInt(c, "count", 1, 1, 1024, 0, &n->nvlink.count));
  uint64_t v = 0;
  NCCLCHECK(getHexAttr(c, "tclass", 1, 0xffffff, &v));
  n->nvlink.tclass = (int)v;
  return ncclSuccess;
}

static ncclResult_t checkNet(struct checkCtx* c) {
  struct anycclTopoNode* n = c->node;
  n->net.name = anycclTopoGetAttr(n, "name");
  if (n->net.name == NULL) return missing(c, "name", "the network device name, such as mlx5_0 or eth0");
  if (n->net.name[0] == '\0') return bad(c, "name", "a network device name, such as mlx5_0 or eth0", "");
  NCCLCHECK(getInt(c, "dev", 1, 0, 1 << 20, 0, &n->net.dev));
  NCCLCHECK(getInt(c, "speed", 0, -1, 1 << 30, 0, &n->net.speed));
  NCCLCHECK(getInt(c, "port", 0, 0, 1 << 20, 0, &n->net.port));
  NCCLCHECK(getInt(c, "maxconn", 0, 0, 1 << 30, 65536, &n->net.maxconn));
  NCCLCHECK(getInt(c, "gdr", 0, 0, 1, 0, &n->net.gdr));
  int coll;
  NCCLCHECK(getInt(c, "coll", 0, 0, 1, 0, &coll));
  const char* s = anycclTopoGetAttr(n, "latency");
  n->net.latency = 0;
  if (s) {
    char* end;
    errno = 0;
    n->net.latency = strtof(s, &end);
    if (*s == '\0' || errno || *end || n->net.latency < 0) return bad(c, "latency", "a number of microseconds, such as \"0.000000\"", s);
  }
  s = anycclTopoGetAttr(n, "guid");
  n->net.guid = 0;
  if (s && parseHex64(s, &n->net.guid) != 0) return bad(c, "guid", "a hexadecimal number such as \"0x1c34da0300a1b2c3\"", s);
  return ncclSuccess;
}

ncclResult_t anycclTopoCheckNode(struct anycclTopoNode* node, const char* file, char* err, size_t errLen) {
  struct checkCtx c = {node, file ? file : "(topology)", err, errLen};
  switch (node->kind) {
  case TOPO_SYSTEM: return checkSystem(&c);
  case TOPO_CPU: return checkCpu(&c);
  case TOPO_PCI: return checkPci(&c);
  case TOPO_GPU: return checkGpu(&c);
  case TOPO_NVLINK: return checkNvlink(&c);
  case TOPO_NET: return checkNet(&c);
  case TOPO_C2C:
    NCCLCHECK(getInt(&c, "bw", 1, 0, 1 << 30, 0, &node->c2c.bw));
    return getInt(&c, "count", 1, 0, 1 << 20, 0, &node->c2c.count);
  case TOPO_PCILINK: {
    int64_t id;
    return getBusId(&c, "target", node->pcilink.target, &id);
  }
  default: return ncclSuccess;
  }
}

/* ---- hosts ---------------------------------------------------------------- */
static void hostFree(struct anycclTopoHost* h) {
  free(h->cpus);
  free(h->gpus);
  free(h->nets);
  free(h->gpuPaths);
  free(h->netPaths);
}

void anycclTopoFree(struct anycclTopo* topo) {
  if (topo == NULL) return;
  for (int h = 0; h < topo->nHosts; h++) hostFree(topo->hosts + h);
  free(topo->hosts);
  anycclTopoNodeFree(topo->root);
  free(topo->file);
  free(topo);
}

struct hostBuild {
  struct anycclTopoHost* h;
  const char* file;
  char* err;
  size_t errLen;
  int capGpus, capNets;
  /* every <pci> of the host, to find duplicated bus ids */
  struct anycclTopoNode** pcis;
  int nPcis, capPcis;
};

static int grow(void** arr, int* cap, int n, size_t elem) {
  if (n < *cap) return 0;
  int c = *cap ? 2 * *cap : 8;
  void* p = realloc(*arr, c * elem);
  if (p == NULL) return -1;
  *arr = p;
  *cap = c;
  return 0;
}

static ncclResult_t collect(struct hostBuild* b, struct anycclTopoNode* n, int cpu) {
  struct anycclTopoHost* h = b->h;
  if (n->kind == TOPO_PCI) {
    if (grow((void**)&b->pcis, &b->capPcis, b->nPcis, sizeof(*b->pcis))) return ncclSystemError;
    b->pcis[b->nPcis++] = n;
  }
  if (n->kind == TOPO_GPU) {
    struct anycclTopoNode* pci = n->parent;
    for (int s = 0; s < pci->nSubs && pci->subs[s] != n; s++) {
      if (pci->subs[s]->kind == TOPO_GPU) {
        INFO(NCCL_GRAPH, "%s:%d: ignoring a second <gpu> in <pci busid=\"%s\">", b->file, n->line, pci->pci.busId);
        return ncclSuccess;
      }
    }
    if (grow((void**)&h->gpus, &b->capGpus, h->nGpus, sizeof(*h->gpus))) return ncclSystemError;
    struct anycclTopoGpu* g = h->gpus + h->nGpus++;
    memset(g, 0, sizeof(*g));
    g->node = n;
    g->pci = pci;
    g->busId = pci->pci.busId;
    g->cpu = cpu;
  }
  if (n->kind == TOPO_NET) {
    if (grow((void**)&h->nets, &b->capNets, h->nNets, sizeof(*h->nets))) return ncclSystemError;
    struct anycclTopoNet* t = h->nets + h->nNets++;
    memset(t, 0, sizeof(*t));
    t->node = n;
    struct anycclTopoNode* nic = n->parent;
    t->pci = nic->parent->kind == TOPO_PCI ? nic->parent : NULL;
    t->cpu = cpu;
    t->bw = (n->net.speed > 0 ? n->net.speed : 10000) / 8000.0f;
  }
  for (int s = 0; s < n->nSubs; s++) NCCLCHECK(collect(b, n->subs[s], cpu));
  return ncclSuccess;
}

static int cmpGpu(const void* x, const void* y) {
  const struct anycclTopoGpu *a = x, *b = y;
  if (a->node->gpu.dev != b->node->gpu.dev) return a->node->gpu.dev < b->node->gpu.dev ? -1 : 1;
  return a->pci->pci.id < b->pci->pci.id ? -1 : a->pci->pci.id > b->pci->pci.id;
}
static int cmpNet(const void* x, const void* y) {
  const struct anycclTopoNet *a = x, *b = y;
  return a->node->net.dev < b->node->net.dev ? -1 : a->node->net.dev > b->node->net.dev;
}
static int cmpPci(const void* x, const void* y) {
  const struct anycclTopoNode *a = *(struct anycclTopoNode* const*)x, *b = *(struct anycclTopoNode* const*)y;
  if (a->pci.id != b->pci.id) return a->pci.id < b->pci.id ? -1 : 1;
  return a->line - b->line;
}

static ncclResult_t buildHost(struct anycclTopoHost* h, const char* file, char* err, size_t errLen) {
  struct hostBuild b = {h, file, err, errLen, 0, 0, NULL, 0, 0};
  ncclResult_t res = ncclSuccess;
  for (int c = 0; c < h->nCpus; c++) NCCLCHECKGOTO(collect(&b, h->cpus[c], c), res, out);
  if (b.nPcis > 1) qsort(b.pcis, b.nPcis, sizeof(*b.pcis), cmpPci);
  for (int i = 1; i < b.nPcis; i++) {
    if (b.pcis[i]->pci.id == b.pcis[i - 1]->pci.id) {
      res = anycclTopoError(err, errLen, "%s:%d: <pci> attribute \"busid\": expected a bus id unique on host %s, got \"%s\" again (first at line %d)",
                            file, b.pcis[i]->line, h->name, b.pcis[i]->pci.busId, b.pcis[i - 1]->line);
      goto out;
    }
  }
  if (h->nGpus > 1) qsort(h->gpus, h->nGpus, sizeof(*h->gpus), cmpGpu);
  if (h->nNets > 1) qsort(h->nets, h->nNets, sizeof(*h->nets), cmpNet);
  for (int i = 1; i < h->nNets; i++) {
    if (h->nets[i].node->net.dev == h->nets[i - 1].node->net.dev) {
      const struct anycclTopoNode* n = h->nets[i].node;
      int l0 = h->nets[i - 1].node->line;
      res = anycclTopoError(err, errLen, "%s:%d: <net> attribute \"dev\": expected a device number unique on host %s, got \"%d\" again (first at line %d)",
                            file, n->line, h->name, n->net.dev, l0 < n->line ? l0 : h->nets[i].node->line);
      goto out;
    }
  }
  NCCLCHECKGOTO(anycclTopoComputePaths(h), res, out);
out:
  free(b.pcis);
  return res;
}

/* Split one <system> into hosts by the host_hash of its <cpu> elements. */
static ncclResult_t addHostsOfSystem(struct anycclTopo* topo, struct anycclTopoNode* sys, int split) {
  uint64_t hashes[64];
  int nHash = 0;
  if (split) {
    for (int s = 0; s < sys->nSubs; s++) {
      struct anycclTopoNode* cpu = sys->subs[s];
      if (!cpu->cpu.hasHostHash) continue;
      int k = 0;
      while (k < nHash && hashes[k] != cpu->cpu.hostHash) k++;
      if (k == nHash && nHash < 64) hashes[nHash++] = cpu->cpu.hostHash;
    }
  }
  int nNew = nHash > 1 ? nHash : 1;
  struct anycclTopoHost* hs = realloc(topo->hosts, (topo->nHosts + nNew) * sizeof(*hs));
  if (hs == NULL) return ncclSystemError;
  topo->hosts = hs;
  for (int k = 0; k < nNew; k++) {
    struct anycclTopoHost* h = topo->hosts + topo->nHosts;
    memset(h, 0, sizeof(*h));
    h->index = topo->nHosts++;
    h->system = sys;
    ANYCCL_CALLOC(h->cpus, sys->nSubs > 0 ? sys->nSubs : 1);
    for (int s = 0; s < sys->nSubs; s++) {
      struct anycclTopoNode* cpu = sys->subs[s];
      int mine = nNew == 1 || (cpu->cpu.hasHostHash ? cpu->cpu.hostHash == hashes[k] : k == 0);
      if (mine) h->cpus[h->nCpus++] = cpu;
    }
    const char* id = anycclTopoGetAttr(sys, "hostid");
    if (id && nNew == 1) snprintf(h->name, sizeof(h->name), "%s", id);
    else snprintf(h->name, sizeof(h->name), "%d", h->index);
    if (id && nNew == 1) h->hostHash = anycclTopoHostHash(id);
    else if (nNew > 1) h->hostHash = hashes[k];
    else if (h->nCpus > 0 && h->cpus[0]->cpu.hasHostHash) h->hostHash = h->cpus[0]->cpu.hostHash;
    else h->hostHash = anycclTopoHostHash(h->name);
  }
  return ncclSuccess;
}

ncclResult_t anycclTopoFinish(struct anycclTopo* topo, char* err, size_t errLen) {
  const char* file = topo->file ? topo->file : "(topology)";
  struct anycclTopoNode* root = topo->root;
  if (root == NULL) return anycclTopoError(err, errLen, "%s: no <system> element", file);
  if (root->kind == TOPO_SYSTEM) {
    NCCLCHECK(addHostsOfSystem(topo, root, 1));
  } else {
    for (int s = 0; s < root->nSubs; s++) NCCLCHECK(addHostsOfSystem(topo, root->subs[s], 0));
    if (topo->nHosts == 0) return anycclTopoError(err, errLen, "%s:%d: <cluster> holds no <system>", file, root->line);
  }
  for (int h = 0; h < topo->nHosts; h++) NCCLCHECK(buildHost(topo->hosts + h, file, err, errLen));
  return ncclSuccess;
}

/* ---- comparison ------------------------------------------------------------- */
static int nodeEqual(const struct anycclTopoNode* a, const struct anycclTopoNode* b, char* why, size_t len) {
  if (a->kind != b->kind) {
    snprintf(why, len, "<%s> (line %d) vs <%s> (line %d)", kindNames[a->kind], a->line, kindNames[b->kind], b->line);
    return 0;
  }
  if (a->nAttrs != b->nAttrs) {
    snprintf(why, len, "<%s> (line %d vs %d): %d vs %d attributes", kindNames[a->kind], a->line, b->line, a->nAttrs,
             b->nAttrs);
    return 0;
  }
  for (int i = 0; i < a->nAttrs; i++) {
    if (strcmp(a->attrs[i].key, b->attrs[i].key) || strcmp(a->attrs[i].value, b->attrs[i].value)) {
      snprintf(why, len, "<%s> (line %d vs %d): %s=\"%s\" vs %s=\"%s\"", kindNames[a->kind], a->line, b->line,
               a->attrs[i].key, a->attrs[i].value, b->attrs[i].key, b->attrs[i].value);
      return 0;
    }
  }
  if (a->nSubs != b->nSubs) {
    snprintf(why, len, "<%s> (line %d vs %d): %d vs %d children", kindNames[a->kind], a->line, b->line, a->nSubs,
             b->nSubs);
    return 0;
  }
  for (int s = 0; s < a->nSubs; s++)
    if (!nodeEqual(a->subs[s], b->subs[s], why, len)) return 0;
  return 1;
}

int anycclTopoEqual(const struct anycclTopo* a, const struct anycclTopo* b, char* why, size_t whyLen) {
  char tmp[512];
  if (why == NULL || whyLen == 0) why = tmp, whyLen = sizeof(tmp);
  why[0] = '\0';
  if (a->root == NULL || b->root == NULL) {
    snprintf(why, whyLen, "an empty topology");
    return a->root == b->root;
  }
  if (a->nHosts != b->nHosts) {
    snprintf(why, whyLen, "%d vs %d hosts", a->nHosts, b->nHosts);
    return 0;
  }
  return nodeEqual(a->root, b->root, why, whyLen);
}
