/* Sim worlds: the ranks of one communicator, all in this process.
 *
 * ncclGetUniqueId makes a random id and starts nothing; the first rank to
 * init with an id makes its world: the fabric (ANYCCL_SIM_FABRIC, else 8
 * GPUs per host), every rank's peer info (rank r is GPU r of the fabric:
 * host r / gpus_per_host), the rings (once, for every rank) and the outputs.
 * The other ranks join it. Nothing per pair of ranks is made: a plan's
 * connections are entries of one shared, never-written array whose index
 * names the peer. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>
#include "checks.h"
#include "comm.h"
#include "exec.h"
#include "param.h"
#include "rt.h"
#include "sim.h"
#include "topo.h"
#include "trace.h"

static pthread_mutex_t worldsLock = PTHREAD_MUTEX_INITIALIZER;
static struct anycclSimWorld* worlds;
static int worldCount;

static const char simMagic[8] = {'a', 'n', 'y', 's', 'i', 'm', '0', '1'};

ncclResult_t anycclSimUniqueId(ncclUniqueId* out) {
  memset(out, 0, sizeof(*out));
  memcpy(out->internal, simMagic, sizeof(simMagic));
  if (getrandom(out->internal + 8, 16, 0) != 16) {
    static uint64_t counter;
    uint64_t v = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) ^ ((uint64_t)getpid() << 32);
    memcpy(out->internal + 8, &v, sizeof(v));
  }
  return ncclSuccess;
}

static void worldFree(struct anycclSimWorld* w) {
  if (w->flowFile) fclose(w->flowFile);
  const char* links = getenv("ANYCCL_SIM_LINKS");
  if (links && links[0] && w->linkBytes) {
    FILE* f = strcmp(links, "-") == 0 ? stderr : fopen(links, w->index ? "a" : "w");
    if (f) {
      simLinkSummary(w, f, 20);
      if (f != stderr) fclose(f);
    } else {
      WARN("ANYCCL_SIM_LINKS=%s: cannot write the link summary there", links);
    }
  }
  for (int i = 0; i < 2; i++) {
    struct simSlot* s = &w->slots[i];
    if (s->plans && s->arrived > 0 && !s->done) { /* a launch not every rank made: nobody waits for it */
      for (int r = 0; r < w->n; r++) {
        anycclPlanFree(s->plans[r]);
        s->endAt[r] = s->start[r];
      }
      anycclRt.simResolve(s->ends, w->n, s->endAt);
    }
    free(s->plans), free(s->start), free(s->ends), free(s->endAt);
  }
  if (w->scratch) munmap(w->scratch, w->scratchBytes);
  if (w->p2pConns) munmap(w->p2pConns, 2 * (size_t)w->n * sizeof(struct anycclConn));
  free(w->peerInfo), free(w->ringOrder), free(w->ringPos), free(w->comms);
  INFO(NCCL_INIT, "sim: world of %d ranks: %llu collectives modelled, %llu taken from the memo", w->n,
       (unsigned long long)w->modelled, (unsigned long long)w->reused);
  simMemoFree(w);
  free(w->linkBytes), free(w->linkBusy);
  simFabricFree(&w->fabric);
  pthread_mutex_destroy(&w->lock);
  pthread_cond_destroy(&w->cond);
  free(w);
}

/* Every rank's plan of a launch lives until the last rank launched: with
 * thousands of ranks, large step programs would each be a fresh mapping
 * (page faults on every launch) without this. */
static pthread_once_t mallocOnce = PTHREAD_ONCE_INIT;
static void mallocTune(void) {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

static ncclResult_t worldNew(const ncclUniqueId* id, int n, struct anycclSimWorld** out) {
  if (n > 256) pthread_once(&mallocOnce, mallocTune);
  struct anycclSimWorld* w = calloc(1, sizeof(*w));
  if (w == NULL) return ncclSystemError;
  memcpy(w->key, id->internal, sizeof(w->key));
  w->n = n;
  pthread_mutex_init(&w->lock, NULL);
  pthread_cond_init(&w->cond, NULL);
  char err[1024];
  const char* fabric = getenv("ANYCCL_SIM_FABRIC");
  ncclResult_t res = simFabricLoad(fabric && fabric[0] ? fabric : NULL, n, &w->fabric, err, sizeof(err));
  if (res != ncclSuccess) {
    WARN("sim fabric (ANYCCL_SIM_FABRIC): %s", err);
    worldFree(w);
    return res;
  }
  w->peerInfo = calloc(n, sizeof(*w->peerInfo));
  w->comms = calloc(n, sizeof(*w->comms));
  w->linkBytes = calloc(w->fabric.nLinks, sizeof(double));
  w->linkBusy = calloc(w->fabric.nLinks, sizeof(double));
  for (int i = 0; i < 2; i++) {
    w->slots[i].plans = calloc(n, sizeof(*w->slots[i].plans));
    w->slots[i].start = calloc(n, sizeof(double));
    w->slots[i].ends = calloc(n, sizeof(void*));
    w->slots[i].endAt = calloc(n, sizeof(double));
    w->slots[i].seq = (uint64_t)i;
  }
  /* Connections: address space only, never touched. */
  void* conns = mmap(NULL, 2 * (size_t)n * sizeof(struct anycclConn), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  w->p2pConns = conns == MAP_FAILED ? NULL : conns;
  if (!w->peerInfo || !w->comms || !w->linkBytes || !w->linkBusy || !w->slots[0].plans || !w->slots[1].plans ||
      !w->slots[0].start || !w->slots[1].start || !w->slots[0].ends || !w->slots[1].ends || !w->slots[0].endAt ||
      !w->slots[1].endAt || !w->p2pConns) {
    WARN("sim: out of memory for a world of %d ranks", n);
    worldFree(w);
    return ncclSystemError;
  }
  int gph = w->fabric.gpusPerHost;
  for (int r = 0; r < n; r++) {
    struct anycclPeerInfo* p = &w->peerInfo[r];
    p->rank = r;
    p->cudaDev = r;
    p->pid = getpid();
    p->hostHash = 0x5133000000000000ull + (uint64_t)(r / gph);
    snprintf(p->busId, sizeof(p->busId), "%04x:%02x:00.0", (r / gph) & 0xffff, 0x1b + r % gph);
    snprintf(p->hostId, sizeof(p->hostId), "simhost%d", r / gph);
    anycclCommPeerDefaults(p);
  }
  const char* flows = getenv("ANYCCL_SIM_FLOWS");
  if (flows && flows[0]) {
    char path[4096];
    if (worldCount == 0) snprintf(path, sizeof(path), "%s", flows);
    else snprintf(path, sizeof(path), "%s.%d", flows, worldCount);
    w->flowFile = fopen(path, "w");
    if (w->flowFile == NULL) {
      WARN("ANYCCL_SIM_FLOWS=%s: cannot create the flow file", path);
      worldFree(w);
      return ncclInvalidArgument;
    }
    fprintf(w->flowFile, "flow,parents,launch,collective,src,dst,bytes,channel,step,route,start_us,end_us\n");
  }
  w->index = worldCount++;
  if (anycclTraceOn()) {
    w->tracing = 1;
    w->tracePid = anycclTracePidBase(anycclTraceKey(w->key, sizeof(w->key)));
  }
  INFO(NCCL_INIT, "sim: world of %d ranks on %s: %d hosts x %d GPUs, %d NICs each, %s, %d links", n,
       w->fabric.name, w->fabric.hosts, gph, w->fabric.nicsPerHost, w->fabric.kind == SIM_RAIL ? "rail" : "fat-tree",
       w->fabric.nLinks);
  *out = w;
  return ncclSuccess;
}

/* The rings, once per world (every rank computes the same from the same
 * inputs; here one rank does it for all). Called under w->lock. */
static ncclResult_t worldRings(struct anycclSimWorld* w, int nch) {
  int n = w->n, gph = w->fabric.gpusPerHost;
  struct anycclTopoRank* ranks = calloc(n, sizeof(*ranks));
  int nHosts = (n + gph - 1) / gph;
  const struct anycclTopoHost** hosts = calloc(nHosts, sizeof(*hosts));
  struct anycclTopoRings* rings = NULL;
  ncclResult_t res = ncclSuccess;
  if (!ranks || !hosts) {
    res = ncclSystemError;
    goto out;
  }
  for (int r = 0; r < n; r++) {
    ranks[r].host = r / gph;
    snprintf(ranks[r].busId, sizeof(ranks[r].busId), "%.19s", w->peerInfo[r].busId);
  }
  NCCLCHECKGOTO(anycclTopoBuildRings(hosts, nHosts, ranks, n, nch, &rings), res, out);
  w->ringOrder = malloc(sizeof(int) * (size_t)n * nch);
  w->ringPos = malloc(sizeof(int) * (size_t)n * nch);
  if (!w->ringOrder || !w->ringPos) {
    res = ncclSystemError;
    goto out;
  }
  memcpy(w->ringOrder, rings->order, sizeof(int) * (size_t)n * nch);
  for (int c = 0; c < nch; c++)
    for (int i = 0; i < n; i++) w->ringPos[c * n + w->ringOrder[c * n + i]] = i;
  w->nch = nch;
out:
  anycclTopoRingsFree(rings);
  free(ranks);
  free(hosts);
  return res;
}

static ncclResult_t worldJoin(const ncclUniqueId* id, int n, struct anycclSimWorld** out) {
  pthread_mutex_lock(&worldsLock);
  struct anycclSimWorld* w = worlds;
  while (w && memcmp(w->key, id->internal, sizeof(w->key)) != 0) w = w->next;
  ncclResult_t res = ncclSuccess;
  if (w && w->n != n) {
    WARN("sim: ranks of one unique id disagree on nranks (%d and %d)", w->n, n);
    res = ncclInvalidUsage;
  } else if (w == NULL) {
    res = worldNew(id, n, &w);
    if (res == ncclSuccess) {
      w->next = worlds;
      worlds = w;
    }
  }
  if (res == ncclSuccess) w->refs++;
  pthread_mutex_unlock(&worldsLock);
  *out = w;
  return res;
}

void anycclSimWorldLeave(struct anycclSimWorld* w) {
  pthread_mutex_lock(&worldsLock);
  int last = --w->refs == 0;
  if (last) {
    struct anycclSimWorld** p = &worlds;
    while (*p != w) p = &(*p)->next;
    *p = w->next;
  }
  pthread_mutex_unlock(&worldsLock);
  if (last) worldFree(w);
}

ncclResult_t anycclSimCommSetup(struct ncclComm* comm, const ncclUniqueId* id) {
  int n = comm->nRanks, r = comm->rank;
  if (memcmp(id->internal, simMagic, sizeof(simMagic)) != 0) {
    WARN("sim backend: the unique id was not made by ncclGetUniqueId of the sim backend (all ranks live in one "
         "process: share the id between threads, not processes)");
    return ncclInvalidUsage;
  }
  struct anycclSimWorld* w;
  NCCLCHECK(worldJoin(id, n, &w));
  comm->sim = w;
  comm->peerInfo = w->peerInfo;
  anycclCommGeometry(comm);
  int gph = w->fabric.gpusPerHost;
  comm->nHosts = (n + gph - 1) / gph;
  comm->localRank = r % gph;
  comm->localRanks = r / gph == comm->nHosts - 1 ? n - (comm->nHosts - 1) * gph : gph;
  anycclCommNetChannels(comm);
  pthread_mutex_lock(&w->lock);
  ncclResult_t res = ncclSuccess;
  if (w->nch == 0) res = worldRings(w, comm->nChannels);
  if (res == ncclSuccess && w->scratch == NULL) {
    w->scratchBytes = (size_t)comm->nChannels * comm->slotBytes;
    void* s = mmap(NULL, w->scratchBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) res = ncclSystemError;
    else w->scratch = s;
  }
  if (res == ncclSuccess && w->comms[r] != NULL) {
    WARN("sim: rank %d of %d joined twice with the same unique id", r, n);
    res = ncclInvalidUsage;
  }
  if (res == ncclSuccess) w->comms[r] = comm;
  pthread_mutex_unlock(&w->lock);
  NCCLCHECK(res);
  if (w->nch != comm->nChannels) {
    WARN("sim: rank %d wants %d channels, the world was built with %d: set NCCL_MAX_NCHANNELS alike", r,
         comm->nChannels, w->nch);
    return ncclInvalidUsage;
  }
  comm->ringOrder = w->ringOrder;
  for (int c = 0; c < comm->nChannels; c++) comm->ringPos[c] = w->ringPos[c * n + r];
  comm->scratch = w->scratch;
  anycclCommTuning(comm);
  NCCLCHECK(comm->exec->setup(comm));
  if (comm->spinCount < 0) comm->spinCount = 0;
  INFO(NCCL_INIT, "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d cudaDev %d backend sim - Init COMPLETE",
       (void*)comm, r, n, comm->nHosts, comm->localRanks, comm->localRank, comm->cudaDev);
  return ncclSuccess;
}
