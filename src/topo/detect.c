/* Detection of the machine we run on, into the same tree a file gives:
 * NUMA nodes (/sys/devices/system/node) as <cpu>, NICs (/sys/class/infiniband
 * and /sys/class/net) with their PCIe paths, GPUs and NVLinks through NVML
 * when libnvidia-ml.so.1 is present (dlopen: no link dependency). PCIe paths
 * follow NCCL: from a device, two levels up at a time (skipping the switch's
 * downstream port), up to the root complex, which is the <cpu>. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>
#include "checks.h"
#include "debug.h"
#include "param.h"
#include "topo.h"

static int readSys(const char* path, char* buf, size_t len) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  int bad = ferror(f);
  fclose(f);
  if (bad) return -1;
  buf[n] = '\0';
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) buf[--n] = '\0';
  return 0;
}

static int readSysAt(const char* dir, const char* name, char* buf, size_t len) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path)) return -1;
  return readSys(path, buf, len);
}

static int isBdf(const char* s) {
  char norm[ANYCCL_TOPO_BUSID_LEN];
  return strlen(s) == 12 && anycclTopoParseBusId(s, norm, NULL) == 0;
}

struct detect {
  struct anycclTopoNode* sys;
  char hostHash[32];
  int gdr; /* GPUDirect RDMA kernel module loaded */
};

/* ---- CPUs ----------------------------------------------------------------- */
static ncclResult_t setCpuIdentity(struct anycclTopoNode* cpu) {
  struct utsname u;
  const char* arch = "x86_64";
  if (uname(&u) == 0) {
    if (strcmp(u.machine, "aarch64") == 0 || strcmp(u.machine, "arm64") == 0) arch = "arm64";
    else if (strncmp(u.machine, "ppc64", 5) == 0) arch = "ppc64";
  }
  NCCLCHECK(anycclTopoSetAttr(cpu, "arch", arch));
  if (strcmp(arch, "x86_64") != 0) return ncclSuccess;
  char vendor[64] = "", family[16] = "0", model[16] = "0", line[512];
  FILE* f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof(line), f)) {
    char* colon = strchr(line, ':');
    if (colon == NULL) continue;
    char* v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    v[strcspn(v, "\n")] = '\0';
    if (strncmp(line, "vendor_id", 9) == 0 && vendor[0] == '\0') snprintf(vendor, sizeof(vendor), "%s", v);
    else if (strncmp(line, "cpu family", 10) == 0 && strcmp(family, "0") == 0) snprintf(family, sizeof(family), "%s", v);
    else if (strncmp(line, "model\t", 6) == 0 && strcmp(model, "0") == 0) snprintf(model, sizeof(model), "%s", v);
    if (strncmp(line, "processor", 9) == 0 && vendor[0]) break; /* second processor: done */
  }
  if (f) fclose(f);
  NCCLCHECK(anycclTopoSetAttr(cpu, "vendor", vendor[0] ? vendor : "GenuineIntel"));
  NCCLCHECK(anycclTopoSetAttr(cpu, "familyid", family));
  NCCLCHECK(anycclTopoSetAttr(cpu, "modelid", model));
  return ncclSuccess;
}

static struct anycclTopoNode* addCpu(struct detect* d, int numa) {
  struct anycclTopoNode* cpu = anycclTopoNodeNew(TOPO_CPU, d->sys);
  if (cpu == NULL) return NULL;
  char buf[4096];
  if (anycclTopoSetAttr(cpu, "host_hash", d->hostHash) != ncclSuccess) return NULL;
  snprintf(buf, sizeof(buf), "%d", numa);
  if (anycclTopoSetAttr(cpu, "numaid", buf) != ncclSuccess) return NULL;
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpumap", numa);
  if (readSys(path, buf, sizeof(buf)) == 0 && buf[0] && anycclTopoSetAttr(cpu, "affinity", buf) != ncclSuccess)
    return NULL;
  if (setCpuIdentity(cpu) != ncclSuccess) return NULL;
  cpu->cpu.numaId = numa;
  return cpu;
}

static int cmpInt(const void* a, const void* b) { return *(const int*)a - *(const int*)b; }

static ncclResult_t detectCpus(struct detect* d) {
  int numas[1024], n = 0;
  DIR* dir = opendir("/sys/devices/system/node");
  struct dirent* e;
  while (dir && (e = readdir(dir)) && n < 1024) {
    if (strncmp(e->d_name, "node", 4) == 0 && isdigit((unsigned char)e->d_name[4])) numas[n++] = atoi(e->d_name + 4);
  }
  if (dir) closedir(dir);
  if (n == 0) numas[n++] = 0;
  qsort(numas, n, sizeof(int), cmpInt);
  for (int i = 0; i < n; i++)
    if (addCpu(d, numas[i]) == NULL) return ncclSystemError;
  return ncclSuccess;
}

static struct anycclTopoNode* cpuOf(struct detect* d, int numa) {
  for (int s = 0; s < d->sys->nSubs; s++)
    if (d->sys->subs[s]->cpu.numaId == numa) return d->sys->subs[s];
  return d->sys->subs[0];
}

/* ---- PCIe ------------------------------------------------------------------- */
static void linkAttr(const char* dev, const char* name, char* out, size_t len) {
  char mine[64] = "", port[64] = "";
  readSysAt(dev, name, mine, sizeof(mine));
  char up[PATH_MAX];
  snprintf(up, sizeof(up), "%s/..", dev);
  readSysAt(up, name, port, sizeof(port));
  const char* v = mine;
  if (port[0] && (!mine[0] || strtof(port, NULL) < strtof(mine, NULL))) v = port;
  snprintf(out, len, "%s", v);
}

static ncclResult_t fillPci(struct anycclTopoNode* pci, const char* busId, const char* dev) {
  char buf[64];
  NCCLCHECK(anycclTopoSetAttr(pci, "busid", busId));
  if (readSysAt(dev, "class", buf, sizeof(buf)) != 0) snprintf(buf, sizeof(buf), "0x060400");
  NCCLCHECK(anycclTopoSetAttr(pci, "class", buf));
  static const char* const ids[] = {"vendor", "device", "subsystem_vendor", "subsystem_device"};
  for (int i = 0; i < 4; i++)
    if (readSysAt(dev, ids[i], buf, sizeof(buf)) == 0) NCCLCHECK(anycclTopoSetAttr(pci, ids[i], buf));
  linkAttr(dev, "max_link_speed", buf, sizeof(buf));
  float gt = strtof(buf, NULL);
  const char* unit = strstr(buf, " GT/s");
  if (gt <= 0 || unit == NULL || (strcmp(unit, " GT/s") && strcmp(unit, " GT/s PCIe"))) buf[0] = '\0';
  NCCLCHECK(anycclTopoSetAttr(pci, "link_speed", buf));
  linkAttr(dev, "max_link_width", buf, sizeof(buf));
  long w = strtol(buf, NULL, 10);
  if (w <= 0 || w > 64) buf[0] = '\0';
  NCCLCHECK(anycclTopoSetAttr(pci, "link_width", buf));
  return ncclSuccess;
}

static struct anycclTopoNode* findPci(struct anycclTopoNode* parent, const char* busId) {
  for (int s = 0; s < parent->nSubs; s++) {
    const char* b = parent->subs[s]->kind == TOPO_PCI ? anycclTopoGetAttr(parent->subs[s], "busid") : NULL;
    if (b && strcmp(b, busId) == 0) return parent->subs[s];
  }
  return NULL;
}

/* The <pci> of the device at sysfs path (a realpath under /sys/devices),
 * with its switches above it, created as needed. */
static ncclResult_t pciNodeFor(struct detect* d, const char* real, struct anycclTopoNode** out) {
  char copy[PATH_MAX];
  snprintf(copy, sizeof(copy), "%s", real);
  char* comp[128];
  int n = 0;
  for (char *save = NULL, *t = strtok_r(copy, "/", &save); t && n < 128; t = strtok_r(NULL, "/", &save)) comp[n++] = t;
  int dev = -1;
  for (int i = 0; i < n; i++)
    if (isBdf(comp[i])) dev = i;
  *out = NULL;
  if (dev < 0) return ncclSuccess;
  int chain[64], nc = 0; /* component indices, device first */
  for (int i = dev; nc < 64;) {
    chain[nc++] = i;
    if (i - 1 < 0 || !isBdf(comp[i - 1]) || i - 2 < 0 || !isBdf(comp[i - 2])) break;
    i -= 2;
  }
  char path[PATH_MAX] = "";
  int numa = -1;
  {
    char devPath[PATH_MAX], buf[32];
    int len = 0;
    for (int i = 0; i <= dev; i++) len += snprintf(devPath + len, sizeof(devPath) - len, "/%s", comp[i]);
    if (readSysAt(devPath, "numa_node", buf, sizeof(buf)) == 0) numa = atoi(buf);
  }
  struct anycclTopoNode* parent = cpuOf(d, numa);
  for (int k = nc - 1; k >= 0; k--) {
    int len = 0;
    for (int i = 0; i <= chain[k]; i++) len += snprintf(path + len, sizeof(path) - len, "/%s", comp[i]);
    const char* busId = comp[chain[k]];
    struct anycclTopoNode* pci = findPci(parent, busId);
    if (pci == NULL) {
      pci = anycclTopoNodeNew(TOPO_PCI, parent);
      if (pci == NULL) return ncclSystemError;
      NCCLCHECK(fillPci(pci, busId, path));
    }
    parent = pci;
  }
  *out = parent;
  return ncclSuccess;
}

/* ---- NICs -------------------------------------------------------------------- */
static ncclResult_t addNet(struct anycclTopoNode* parent, const char* name, int dev, long speed, int port,
                           const char* guid, int maxconn, int gdr) {
  struct anycclTopoNode* nic = NULL;
  for (int s = 0; s < parent->nSubs && nic == NULL; s++)
    if (parent->subs[s]->kind == TOPO_NIC) nic = parent->subs[s];
  if (nic == NULL && (nic = anycclTopoNodeNew(TOPO_NIC, parent)) == NULL) return ncclSystemError;
  struct anycclTopoNode* net = anycclTopoNodeNew(TOPO_NET, nic);
  if (net == NULL) return ncclSystemError;
  char buf[64];
  NCCLCHECK(anycclTopoSetAttr(net, "name", name));
  snprintf(buf, sizeof(buf), "%d", dev);
  NCCLCHECK(anycclTopoSetAttr(net, "dev", buf));
  snprintf(buf, sizeof(buf), "%ld", speed);
  NCCLCHECK(anycclTopoSetAttr(net, "speed", buf));
  snprintf(buf, sizeof(buf), "%d", port);
  NCCLCHECK(anycclTopoSetAttr(net, "port", buf));
  NCCLCHECK(anycclTopoSetAttr(net, "latency", "0.000000"));
  NCCLCHECK(anycclTopoSetAttr(net, "guid", guid));
  snprintf(buf, sizeof(buf), "%d", maxconn);
  NCCLCHECK(anycclTopoSetAttr(net, "maxconn", buf));
  NCCLCHECK(anycclTopoSetAttr(net, "gdr", gdr ? "1" : "0"));
  return ncclSuccess;
}

static int cmpStr(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

/* Sorted entry names of a directory (NULL-terminated array, caller frees). */
static char** listDir(const char* path) {
  DIR* dir = opendir(path);
  if (dir == NULL) return NULL;
  int n = 0, cap = 16;
  char** names = malloc(cap * sizeof(char*));
  struct dirent* e;
  while (names && (e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    if (n + 1 >= cap) {
      char** p = realloc(names, (cap *= 2) * sizeof(char*));
      if (p == NULL) break;
      names = p;
    }
    names[n++] = strdup(e->d_name);
  }
  closedir(dir);
  if (names == NULL) return NULL;
  names[n] = NULL;
  qsort(names, n, sizeof(char*), cmpStr);
  return names;
}

static void freeList(char** l) {
  for (int i = 0; l && l[i]; i++) free(l[i]);
  free(l);
}

/* InfiniBand / RoCE devices: one <net> per active port. Returns the PCI
 * functions used, so that their netdevs are not listed again. */
static ncclResult_t detectIb(struct detect* d, int* dev, char (*used)[ANYCCL_TOPO_BUSID_LEN], int* nUsed) {
  char** names = listDir("/sys/class/infiniband");
  for (int i = 0; names && names[i]; i++) {
    char base[PATH_MAX], real[PATH_MAX], buf[128];
    snprintf(base, sizeof(base), "/sys/class/infiniband/%s/device", names[i]);
    if (realpath(base, real) == NULL) continue;
    struct anycclTopoNode* pci;
    NCCLCHECK(pciNodeFor(d, real, &pci));
    if (pci == NULL) continue;
    char guid[32] = "0x0";
    snprintf(base, sizeof(base), "/sys/class/infiniband/%s", names[i]);
    if (readSysAt(base, "node_guid", buf, sizeof(buf)) == 0) { /* "a87c:b100:03e1:a258" */
      int k = snprintf(guid, sizeof(guid), "0x");
      for (char* p = buf; *p && k < (int)sizeof(guid) - 1; p++)
        if (isxdigit((unsigned char)*p)) guid[k++] = *p;
      guid[k] = '\0';
    }
    snprintf(base, sizeof(base), "/sys/class/infiniband/%s/ports", names[i]);
    char** ports = listDir(base);
    for (int p = 0; ports && ports[p]; p++) {
      char portDir[PATH_MAX];
      if (snprintf(portDir, sizeof(portDir), "%s/%s", base, ports[p]) >= (int)sizeof(portDir)) continue;
      if (readSysAt(portDir, "state", buf, sizeof(buf)) != 0 || strstr(buf, "ACTIVE") == NULL) continue;
      long gbps = readSysAt(portDir, "rate", buf, sizeof(buf)) == 0 ? strtol(buf, NULL, 10) : 0; /* "400 Gb/sec (4X NDR)" */
      NCCLCHECK(addNet(pci, names[i], (*dev)++, gbps > 0 ? gbps * 1000 : 10000, atoi(ports[p]), guid, 131072, d->gdr));
    }
    freeList(ports);
    if (*nUsed < 64) snprintf(used[(*nUsed)++], ANYCCL_TOPO_BUSID_LEN, "%s", anycclTopoGetAttr(pci, "busid"));
  }
  freeList(names);
  return ncclSuccess;
}

static int skippedIf(const char* name) {
  static const char* const prefixes[] = {"lo", "docker", "veth", "virbr", "br-", "ifb", "tun", "tap"};
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
    if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return 1;
  return 0;
}

static ncclResult_t detectNics(struct detect* d) {
  int dev = 0, nUsed = 0;
  char used[64][ANYCCL_TOPO_BUSID_LEN];
  NCCLCHECK(detectIb(d, &dev, used, &nUsed));
  char** names = listDir("/sys/class/net");
  for (int i = 0; names && names[i]; i++) {
    char base[PATH_MAX], real[PATH_MAX], buf[64];
    snprintf(base, sizeof(base), "/sys/class/net/%s", names[i]);
    if (skippedIf(names[i])) continue;
    if (readSysAt(base, "flags", buf, sizeof(buf)) == 0) {
      long flags = strtol(buf, NULL, 0);
      if (!(flags & 0x1) || (flags & 0x8)) continue; /* down, or loopback */
    }
    long speed = readSysAt(base, "speed", buf, sizeof(buf)) == 0 ? strtol(buf, NULL, 10) : 0;
    if (speed <= 0) speed = 10000;
    char guid[32];
    snprintf(guid, sizeof(guid), "0x%x", dev);
    struct anycclTopoNode* parent = NULL;
    if (realpath(base, real) != NULL && strstr(real, "/devices/virtual/") == NULL) NCCLCHECK(pciNodeFor(d, real, &parent));
    if (parent) {
      const char* b = anycclTopoGetAttr(parent, "busid");
      int dup = 0;
      for (int u = 0; u < nUsed; u++) dup |= strcmp(used[u], b) == 0;
      if (dup) continue;
    } else {
      parent = cpuOf(d, -1); /* a NIC without PCI, as NCCL lists socket NICs */
    }
    NCCLCHECK(addNet(parent, names[i], dev++, speed, 0, guid, 65536, 0));
  }
  freeList(names);
  return ncclSuccess;
}

/* ---- GPUs through NVML ------------------------------------------------------ */
typedef struct {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPci;
typedef void* nvmlDev;
struct nvml {
  int (*init)(void);
  int (*shutdown)(void);
  int (*count)(unsigned*);
  int (*handle)(unsigned, nvmlDev*);
  int (*pci)(nvmlDev, nvmlPci*);
  int (*cc)(nvmlDev, int*, int*);
  int (*linkState)(nvmlDev, unsigned, int*);
  int (*linkCap)(nvmlDev, unsigned, int, unsigned*);
  int (*linkRemote)(nvmlDev, unsigned, nvmlPci*);
};

static void* sym(void* lib, const char* a, const char* b) {
  void* p = dlsym(lib, a);
  return p || b == NULL ? p : dlsym(lib, b);
}

static void nvlinkTarget(const nvmlPci* r, char out[ANYCCL_TOPO_BUSID_LEN]) {
  char s[64];
  int k = 0;
  for (; r->busId[k] && k < 31; k++) {
    if (!isprint((unsigned char)r->busId[k])) break;
    s[k] = (char)tolower((unsigned char)r->busId[k]);
  }
  s[k] = '\0';
  const char* p = s;
  if (strlen(s) == 16 && memcmp(s, "0000", 4) == 0) p = s + 4; /* 8-digit domain from NVML */
  if (r->busId[k] != '\0' || anycclTopoParseBusId(p, out, NULL) != 0) snprintf(out, ANYCCL_TOPO_BUSID_LEN, "fffffff:ffff:ff");
}

static ncclResult_t addGpu(struct detect* d, struct nvml* nv, unsigned idx, nvmlDev h) {
  nvmlPci pi;
  memset(&pi, 0, sizeof(pi));
  if (nv->pci(h, &pi) != 0) return ncclSuccess;
  char busId[ANYCCL_TOPO_BUSID_LEN], path[PATH_MAX], real[PATH_MAX], buf[64];
  snprintf(busId, sizeof(busId), "%04x:%02x:%02x.0", pi.domain & 0xffff, pi.bus & 0xff, pi.device & 0x1f);
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", busId);
  struct anycclTopoNode* pci = NULL;
  if (realpath(path, real) != NULL) NCCLCHECK(pciNodeFor(d, real, &pci));
  if (pci == NULL) { /* no sysfs: directly under the first CPU */
    pci = anycclTopoNodeNew(TOPO_PCI, cpuOf(d, -1));
    if (pci == NULL) return ncclSystemError;
    NCCLCHECK(anycclTopoSetAttr(pci, "busid", busId));
    NCCLCHECK(anycclTopoSetAttr(pci, "class", "0x030200"));
    NCCLCHECK(anycclTopoSetAttr(pci, "link_speed", ""));
    NCCLCHECK(anycclTopoSetAttr(pci, "link_width", ""));
  }
  struct anycclTopoNode* gpu = anycclTopoNodeNew(TOPO_GPU, pci);
  if (gpu == NULL) return ncclSystemError;
  int major = 0, minor = 0;
  if (nv->cc == NULL || nv->cc(h, &major, &minor) != 0) major = 8, minor = 0;
  snprintf(buf, sizeof(buf), "%u", idx);
  NCCLCHECK(anycclTopoSetAttr(gpu, "dev", buf));
  snprintf(buf, sizeof(buf), "%d", major * 10 + minor);
  NCCLCHECK(anycclTopoSetAttr(gpu, "sm", buf));
  snprintf(buf, sizeof(buf), "%u", idx);
  NCCLCHECK(anycclTopoSetAttr(gpu, "rank", buf));
  NCCLCHECK(anycclTopoSetAttr(gpu, "gdr", d->gdr ? "1" : "0"));
  for (unsigned l = 0; nv->linkState && nv->linkRemote && l < 18; l++) {
    unsigned cap = 1;
    int active = 0;
    if (nv->linkCap && (nv->linkCap(h, l, 0 /* P2P supported */, &cap) != 0 || !cap)) continue;
    if (nv->linkState(h, l, &active) != 0 || active != 1) continue;
    nvmlPci rp;
    memset(&rp, 0, sizeof(rp));
    if (nv->linkRemote(h, l, &rp) != 0) continue;
    char target[ANYCCL_TOPO_BUSID_LEN];
    nvlinkTarget(&rp, target);
    struct anycclTopoNode* link = NULL;
    for (int s = 0; s < gpu->nSubs && link == NULL; s++)
      if (strcmp(anycclTopoGetAttr(gpu->subs[s], "target"), target) == 0) link = gpu->subs[s];
    if (link) {
      snprintf(buf, sizeof(buf), "%d", atoi(anycclTopoGetAttr(link, "count")) + 1);
      NCCLCHECK(anycclTopoSetAttr(link, "count", buf));
      continue;
    }
    if ((link = anycclTopoNodeNew(TOPO_NVLINK, gpu)) == NULL) return ncclSystemError;
    NCCLCHECK(anycclTopoSetAttr(link, "target", target));
    NCCLCHECK(anycclTopoSetAttr(link, "count", "1"));
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", target);
    if (readSysAt(path, "class", buf, sizeof(buf)) != 0) snprintf(buf, sizeof(buf), "0x068000"); /* unseen: NVSwitch */
    NCCLCHECK(anycclTopoSetAttr(link, "tclass", buf));
  }
  return ncclSuccess;
}

static ncclResult_t detectGpus(struct detect* d) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    INFO(NCCL_GRAPH | NCCL_INIT, "Topology detection: no libnvidia-ml.so.1 (%s); no GPUs", dlerror());
    return ncclSuccess;
  }
  struct nvml nv;
  *(void**)&nv.init = sym(lib, "nvmlInit_v2", "nvmlInit");
  *(void**)&nv.shutdown = sym(lib, "nvmlShutdown", NULL);
  *(void**)&nv.count = sym(lib, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
  *(void**)&nv.handle = sym(lib, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
  *(void**)&nv.pci = sym(lib, "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2");
  *(void**)&nv.cc = sym(lib, "nvmlDeviceGetCudaComputeCapability", NULL);
  *(void**)&nv.linkState = sym(lib, "nvmlDeviceGetNvLinkState", NULL);
  *(void**)&nv.linkCap = sym(lib, "nvmlDeviceGetNvLinkCapability", NULL);
  *(void**)&nv.linkRemote = sym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo");
  ncclResult_t res = ncclSuccess;
  unsigned n = 0;
  if (!nv.init || !nv.count || !nv.handle || !nv.pci || nv.init() != 0) {
    INFO(NCCL_GRAPH | NCCL_INIT, "Topology detection: NVML present but unusable; no GPUs");
    dlclose(lib);
    return ncclSuccess;
  }
  if (nv.count(&n) != 0) n = 0;
  for (unsigned i = 0; i < n && res == ncclSuccess; i++) {
    nvmlDev h;
    if (nv.handle(i, &h) == 0) res = addGpu(d, &nv, i, h);
  }
  if (nv.shutdown) nv.shutdown();
  dlclose(lib);
  INFO(NCCL_GRAPH | NCCL_INIT, "Topology detection: %u GPU(s) through NVML", n);
  return res;
}

/* ---- putting it together ------------------------------------------------------ */
static int cmpPciNode(const void* a, const void* b) {
  const struct anycclTopoNode *x = *(struct anycclTopoNode* const*)a, *y = *(struct anycclTopoNode* const*)b;
  int px = x->kind == TOPO_PCI, py = y->kind == TOPO_PCI;
  if (px != py) return py - px; /* <pci> first, then <nic> */
  if (!px) return 0;
  return strcmp(anycclTopoGetAttr(x, "busid"), anycclTopoGetAttr(y, "busid"));
}

/* PCI children in bus id order (as NCCL keeps them), then check every node. */
static ncclResult_t finishNode(struct anycclTopoNode* n) {
  if (n->kind == TOPO_CPU || n->kind == TOPO_PCI) {
    /* insertion sort: stable, and the lists are short */
    for (int i = 1; i < n->nSubs; i++) {
      struct anycclTopoNode* v = n->subs[i];
      int j = i - 1;
      while (j >= 0 && cmpPciNode(&n->subs[j], &v) > 0) {
        n->subs[j + 1] = n->subs[j];
        j--;
      }
      n->subs[j + 1] = v;
    }
  }
  NCCLCHECK(anycclTopoCheckNode(n, "(detected)", NULL, 0));
  for (int s = 0; s < n->nSubs; s++) NCCLCHECK(finishNode(n->subs[s]));
  return ncclSuccess;
}

ncclResult_t anycclTopoDetect(struct anycclTopo** out) {
  ncclResult_t res = ncclSuccess;
  struct anycclTopo* topo = calloc(1, sizeof(*topo));
  if (topo == NULL) return ncclSystemError;
  struct detect d;
  memset(&d, 0, sizeof(d));
  topo->root = d.sys = anycclTopoNodeNew(TOPO_SYSTEM, NULL);
  if (d.sys == NULL) {
    res = ncclSystemError;
    goto fail;
  }
  NCCLCHECKGOTO(anycclTopoSetAttr(d.sys, "version", "1"), res, fail);
  snprintf(d.hostHash, sizeof(d.hostHash), "0x%llx",
           (unsigned long long)anycclTopoHostHash(anycclParamStr(PARAM_HOSTID)));
  d.gdr = access("/sys/module/nvidia_peermem", F_OK) == 0 || access("/sys/module/nv_peer_mem", F_OK) == 0;
  NCCLCHECKGOTO(detectCpus(&d), res, fail);
  NCCLCHECKGOTO(detectGpus(&d), res, fail);
  NCCLCHECKGOTO(detectNics(&d), res, fail);
  NCCLCHECKGOTO(finishNode(topo->root), res, fail);
  NCCLCHECKGOTO(anycclTopoFinish(topo, NULL, 0), res, fail);
  *out = topo;
  return ncclSuccess;
fail:
  anycclTopoFree(topo);
  return res;
}
