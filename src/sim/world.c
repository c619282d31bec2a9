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
#include <time.h>
#include <unistd.h>
#include "bootstrap.h"
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
static int worldCount; /* worlds numbered so far (atomic: a split's meeting takes numbers under its world's lock) */

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

/* 1 while a launch of the world waits in its cluster's queue. */
static int worldQueued(struct anycclSimWorld* w) {
  pthread_mutex_lock(&w->lock);
  int q = 0;
  for (int i = 0; i < 2; i++) q |= w->slots[i].queued && !w->slots[i].done;
  pthread_mutex_unlock(&w->lock);
  return q;
}

static void worldFree(struct anycclSimWorld* w) {
  if (w->cluster) {
    while (worldQueued(w)) simClusterFlush(w->cluster); /* its launches still waiting: modelled now */
    if (w->inCluster) simClusterWorlds(w->cluster, -1);
    simClusterUnref(w->cluster);
    w->cluster = NULL;
  }
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
  free(w->gpu), free(w->hostOf), free(w->localRank), free(w->localRanks), free(w->gatherBuf);
  free(w->gatherColors);
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

/* Hosts as the ranks use them: dense indices in order of first rank, each
 * rank's index among its host's ranks, and their count. */
static ncclResult_t worldHosts(struct anycclSimWorld* w) {
  int n = w->n, gph = w->fabric.gpusPerHost;
  int* dense = malloc(sizeof(int) * (size_t)w->fabric.hosts);
  int* count = calloc((size_t)n, sizeof(int));
  w->hostOf = malloc(sizeof(int) * (size_t)n);
  w->localRank = malloc(sizeof(int) * (size_t)n);
  w->localRanks = malloc(sizeof(int) * (size_t)n);
  if (!dense || !count || !w->hostOf || !w->localRank || !w->localRanks) {
    free(dense), free(count);
    return ncclSystemError;
  }
  for (int h = 0; h < w->fabric.hosts; h++) dense[h] = -1;
  w->nHosts = 0;
  for (int r = 0; r < n; r++) {
    int h = simGpuOf(&w->fabric, r) / gph;
    if (dense[h] < 0) dense[h] = w->nHosts++;
    w->hostOf[r] = dense[h];
    w->localRank[r] = count[dense[h]]++;
  }
  for (int r = 0; r < n; r++) w->localRanks[r] = count[w->hostOf[r]];
  free(dense), free(count);
  return ncclSuccess;
}

static ncclResult_t worldNew(const ncclUniqueId* id, int n, const struct anycclSimPlace* place,
                             struct anycclSimWorld** out) {
  if (n > 256) pthread_once(&mallocOnce, mallocTune);
  struct anycclSimWorld* w = calloc(1, sizeof(*w));
  if (w == NULL) return ncclSystemError;
  memcpy(w->key, id->internal, sizeof(w->key));
  w->n = n;
  if (place && place->cluster) simClusterRef(place->cluster);
  w->cluster = place && place->cluster ? place->cluster : simClusterNew();
  pthread_mutex_init(&w->lock, NULL);
  pthread_cond_init(&w->cond, NULL);
  char err[1024];
  const char* fabric = getenv("ANYCCL_SIM_FABRIC");
  ncclResult_t res =
      simFabricLoad(fabric && fabric[0] ? fabric : NULL, place ? place->fabricRanks : n, &w->fabric, err, sizeof(err));
  if (res != ncclSuccess) {
    WARN("sim fabric (ANYCCL_SIM_FABRIC): %s", err);
    worldFree(w);
    return res;
  }
  if (place) { /* the parent's GPUs: in its fabric, which this one is */
    w->gpu = malloc(sizeof(int) * (size_t)n);
    if (w->gpu == NULL) {
      worldFree(w);
      return ncclSystemError;
    }
    memcpy(w->gpu, place->gpu, sizeof(int) * (size_t)n);
    w->fabric.gpuOf = w->gpu;
  }
  if (worldHosts(w) != ncclSuccess) {
    WARN("sim: out of memory for a world of %d ranks", n);
    worldFree(w);
    return ncclSystemError;
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
    int g = simGpuOf(&w->fabric, r);
    p->rank = r;
    p->cudaDev = place ? place->dev[r] : r;
    p->pid = getpid();
    p->hostHash = 0x5133000000000000ull + (uint64_t)(g / gph);
    snprintf(p->busId, sizeof(p->busId), "%04x:%02x:00.0", (g / gph) & 0xffff, 0x1b + g % gph);
    snprintf(p->hostId, sizeof(p->hostId), "simhost%d", g / gph);
    anycclCommPeerDefaults(p);
  }
  /* the world's number: in order of making, the splits of one ncclCommSplit in order of color (their
   * numbers were taken when the split's ranks met), so that names do not depend on threads */
  w->index = place && place->index >= 0 ? place->index : __atomic_fetch_add(&worldCount, 1, __ATOMIC_RELAXED);
  const char* flows = getenv("ANYCCL_SIM_FLOWS");
  if (flows && flows[0]) {
    char path[4096];
    if (w->index == 0) snprintf(path, sizeof(path), "%s", flows);
    else snprintf(path, sizeof(path), "%s.%d", flows, w->index);
    w->flowFile = fopen(path, "w");
    if (w->flowFile == NULL) {
      WARN("ANYCCL_SIM_FLOWS=%s: cannot create the flow file", path);
      worldFree(w);
      return ncclInvalidArgument;
    }
    fprintf(w->flowFile, "flow,parents,launch,collective,src,dst,bytes,channel,step,route,start_us,end_us\n");
  }
  simClusterWorlds(w->cluster, +1);
  w->inCluster = 1;
  if (anycclTraceOn()) {
    w->tracing = 1;
    w->tracePid = 1000000 * (w->index < 63 ? w->index : 63); /* as anycclTracePidBase numbers communicators */
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
  int n = w->n;
  struct anycclTopoRank* ranks = calloc(n, sizeof(*ranks));
  int nHosts = w->nHosts;
  const struct anycclTopoHost** hosts = calloc(nHosts, sizeof(*hosts));
  struct anycclTopoRings* rings = NULL;
  ncclResult_t res = ncclSuccess;
  if (!ranks || !hosts) {
    res = ncclSystemError;
    goto out;
  }
  for (int r = 0; r < n; r++) {
    ranks[r].host = w->hostOf[r];
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

static ncclResult_t worldJoin(const ncclUniqueId* id, int n, const struct anycclSimPlace* place,
                              struct anycclSimWorld** out) {
  pthread_mutex_lock(&worldsLock);
  struct anycclSimWorld* w = worlds;
  while (w && memcmp(w->key, id->internal, sizeof(w->key)) != 0) w = w->next;
  ncclResult_t res = ncclSuccess;
  if (w && w->n != n) {
    WARN("sim: ranks of one unique id disagree on nranks (%d and %d)", w->n, n);
    res = ncclInvalidUsage;
  } else if (w == NULL) {
    res = worldNew(id, n, place, &w);
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
  struct anycclSimPlace* place = comm->simPlace;
  comm->simPlace = NULL;
  if (place && place->n != n) {
    WARN("sim: rank %d of %d was placed for a world of %d ranks", r, n, place->n);
    anycclSimPlaceFree(place);
    return ncclInternalError;
  }
  struct anycclSimWorld* w;
  ncclResult_t jr = worldJoin(id, n, place, &w);
  anycclSimPlaceFree(place);
  NCCLCHECK(jr);
  comm->sim = w;
  comm->peerInfo = w->peerInfo;
  anycclCommGeometry(comm);
  comm->nHosts = w->nHosts;
  comm->localRank = w->localRank[r];
  comm->localRanks = w->localRanks[r];
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

/* ---- split and shrink ------------------------------------------------------- */
void anycclSimPlaceFree(struct anycclSimPlace* p) {
  if (p == NULL) return;
  simClusterUnref(p->cluster);
  free(p->gpu), free(p->dev);
  free(p);
}

static struct anycclSimPlace* placeNew(const struct anycclSimWorld* parent, int n, int fabricRanks) {
  struct anycclSimPlace* p = calloc(1, sizeof(*p));
  if (p == NULL) return NULL;
  if (parent->cluster) simClusterRef(parent->cluster);
  p->cluster = parent->cluster;
  p->index = -1;
  p->n = n;
  p->fabricRanks = fabricRanks;
  p->gpu = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  p->dev = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  if (!p->gpu || !p->dev) {
    anycclSimPlaceFree(p);
    return NULL;
  }
  return p;
}

/* A child world's id: the parent's key, what made it and a number, mixed
 * (the same on every rank that computes it). */
static void childId(const struct anycclSimWorld* parent, uint64_t what, uint64_t a, uint64_t b, ncclUniqueId* id) {
  uint64_t h[3] = {0x9e3779b97f4a7c15ull ^ what, a, b};
  for (size_t i = 0; i < sizeof(parent->key); i++) h[i % 3] = (h[i % 3] ^ parent->key[i]) * 0x100000001b3ull;
  for (int k = 0; k < 3; k++) { /* splitmix64 finish */
    uint64_t z = h[k] + 0x9e3779b97f4a7c15ull * (k + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    h[k] = z ^ (z >> 31);
  }
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, simMagic, sizeof(simMagic));
  memcpy(id->internal + sizeof(simMagic), h, sizeof(h));
}

/* Every rank of the parent's world gives (color, key) and gets all of
 * them: one meeting at a time per world, ended by the last to arrive. */
/* One wait on the world's condition (under w->lock): at most 10 ms, so that
 * an abort is seen; ncclSystemError past the deadline (ms < 0: none). */
static ncclResult_t gatherWait(struct anycclSimWorld* w, const struct ncclComm* parent, double start, int64_t ms) {
  if (__atomic_load_n(&parent->abortFlag, __ATOMIC_ACQUIRE)) return ncclInvalidUsage;
  if (ms >= 0 && (anycclNowSec() - start) * 1e3 > (double)ms) return ncclSystemError;
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_nsec += 10000000;
  if (dl.tv_nsec >= 1000000000) dl.tv_sec++, dl.tv_nsec -= 1000000000;
  pthread_cond_timedwait(&w->cond, &w->lock, &dl);
  return ncclSuccess;
}

static int cmpInt(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return x < y ? -1 : x > y;
}

/* The meeting ended (w->lock held): the colors in order, and numbers for their worlds. */
static void gatherNumber(struct anycclSimWorld* w) {
  int n = w->n, m = 0;
  for (int i = 0; i < n; i++)
    if (w->gatherBuf[2 * i] != NCCL_SPLIT_NOCOLOR) w->gatherColors[m++] = w->gatherBuf[2 * i];
  qsort(w->gatherColors, m, sizeof(int), cmpInt);
  int d = 0;
  for (int i = 0; i < m; i++)
    if (i == 0 || w->gatherColors[i] != w->gatherColors[d - 1]) w->gatherColors[d++] = w->gatherColors[i];
  w->gatherNColors = d;
  w->gatherIndex = __atomic_fetch_add(&worldCount, d, __ATOMIC_RELAXED);
}

/* The number of color's world (-1: NOCOLOR), from the meeting just read. */
static int gatherIndexOf(const struct anycclSimWorld* w, int color) {
  if (color == NCCL_SPLIT_NOCOLOR) return -1;
  const int* c = bsearch(&color, w->gatherColors, w->gatherNColors, sizeof(int), cmpInt);
  return c ? w->gatherIndex + (int)(c - w->gatherColors) : -1;
}

static ncclResult_t gather(struct ncclComm* parent, int color, int key, int* all, uint64_t* gen, int* index) {
  struct anycclSimWorld* w = parent->sim;
  int n = w->n, r = parent->rank;
  int64_t ms = bootstrapTimeoutMs();
  double start = anycclNowSec();
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&w->lock);
  while (w->gatherReaders > 0 && res == ncclSuccess) res = gatherWait(w, parent, start, ms); /* the last meeting is read */
  if (res == ncclSuccess && w->gatherBuf == NULL) {
    w->gatherBuf = malloc(sizeof(int) * 2 * (size_t)n);
    w->gatherColors = malloc(sizeof(int) * (size_t)n);
    if (w->gatherBuf == NULL || w->gatherColors == NULL) {
      free(w->gatherBuf), free(w->gatherColors);
      w->gatherBuf = NULL, w->gatherColors = NULL;
      res = ncclSystemError;
    }
  }
  if (res == ncclSuccess) {
    uint64_t mine = w->gatherGen;
    w->gatherBuf[2 * r] = color;
    w->gatherBuf[2 * r + 1] = key;
    if (++w->gatherArrived == n) {
      gatherNumber(w);
      w->gatherArrived = 0;
      w->gatherReaders = n;
      w->gatherGen++;
      pthread_cond_broadcast(&w->cond);
    }
    while (w->gatherGen == mine && res == ncclSuccess) res = gatherWait(w, parent, start, ms);
    if (res == ncclSuccess) {
      memcpy(all, w->gatherBuf, sizeof(int) * 2 * (size_t)n);
      *gen = mine;
      *index = gatherIndexOf(w, color);
      if (--w->gatherReaders == 0) pthread_cond_broadcast(&w->cond);
    } else if (w->gatherGen == mine) {
      w->gatherArrived--; /* leaving before the meeting ended: not counted */
    }
  }
  pthread_mutex_unlock(&w->lock);
  if (res == ncclSystemError)
    WARN("ncclCommSplit: rank %d waited %lld ms for the other ranks of its communicator to call ncclCommSplit "
         "(ANYCCL_BOOTSTRAP_TIMEOUT); every rank must call it, in the same order as its other calls", r,
         (long long)ms);
  else if (res == ncclInvalidUsage)
    WARN("ncclCommSplit: rank %d: the communicator was aborted while its ranks met", r);
  return res;
}

static int cmpMember(const void* a, const void* b) { /* (key, parent rank) */
  const int *x = a, *y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return x[1] - y[1];
}

ncclResult_t anycclSimSplit(struct ncclComm* parent, int color, int key, int* nNew, int* newRank, ncclUniqueId* id,
                            struct anycclSimPlace** place) {
  struct anycclSimWorld* w = parent->sim;
  int n = w->n;
  *place = NULL;
  int* all = malloc(sizeof(int) * 2 * (size_t)n);
  int* members = malloc(sizeof(int) * 2 * (size_t)n);
  ncclResult_t res = all && members ? ncclSuccess : ncclSystemError;
  uint64_t gen = 0;
  int index = -1;
  if (res == ncclSuccess) res = gather(parent, color, key, all, &gen, &index);
  if (res == ncclSuccess && color != NCCL_SPLIT_NOCOLOR) {
    int m = 0;
    for (int i = 0; i < n; i++)
      if (all[2 * i] == color) members[2 * m] = all[2 * i + 1], members[2 * m + 1] = i, m++;
    qsort(members, m, 2 * sizeof(int), cmpMember);
    struct anycclSimPlace* p = placeNew(w, m, w->fabric.hosts * w->fabric.gpusPerHost);
    if (p == NULL) res = ncclSystemError;
    for (int i = 0; p && i < m; i++) {
      int pr = members[2 * i + 1];
      if (pr == parent->rank) *newRank = i;
      p->gpu[i] = simGpuOf(&w->fabric, pr);
      p->dev[i] = w->peerInfo[pr].cudaDev;
    }
    if (p) p->index = index;
    *nNew = m;
    *place = p;
    childId(w, 1, gen, (uint64_t)(uint32_t)color, id);
  }
  free(all), free(members);
  return res;
}

/* Shrinks of a communicator per excluded set: every caller of a shrink
 * that excludes a set made every earlier shrink that excluded it (ranks
 * outside the set call each), so (set, count) names the new world alike on
 * all of them, while ranks excluded once may take part in later shrinks. */
struct anycclSimShrinks {
  uint64_t set, count;
  struct anycclSimShrinks* next;
};

void anycclSimShrinksFree(struct ncclComm* comm) {
  while (comm->simShrinks) {
    struct anycclSimShrinks* s = comm->simShrinks;
    comm->simShrinks = s->next;
    free(s);
  }
}

ncclResult_t anycclSimShrink(struct ncclComm* parent, const char* excluded, ncclUniqueId* id,
                             struct anycclSimPlace** place) {
  struct anycclSimWorld* w = parent->sim;
  int n = w->n, m = 0;
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < n; i++) {
    m += !excluded[i];
    h = (h ^ (uint64_t)(excluded[i] != 0)) * 0x100000001b3ull;
  }
  struct anycclSimShrinks* seen = parent->simShrinks;
  while (seen && seen->set != h) seen = seen->next;
  if (seen == NULL) {
    seen = calloc(1, sizeof(*seen));
    if (seen == NULL) return ncclSystemError;
    seen->set = h;
    seen->next = parent->simShrinks;
    parent->simShrinks = seen;
  }
  struct anycclSimPlace* p = placeNew(w, m, w->fabric.hosts * w->fabric.gpusPerHost);
  if (p == NULL) return ncclSystemError;
  for (int i = 0, k = 0; i < n; i++)
    if (!excluded[i]) {
      p->gpu[k] = simGpuOf(&w->fabric, i);
      p->dev[k++] = w->peerInfo[i].cudaDev;
    }
  childId(w, 2, seen->count++, h, id);
  *place = p;
  return ncclSuccess;
}
