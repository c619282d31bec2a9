/* Virtual hosts: host identity from NCCL_HOSTID, the per-host topology file
 * (NCCL-GP's "<base>_node<H>.xml" rule), the host's <system> of a multi-host
 * file, and what init and anyccl-cpu ask of the topology. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "checks.h"
#include "debug.h"
#include "param.h"
#include "topo.h"

static uint64_t fnv64(const char* s, uint64_t h) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  return h;
}

uint64_t anycclTopoHostHash(const char* hostId) {
  uint64_t h = 0xcbf29ce484222325ULL;
  if (hostId && hostId[0]) return fnv64(hostId, fnv64("hostid:", h));
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  h = fnv64(name, h);
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    char boot[64] = "";
    if (fgets(boot, sizeof(boot), f)) h = fnv64(boot, h);
    fclose(f);
  }
  return h;
}

/* A host id that is a plain decimal number: its value, else -1. */
static long hostNumber(const char* id) {
  if (id == NULL || !isdigit((unsigned char)id[0])) return -1;
  char* end;
  errno = 0;
  long v = strtol(id, &end, 10);
  return (errno || *end || v < 0) ? -1 : v;
}

int anycclTopoHostDomain(const char* hostId) {
  if (hostId == NULL || hostId[0] == '\0') return 0;
  long v = hostNumber(hostId);
  if (v >= 0 && v <= 0xffff) return (int)v;
  uint32_t h = 2166136261u; /* FNV-1a 32, folded: as anyccl-cpu does */
  for (const unsigned char* p = (const unsigned char*)hostId; *p; p++) h = (h ^ *p) * 16777619u;
  return (int)((h >> 16) ^ (h & 0xffff));
}

int anycclTopoSelectHost(const struct anycclTopo* topo, const char* hostId, char* err, size_t errLen) {
  if (topo->nHosts == 1) return 0;
  const char* file = topo->file ? topo->file : "(topology)";
  if (hostId == NULL || hostId[0] == '\0') {
    INFO(NCCL_GRAPH | NCCL_ENV, "%s describes %d hosts and NCCL_HOSTID is not set: using host 0", file, topo->nHosts);
    return 0;
  }
  long v = hostNumber(hostId);
  if (v >= 0) {
    if (v < topo->nHosts) return (int)v;
    anycclTopoError(err, errLen, "%s describes hosts 0..%d; there is no host %ld (NCCL_HOSTID=%s)", file,
                    topo->nHosts - 1, v, hostId);
    return -1;
  }
  uint64_t hash = anycclTopoHostHash(hostId);
  for (int h = 0; h < topo->nHosts; h++)
    if (strcmp(topo->hosts[h].name, hostId) == 0 || topo->hosts[h].hostHash == hash) return h;
  int h = (int)(hash % (uint64_t)topo->nHosts);
  INFO(NCCL_GRAPH | NCCL_ENV, "%s: no host is named \"%s\"; its hash selects host %d", file, hostId, h);
  return h;
}

void anycclTopoHostFile(const char* base, const char* hostId, char* out, size_t outLen) {
  snprintf(out, outLen, "%s", base);
  if (hostId == NULL || hostId[0] == '\0') return;
  size_t len = strlen(base);
  size_t stem = (len > 4 && strcmp(base + len - 4, ".xml") == 0) ? len - 4 : len;
  char cand[4096];
  long v = hostNumber(hostId);
  if (v >= 0) snprintf(cand, sizeof(cand), "%.*s_node%ld%s", (int)stem, base, v, base + stem);
  else snprintf(cand, sizeof(cand), "%.*s_node%s%s", (int)stem, base, hostId, base + stem);
  if (access(cand, R_OK) == 0) snprintf(out, outLen, "%s", cand);
}

/* Rebuild the host indexes after the tree changed. */
static ncclResult_t refinish(struct anycclTopo* topo, char* err, size_t errLen) {
  for (int h = 0; h < topo->nHosts; h++) {
    free(topo->hosts[h].cpus);
    free(topo->hosts[h].gpus);
    free(topo->hosts[h].nets);
    free(topo->hosts[h].gpuPaths);
    free(topo->hosts[h].netPaths);
  }
  free(topo->hosts);
  topo->hosts = NULL;
  topo->nHosts = 0;
  return anycclTopoFinish(topo, err, errLen);
}

/* Keep only host h: a <system> with its CPUs becomes the root. */
static ncclResult_t keepHost(struct anycclTopo* topo, int h, char* err, size_t errLen) {
  struct anycclTopoHost* host = topo->hosts + h;
  struct anycclTopoNode* sys = anycclTopoNodeNew(TOPO_SYSTEM, NULL);
  if (sys == NULL) return ncclSystemError;
  sys->line = host->system->line;
  sys->system = host->system->system;
  for (int a = 0; a < host->system->nAttrs; a++)
    NCCLCHECK(anycclTopoSetAttr(sys, host->system->attrs[a].key, host->system->attrs[a].value));
  struct anycclTopoNode* old = host->system;
  for (int c = 0; c < host->nCpus; c++) {
    struct anycclTopoNode* cpu = host->cpus[c];
    for (int s = 0; s < old->nSubs; s++) {
      if (old->subs[s] != cpu) continue;
      memmove(old->subs + s, old->subs + s + 1, (old->nSubs - s - 1) * sizeof(*old->subs));
      old->nSubs--;
      break;
    }
    if (sys->nSubs == sys->capSubs) {
      int cap = sys->capSubs ? 2 * sys->capSubs : 4;
      struct anycclTopoNode** subs = realloc(sys->subs, cap * sizeof(*subs));
      if (subs == NULL) return ncclSystemError;
      sys->subs = subs;
      sys->capSubs = cap;
    }
    sys->subs[sys->nSubs++] = cpu;
    cpu->parent = sys;
  }
  anycclTopoNodeFree(topo->root);
  topo->root = sys;
  return refinish(topo, err, errLen);
}

/* Move bus ids in PCI domain 0 to domain dom. */
static ncclResult_t relocate(struct anycclTopoNode* n, int dom, const char* file, char* err, size_t errLen) {
  const char* key = n->kind == TOPO_PCI ? "busid" : (n->kind == TOPO_NVLINK || n->kind == TOPO_PCILINK) ? "target" : NULL;
  const char* v = key ? anycclTopoGetAttr(n, key) : NULL;
  if (v) {
    const char* colon = strchr(v, ':');
    int64_t id;
    if (colon && anycclTopoParseBusId(v, NULL, &id) == 0 && (id >> 20) == 0) {
      char moved[64];
      snprintf(moved, sizeof(moved), "%04x%s", dom, colon);
      NCCLCHECK(anycclTopoSetAttr(n, key, moved));
      NCCLCHECK(anycclTopoCheckNode(n, file, err, errLen));
    }
  }
  for (int s = 0; s < n->nSubs; s++) NCCLCHECK(relocate(n->subs[s], dom, file, err, errLen));
  return ncclSuccess;
}

ncclResult_t anycclTopoKeepHost(struct anycclTopo* topo, const char* hostId, int perHost, char* err, size_t errLen) {
  const char* file = topo->file ? topo->file : "(topology)";
  int h = perHost ? 0 : anycclTopoSelectHost(topo, hostId, err, errLen);
  if (h < 0) return ncclInvalidUsage;
  int shared = !perHost && topo->nHosts == 1;
  if (topo->nHosts > 1) NCCLCHECK(keepHost(topo, h, err, errLen));
  int dom = anycclTopoHostDomain(hostId);
  if (shared && dom != 0) {
    NCCLCHECK(relocate(topo->root, dom, file, err, errLen));
    NCCLCHECK(refinish(topo, err, errLen));
  }
  if (hostId && hostId[0]) { /* the host is who NCCL_HOSTID says */
    snprintf(topo->hosts[0].name, sizeof(topo->hosts[0].name), "%s", hostId);
    topo->hosts[0].hostHash = anycclTopoHostHash(hostId);
  }
  INFO(NCCL_GRAPH | NCCL_ENV, "NCCL_HOSTID %s: host %d of %s%s", hostId ? hostId : "(unset)", h, file,
       shared && dom ? " (bus ids moved to this host's PCI domain)" : "");
  return ncclSuccess;
}

ncclResult_t anycclTopoLoadHost(const char* base, const char* hostId, struct anycclTopo** out, char* err,
                                size_t errLen) {
  char file[4096];
  anycclTopoHostFile(base, hostId, file, sizeof(file));
  struct anycclTopo* topo = NULL;
  NCCLCHECK(anycclTopoLoad(file, &topo, err, errLen));
  ncclResult_t res = anycclTopoKeepHost(topo, hostId, strcmp(file, base) != 0, err, errLen);
  if (res != ncclSuccess) {
    anycclTopoFree(topo);
    return res;
  }
  *out = topo;
  return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t anycclTopoListGpus(const char* path, const char* hostId,
                                                                       int* count,
                                                                       char (*busIds)[ANYCCL_TOPO_BUSID_LEN],
                                                                       int max) {
  struct anycclTopo* topo;
  NCCLCHECK(anycclTopoLoadHost(path, hostId, &topo, NULL, 0));
  const struct anycclTopoHost* h = topo->hosts;
  *count = h->nGpus;
  for (int g = 0; busIds && g < h->nGpus && g < max; g++) snprintf(busIds[g], ANYCCL_TOPO_BUSID_LEN, "%s", h->gpus[g].busId);
  anycclTopoFree(topo);
  return ncclSuccess;
}

ncclResult_t anycclTopoGetSystem(int rank, struct anycclTopo** out) {
  const char* file = anycclParamStr(PARAM_TOPO_FILE);
  const char* hostId = anycclParamStr(PARAM_HOSTID);
  struct anycclTopo* topo;
  if (file) NCCLCHECK(anycclTopoLoadHost(file, hostId, &topo, NULL, 0));
  else NCCLCHECK(anycclTopoDetect(&topo));
  const char* dump = anycclParamStr(PARAM_TOPO_DUMP_FILE);
  if (dump && rank == anycclParamInt(PARAM_TOPO_DUMP_FILE_RANK)) {
    ncclResult_t res = anycclTopoWriteFile(topo, -1, dump);
    if (res != ncclSuccess) {
      anycclTopoFree(topo);
      return res;
    }
    INFO(NCCL_GRAPH | NCCL_ENV, "Topology written to %s (NCCL_TOPO_DUMP_FILE)", dump);
  }
  *out = topo;
  return ncclSuccess;
}
