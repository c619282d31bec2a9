/* Communicator lifecycle: init (blocking, nonblocking, in a group), split,
 * shrink, finalize, destroy, abort. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "api.h"
#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "exec.h"
#include "param.h"
#include "plan.h"
#include "rt.h"
#include "topo.h"
#include "trace.h"
#include "wire.h"

/* ---- host and process identity ------------------------------------------- */
/* The host hash follows NCCL_HOSTID (else host name + boot id): one formula,
 * anycclTopoHostHash, shared with the topology code. */
static uint64_t hostHash(void) { return anycclTopoHostHash(anycclParamStr(PARAM_HOSTID)); }

static uint64_t processToken;
static pthread_once_t tokenOnce = PTHREAD_ONCE_INIT;
static void tokenInit(void) {
  if (getrandom(&processToken, sizeof(processToken), 0) != sizeof(processToken))
    processToken = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&processToken;
}

/* ---- init ---------------------------------------------------------------- */
struct initJob {
  struct ncclComm* comm;
  ncclUniqueId id;
};

static ncclResult_t commAlloc(struct ncclComm** out, int nranks, int rank, int cudaDev, const ncclConfig_t* config) {
  struct ncclComm* comm;
  ANYCCL_CALLOC(comm, 1);
  comm->rank = rank;
  comm->nRanks = nranks;
  comm->cudaDev = cudaDev;
  comm->state = COMM_INITIALIZING;
  comm->asyncResult = ncclInProgress;
  comm->forceAlgo = -1;
  pthread_mutex_init(&comm->lock, NULL);
  pthread_cond_init(&comm->idle, NULL);
  ncclConfig_t defaults = NCCL_CONFIG_INITIALIZER;
  comm->config = config ? *config : defaults;
  comm->blocking = comm->config.blocking == NCCL_CONFIG_UNDEF_INT ? 1 : comm->config.blocking;
  comm->exec = anycclExecFor(anycclRt.kind);
  anycclCommRegister(comm);
  *out = comm;
  return ncclSuccess;
}

void anycclCommFree(struct ncclComm* comm) {
  anycclCommUnregister(comm);
  if (comm->exec) comm->exec->free(comm);
  anycclTraceFlush(comm); /* after the executor: the cuda backend converts its timeline there */
  anycclRingProgsFree(comm);
  if (comm->bootstrap) bootstrapClose(comm->bootstrap);
  anycclSimPlaceFree(comm->simPlace);
  anycclSimShrinksFree(comm);
  free(comm->peerInfo);
  free(comm->ringOrder);
  free(comm->scratch);
  pthread_mutex_destroy(&comm->lock);
  pthread_cond_destroy(&comm->idle);
  free(comm);
}

/* The tail of a WARN about device counts: on the cpu backend the devices are
 * anyccl-cpu's virtual ones, as many per host as ANYCCL_CPU_DEVICES says. */
static const char* cpuDevicesHint(void) {
  return anycclRt.kind == ANYCCL_BACKEND_CPU
             ? " (anyccl-cpu: each host has ANYCCL_CPU_DEVICES virtual devices, default 8; set ANYCCL_CPU_DEVICES "
               "to at least the ranks per host)"
             : "";
}

static ncclResult_t checkDuplicateDevices(struct ncclComm* comm) {
  for (int i = 0; i < comm->nRanks; i++)
    for (int j = i + 1; j < comm->nRanks; j++) {
      struct anycclPeerInfo *a = &comm->peerInfo[i], *b = &comm->peerInfo[j];
      if (a->hostHash == b->hostHash && strcmp(a->busId, b->busId) == 0) {
        WARN("Duplicate GPU detected : rank %d and rank %d both on CUDA device %s; give each rank of a host its "
             "own device (cudaSetDevice before init)%s",
             i, j, a->busId, cpuDevicesHint());
        return ncclInvalidUsage;
      }
    }
  return ncclSuccess;
}

static pthread_once_t bannerOnce = PTHREAD_ONCE_INIT;
static void banner(void) {
  if (ncclDebugLevel() == NCCL_LOG_VERSION || ncclDebugLevel() >= NCCL_LOG_INFO)
    printf("NCCL version %d.%d.%d (anyccl %s, backend %s)\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
           ANYCCL_VERSION_STRING, anycclRt.name);
}

/* Rings from the topology: every rank computes the same rings from the same
 * inputs (the peers' hosts and bus ids, and NCCL_TOPO_FILE, which every rank
 * reads alike); without a topology file hosts keep rank order inside, and
 * each ring still crosses every host boundary once. */
static ncclResult_t setupRings(struct ncclComm* comm) {
  int n = comm->nRanks, nch = comm->nChannels;
  ncclResult_t res = ncclSuccess;
  int nHosts = 0;
  int* hostOf = calloc(n, sizeof(int));
  int* hostRank = calloc(n, sizeof(int)); /* first rank of each host */
  struct anycclTopoRank* ranks = calloc(n, sizeof(*ranks));
  struct anycclTopo** topos = calloc(n, sizeof(*topos));
  const struct anycclTopoHost** hosts = calloc(n, sizeof(*hosts));
  struct anycclTopoRings* rings = NULL;
  if (!hostOf || !hostRank || !ranks || !topos || !hosts) {
    res = ncclSystemError;
    goto out;
  }
  for (int q = 0; q < n; q++) {
    int h = 0;
    while (h < nHosts && comm->peerInfo[hostRank[h]].hostHash != comm->peerInfo[q].hostHash) h++;
    if (h == nHosts) hostRank[nHosts++] = q;
    hostOf[q] = h;
    ranks[q].host = h;
    snprintf(ranks[q].busId, sizeof(ranks[q].busId), "%.*s", (int)sizeof(ranks[q].busId) - 1, comm->peerInfo[q].busId);
  }
  const char* file = anycclParamStr(PARAM_TOPO_FILE);
  if (file) {
    for (int h = 0; h < nHosts; h++) {
      const char* id = comm->peerInfo[hostRank[h]].hostId;
      char err[512];
      if (anycclTopoLoadHost(file, id[0] ? id : NULL, &topos[h], err, sizeof(err)) != ncclSuccess) {
        WARN("NCCL_TOPO_FILE: %s", err);
        res = ncclInvalidUsage;
        goto out;
      }
      hosts[h] = &topos[h]->hosts[0];
    }
  }
  if (anycclParamStr(PARAM_TOPO_DUMP_FILE)) {
    struct anycclTopo* mine = NULL;
    if (anycclTopoGetSystem(comm->rank, &mine) == ncclSuccess) anycclTopoFree(mine);
  }
  NCCLCHECKGOTO(anycclTopoBuildRings(hosts, nHosts, ranks, n, nch, &rings), res, out);
  ANYCCL_CALLOC(comm->ringOrder, (size_t)n * nch);
  memcpy(comm->ringOrder, rings->order, sizeof(int) * n * nch);
  for (int c = 0; c < nch; c++) {
    char line[1024];
    int len = 0;
    for (int i = 0; i < n; i++) {
      if (comm->ringOrder[c * n + i] == comm->rank) comm->ringPos[c] = i;
      if (len < (int)sizeof(line) - 16) len += snprintf(line + len, sizeof(line) - len, " %3d", comm->ringOrder[c * n + i]);
    }
    if (comm->rank == 0) INFO(NCCL_INIT | NCCL_GRAPH, "Channel %02d/%02d : %s", c, nch, line);
  }
  comm->nHosts = nHosts;
out:
  anycclTopoRingsFree(rings);
  for (int h = 0; h < nHosts && topos; h++)
    if (topos[h]) anycclTopoFree(topos[h]);
  free(hostOf);
  free(hostRank);
  free(ranks);
  free(topos);
  free(hosts);
  return res;
}

ncclResult_t anycclPeerInfoExchange(struct ncclComm* comm) {
  NCCLCHECK(bootstrapAllGather(comm->bootstrap, comm->peerInfo, sizeof(struct anycclPeerInfo)));
  char why[160];
  if (wireCheckPeerInfo(comm->peerInfo, comm->nRanks, why, sizeof(why)) != ncclSuccess) {
    WARN("Init: rank %d received corrupt rank information: %s", comm->rank, why);
    return ncclRemoteError;
  }
  return ncclSuccess;
}

static ncclResult_t commSetup(struct ncclComm* comm, const ncclUniqueId* id) {
  int n = comm->nRanks, r = comm->rank;
  NCCLCHECK(anycclRtInit());
  if (r == 0) pthread_once(&bannerOnce, banner);
  CUDACHECK(anycclRt.setDevice(comm->cudaDev));
  CUDACHECK(anycclRt.deviceGetPCIBusId(comm->busId, sizeof(comm->busId), comm->cudaDev));
  if (anycclRt.kind == ANYCCL_BACKEND_SIM) return anycclSimCommSetup(comm, id); /* no bootstrap, no peers */
  NCCLCHECK(bootstrapInit(id, r, n, &comm->abortFlag, &comm->bootstrap));

  pthread_once(&tokenOnce, tokenInit);
  ANYCCL_CALLOC(comm->peerInfo, n);
  struct anycclPeerInfo* me = &comm->peerInfo[r];
  me->rank = r;
  me->cudaDev = comm->cudaDev;
  me->pid = getpid();
  me->hostHash = hostHash();
  me->processToken = processToken;
  snprintf(me->busId, sizeof(me->busId), "%s", comm->busId);
  const char* hid = anycclParamStr(PARAM_HOSTID);
  snprintf(me->hostId, sizeof(me->hostId), "%s", hid ? hid : "");
  anycclCommPeerDefaults(me);
  if (r == 0 && me->slotBytes > ANYCCL_MAX_BUFFSIZE) /* negative counts as huge */
    WARN("NCCL_BUFFSIZE (ANYCCL_CUDA_BUFFSIZE for GPUs) is %lld bytes; set at most %zu: using %zu",
         (long long)me->slotBytes, ANYCCL_MAX_BUFFSIZE, ANYCCL_MAX_BUFFSIZE);
  NCCLCHECK(anycclPeerInfoExchange(comm));
  NCCLCHECK(checkDuplicateDevices(comm));
  anycclCommGeometry(comm);
  comm->localRanks = comm->localRank = 0;
  for (int i = 0; i < n; i++)
    if (comm->peerInfo[i].hostHash == me->hostHash) {
      if (i < r) comm->localRank++;
      comm->localRanks++;
    }
  anycclCommNetChannels(comm);
  NCCLCHECK(setupRings(comm));
  /* 64-byte aligned: the vector reductions take a slower path otherwise */
  if (posix_memalign((void**)&comm->scratch, 64, (size_t)comm->nChannels * comm->slotBytes) != 0)
    return ncclSystemError;
  anycclCommTuning(comm);
  NCCLCHECK(anycclTraceAlloc(comm, anycclTraceKey(id->internal, sizeof(id->internal))));
  NCCLCHECK(comm->exec->setup(comm));
  /* A rank with network peers shares its cores with its proxy and socket
   * threads: it must not spin on them. */
  if (comm->proxy) comm->yieldSpin = 1;
  if (comm->spinCount < 0) comm->spinCount = comm->yieldSpin ? 200 : 20000;
  INFO(NCCL_INIT, "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d cudaDev %d busId %s backend %s - "
       "Init COMPLETE",
       (void*)comm, r, n, comm->nHosts, comm->localRanks, comm->localRank, comm->cudaDev, comm->busId, anycclRt.name);
  return ncclSuccess;
}

/* GPUs (real or simulated) want more channels (one block each) and larger
 * FIFOs, unless the user chose. */
static int gpuKind(void) { return anycclRt.kind == ANYCCL_BACKEND_CUDA || anycclRt.kind == ANYCCL_BACKEND_SIM; }

void anycclCommPeerDefaults(struct anycclPeerInfo* me) {
  me->maxChannels = (int)anycclParamInt(PARAM_MAX_NCHANNELS);
  me->nslots = (int)anycclParamInt(PARAM_NSLOTS);
  me->slotBytes = (size_t)anycclParamInt(PARAM_BUFFSIZE);
  if (gpuKind()) {
    if (getenv("NCCL_MAX_NCHANNELS") == NULL) me->maxChannels = (int)anycclParamInt(PARAM_CUDA_NCHANNELS);
    if (getenv("NCCL_BUFFSIZE") == NULL) me->slotBytes = (size_t)anycclParamInt(PARAM_CUDA_BUFFSIZE);
  } else if (getenv("NCCL_BUFFSIZE") == NULL) {
    /* Network messages are FIFO slots: larger slots, fewer messages and
     * wake-ups per byte. */
    int64_t nb = anycclParamInt(PARAM_NET_BUFFSIZE);
    me->netSlotBytes = nb > 0 ? (size_t)nb : 0;
  }
}

void anycclCommGeometry(struct ncclComm* comm) {
  int n = comm->nRanks;
  /* Geometry agreed by all: rank 0's FIFO shape, the smallest channel cap. */
  int spansHosts = 0;
  for (int i = 0; i < n; i++) spansHosts |= comm->peerInfo[i].hostHash != comm->peerInfo[0].hostHash;
  size_t buff = comm->peerInfo[0].slotBytes;
  if (spansHosts && comm->peerInfo[0].netSlotBytes > 0) buff = comm->peerInfo[0].netSlotBytes;
  wireFifoGeometry(comm->peerInfo[0].nslots, buff, &comm->nslots, &comm->slotBytes);
  int nch = ANYCCL_MAX_CHANNELS;
  for (int i = 0; i < n; i++)
    if (comm->peerInfo[i].maxChannels < nch) nch = comm->peerInfo[i].maxChannels;
  int minch = (int)anycclParamInt(PARAM_MIN_NCHANNELS);
  if (nch < minch) nch = minch;
  if (nch < 1) nch = 1;
  if (nch > ANYCCL_MAX_CHANNELS) nch = ANYCCL_MAX_CHANNELS;
  comm->nChannels = nch;
  /* CPU threads pay per channel; GPU blocks are many and cheap, but every
   * channel pays the step latency (the cost model of ringLanes). */
  comm->minChannelBytes = comm->channelBytes = 64 << 10;
  comm->baseChannels = 1;
  if (gpuKind()) {
    comm->minChannelBytes = 8 << 10;
    comm->channelBytes = (size_t)anycclParamInt(PARAM_CUDA_CHANNEL_BYTES);
    comm->baseChannels = (int)anycclParamInt(PARAM_CUDA_BASE_CHANNELS);
    if (comm->channelBytes < comm->minChannelBytes) comm->channelBytes = comm->minChannelBytes;
  }
  comm->chainBytes = comm->channelBytes;
  comm->chainBytesPast64 = 2 * comm->channelBytes;
  if (gpuKind()) {
    comm->chainBytes = (size_t)anycclParamInt(PARAM_CUDA_CHAIN_BYTES);
    if (comm->chainBytes < comm->minChannelBytes) comm->chainBytes = comm->minChannelBytes;
    comm->chainBytesPast64 = 4 * comm->chainBytes;
  }
}

/* GPU communicators spanning hosts: every ring channel crossing hosts
 * has sockets and pinned FIFOs of its own (cuda_backend.c). */
void anycclCommNetChannels(struct ncclComm* comm) {
  if (gpuKind() && comm->localRanks < comm->nRanks) {
    int cap = (int)anycclParamInt(PARAM_CUDA_NET_CHANNELS);
    if (cap < 1) cap = 1;
    if (comm->nChannels > cap) comm->nChannels = cap;
  }
}

void anycclCommTuning(struct ncclComm* comm) {
  int r = comm->rank;
  comm->opTimeoutSec = anycclParamInt(PARAM_OP_TIMEOUT);
  comm->peerCheckMs = anycclParamInt(PARAM_PEER_CHECK_MS);
  comm->spinCount = (int)anycclParamInt(PARAM_SPIN_COUNT);
  comm->zcopyMin = anycclParamInt(PARAM_NET_ZCOPY_MIN);
  /* Oversubscribed (as 8 ranks on 2 cores): a waiting rank yields its core
   * to the ranks that have work instead of spinning on it. */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  comm->yieldSpin = cores > 0 && comm->localRanks > cores;
  comm->directThreshold = (size_t)anycclParamInt(PARAM_DIRECT_THRESHOLD);
  if (gpuKind() && getenv("ANYCCL_DIRECT_THRESHOLD") == NULL)
    comm->directThreshold = (size_t)anycclParamInt(PARAM_CUDA_DIRECT_THRESHOLD);
  if (gpuKind()) {
    const int64_t mesh = anycclParamInt(PARAM_CUDA_MESH_ALLGATHER);
    comm->meshAgMax = mesh > 0 ? (size_t)mesh : 0; /* (negative: never, as 0) */
    /* the default was measured on one host of 2-4 GPUs */
    if (!anycclParamIsSet(PARAM_CUDA_MESH_ALLGATHER) && (comm->nHosts > 1 || comm->nRanks > 4)) comm->meshAgMax = 0;
  }
  comm->peerThreshold = (size_t)anycclParamInt(PARAM_PEER_THRESHOLD); /* -1: never */
  const char* algo = anycclParamStr(PARAM_ALGO);
  if (algo) {
    if (strcasecmp(algo, "Ring") == 0) comm->forceAlgo = ANYCCL_ALGO_RING;
    else if (strcasecmp(algo, "Direct") == 0 || strcasecmp(algo, "OneShot") == 0) comm->forceAlgo = ANYCCL_ALGO_DIRECT;
    else if (r == 0)
      WARN("NCCL_ALGO=%s: not implemented in anyccl, which has Ring and Direct (one-shot) only; choosing "
           "automatically",
           algo);
  }
}

static void* initJobRun(void* arg) {
  struct initJob* job = arg;
  struct ncclComm* comm = job->comm;
  ncclResult_t res = commSetup(comm, &job->id);
  anycclCommInitDone(comm, res);
  free(job);
  return NULL;
}

static ncclResult_t checkConfig(const ncclConfig_t* config) {
  if (config == NULL) return ncclSuccess;
  if (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, cgaClusterSize)) {
    WARN("config: not initialised with NCCL_CONFIG_INITIALIZER (magic 0x%x, size %zu)", config->magic,
         config->size);
    return ncclInvalidArgument;
  }
  if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1) {
    WARN("config->blocking is %d; use 0 (nonblocking) or 1 (blocking)", config->blocking);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Start initialising a comm: in the open group, in the background
 * (nonblocking), or right here. */
static ncclResult_t commStart(struct ncclComm* comm, const ncclUniqueId* id) {
  struct initJob* job;
  ANYCCL_CALLOC(job, 1);
  job->comm = comm;
  job->id = *id;
  if (anycclGroupDepth() > 0) return anycclGroupAddInit(comm, initJobRun, job);
  if (!comm->blocking) {
    if (pthread_create(&comm->initThread, NULL, initJobRun, job) != 0) {
      free(job);
      WARN("cannot start the init thread");
      return ncclSystemError;
    }
    comm->initThreadStarted = 1;
    return ncclInProgress;
  }
  /* Blocking: the result of init itself (a peer failing afterwards shows up
   * later, through ncclCommGetAsyncError and the next calls). */
  ncclResult_t res = commSetup(comm, &job->id);
  anycclCommInitDone(comm, res);
  free(job);
  return res;
}

static ncclResult_t initRankAlloc(ncclComm_t* newcomm, int nranks, int rank, const ncclConfig_t* config,
                                  int cudaDev, const char* fn, struct ncclComm** out) {
  if (newcomm == NULL) {
    WARN("%s: newcomm is NULL; pass the address of an ncclComm_t", fn);
    return ncclInvalidArgument;
  }
  *newcomm = NULL;
  if (nranks < 1) {
    WARN("%s: nranks is %d; it must be at least 1", fn, nranks);
    return ncclInvalidArgument;
  }
  if (rank < 0 || rank >= nranks) {
    WARN("%s: rank %d is out of range [0, %d)", fn, rank, nranks);
    return ncclInvalidArgument;
  }
  NCCLCHECK(checkConfig(config));
  NCCLCHECK(anycclRtInit());
  if (cudaDev < 0) CUDACHECK(anycclRt.getDevice(&cudaDev));
  return commAlloc(out, nranks, rank, cudaDev, config);
}

/* place: the sim backend's placement of a shrink's ranks (taken), or NULL */
static ncclResult_t initRankPlaced(ncclComm_t* newcomm, int nranks, const ncclUniqueId* id, int rank,
                                   const ncclConfig_t* config, int cudaDev, const char* fn,
                                   struct anycclSimPlace* place) {
  struct ncclComm* comm;
  ncclResult_t res = initRankAlloc(newcomm, nranks, rank, config, cudaDev, fn, &comm);
  if (res != ncclSuccess) {
    anycclSimPlaceFree(place);
    return res;
  }
  comm->simPlace = place;
  *newcomm = comm;
  res = commStart(comm, id);
  if (res != ncclSuccess && res != ncclInProgress) {
    /* Blocking init failed: the comm is unusable; free it as NCCL does. */
    *newcomm = NULL;
    anycclCommFree(comm);
  }
  return res;
}

static ncclResult_t initRank(ncclComm_t* newcomm, int nranks, const ncclUniqueId* id, int rank,
                             const ncclConfig_t* config, int cudaDev, const char* fn) {
  return initRankPlaced(newcomm, nranks, id, rank, config, cudaDev, fn, NULL);
}

NCCL_API(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * out)) {
  if (out == NULL) {
    WARN("ncclGetUniqueId: uniqueId is NULL");
    return ncclInvalidArgument;
  }
  if (anycclRtSimRequested() && anycclRtInit() == ncclSuccess && anycclRt.kind == ANYCCL_BACKEND_SIM)
    return anycclSimUniqueId(out);
  return bootstrapGetUniqueId(out);
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig,
         (ncclComm_t * newcomm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config)) {
  return initRank(newcomm, nranks, &commId, rank, config, -1, "ncclCommInitRankConfig");
}

NCCL_API(ncclResult_t, ncclCommInitRank, (ncclComm_t * newcomm, int nranks, ncclUniqueId commId, int rank)) {
  return initRank(newcomm, nranks, &commId, rank, NULL, -1, "ncclCommInitRank");
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable,
         (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config)) {
  if (nId < 1 || commIds == NULL) {
    WARN("ncclCommInitRankScalable: nId is %d and commIds %p; pass at least one unique id", nId, (void*)commIds);
    return ncclInvalidArgument;
  }
  /* One root serves every rank here; extra ids are accepted and unused. */
  return initRank(newcomm, nranks, &commIds[0], myrank, config, -1, "ncclCommInitRankScalable");
}

NCCL_API(ncclResult_t, ncclCommInitAll, (ncclComm_t * comms, int ndev, const int* devlist)) {
  if (comms == NULL) {
    WARN("ncclCommInitAll: comms is NULL");
    return ncclInvalidArgument;
  }
  if (ndev < 1) {
    WARN("ncclCommInitAll: ndev is %d; it must be at least 1", ndev);
    return ncclInvalidArgument;
  }
  NCCLCHECK(anycclRtInit());
  int count = 0;
  CUDACHECK(anycclRt.getDeviceCount(&count));
  for (int i = 0; i < ndev; i++) {
    int d = devlist ? devlist[i] : i;
    if (d < 0 || d >= count) {
      WARN("ncclCommInitAll: device %d (entry %d) is out of range [0, %d)%s", d, i, count, cpuDevicesHint());
      return ncclInvalidArgument;
    }
    for (int j = 0; j < i && devlist; j++)
      if (devlist[j] == d) {
        WARN("ncclCommInitAll: device %d appears twice in devlist (entries %d and %d)", d, j, i);
        return ncclInvalidUsage;
      }
  }
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  for (int i = 0; i < ndev; i++) comms[i] = NULL;
  NCCLCHECK(anycclGroupStartInternal());
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < ndev && res == ncclSuccess; i++)
    res = initRank(&comms[i], ndev, &id, i, NULL, devlist ? devlist[i] : i, "ncclCommInitAll");
  if (res != ncclSuccess) anycclGroupSetError(res);
  ncclResult_t g = anycclGroupEndInternal();
  if (res == ncclSuccess) res = g;
  if (res != ncclSuccess) {
    for (int i = 0; i < ndev; i++)
      if (comms[i]) {
        anycclCommFree(comms[i]);
        comms[i] = NULL;
      }
  }
  return res;
}

/* ---- split and shrink ------------------------------------------------------ */
struct splitInfo {
  int color, key, rank;
};

struct splitJob {
  struct ncclComm* parent;
  struct ncclComm* child; /* NULL for NCCL_SPLIT_NOCOLOR */
  int color, key;
};

static int cmpSplit(const void* a, const void* b) {
  const struct splitInfo *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank - y->rank;
}

/* The sim backend: the ranks meet in their world, not over a bootstrap. */
static ncclResult_t splitRunSim(struct splitJob* job) {
  int nNew = 0, newRank = -1;
  ncclUniqueId id;
  struct anycclSimPlace* place = NULL;
  ncclResult_t res = anycclSimSplit(job->parent, job->color, job->key, &nNew, &newRank, &id, &place);
  if (res != ncclSuccess || job->child == NULL) {
    anycclSimPlaceFree(place);
    return res;
  }
  job->child->rank = newRank;
  job->child->nRanks = nNew;
  job->child->simPlace = place;
  INFO(NCCL_INIT, "ncclCommSplit comm %p rank %d nranks %d color %d key %d -> newcomm %p rank %d nranks %d (sim)",
       (void*)job->parent, job->parent->rank, job->parent->nRanks, job->color, job->key, (void*)job->child, newRank,
       nNew);
  return commSetup(job->child, &id);
}

static ncclResult_t splitRun(struct splitJob* job) {
  struct ncclComm* parent = job->parent;
  if (parent->sim) return splitRunSim(job);
  int n = parent->nRanks;
  struct splitInfo* info;
  ncclUniqueId* ids = NULL;
  ncclResult_t res = ncclSuccess;
  ANYCCL_CALLOC(info, n);
  info[parent->rank] = (struct splitInfo){job->color, job->key, parent->rank};
  /* aborting the new communicator ends its waits on the parent's bootstrap */
  if (job->child) bootstrapSetCallAbort(&job->child->abortFlag);
  NCCLCHECKGOTO(bootstrapAllGather(parent->bootstrap, info, sizeof(*info)), res, out);
  for (int i = 0; i < n; i++)
    if (info[i].rank != i) { /* it picks the leader: an index into ids[] */
      WARN("ncclCommSplit: rank %d received corrupt split information from rank %d (says rank %d)", parent->rank,
           i, info[i].rank);
      res = ncclRemoteError;
      goto out;
    }
  int nNew = 0;
  struct splitInfo* members = malloc(n * sizeof(*members));
  if (members == NULL) {
    res = ncclSystemError;
    goto out;
  }
  for (int i = 0; i < n; i++)
    if (job->color != NCCL_SPLIT_NOCOLOR && info[i].color == job->color) members[nNew++] = info[i];
  qsort(members, nNew, sizeof(*members), cmpSplit);
  int newRank = -1;
  for (int i = 0; i < nNew; i++)
    if (members[i].rank == parent->rank) newRank = i;
  int leader = nNew ? members[0].rank : -1;
  free(members);
  ids = calloc(n, sizeof(*ids));
  if (ids == NULL) {
    res = ncclSystemError;
    goto out;
  }
  if (leader == parent->rank) NCCLCHECKGOTO(bootstrapGetUniqueId(&ids[parent->rank]), res, out);
  NCCLCHECKGOTO(bootstrapAllGather(parent->bootstrap, ids, sizeof(*ids)), res, out);
  bootstrapSetCallAbort(NULL);
  if (job->child) {
    job->child->rank = newRank;
    job->child->nRanks = nNew;
    INFO(NCCL_INIT, "ncclCommSplit comm %p rank %d nranks %d color %d key %d -> newcomm %p rank %d nranks %d",
         (void*)parent, parent->rank, n, job->color, job->key, (void*)job->child, newRank, nNew);
    res = commSetup(job->child, &ids[leader]);
  }
out:
  bootstrapSetCallAbort(NULL);
  free(info);
  free(ids);
  return res;
}

static void* splitJobRun(void* arg) {
  struct splitJob* job = arg;
  ncclResult_t res = splitRun(job);
  if (job->child) anycclCommInitDone(job->child, res);
  free(job);
  return NULL;
}

NCCL_API(ncclResult_t, ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommSplit", 1));
  if (comm->bootstrap == NULL && comm->sim == NULL) {
    WARN("ncclCommSplit: not available on the %s backend yet; create the communicators with ncclCommInitRank",
         anycclRt.name);
    return ncclInvalidUsage;
  }
  if (newcomm == NULL) {
    WARN("ncclCommSplit: newcomm is NULL");
    return ncclInvalidArgument;
  }
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    WARN("ncclCommSplit: color %d is negative; use a color >= 0 or NCCL_SPLIT_NOCOLOR", color);
    return ncclInvalidArgument;
  }
  NCCLCHECK(checkConfig(config));
  *newcomm = NULL;
  struct splitJob* job;
  ANYCCL_CALLOC(job, 1);
  job->parent = comm;
  job->color = color;
  job->key = key;
  if (color != NCCL_SPLIT_NOCOLOR) {
    ncclResult_t r = commAlloc(&job->child, 1, 0, comm->cudaDev, config ? config : &comm->config);
    if (r != ncclSuccess) {
      free(job);
      return r;
    }
  }
  struct ncclComm* child = job->child;
  *newcomm = child;
  if (anycclGroupDepth() > 0) return anycclGroupAddInit(child ? child : comm, splitJobRun, job);
  if (child && !child->blocking) {
    if (pthread_create(&child->initThread, NULL, splitJobRun, job) == 0) {
      child->initThreadStarted = 1;
      return ncclInProgress;
    }
  }
  splitJobRun(job);
  if (child == NULL) return ncclSuccess;
  ncclResult_t res = __atomic_load_n(&child->asyncResult, __ATOMIC_ACQUIRE);
  if (res != ncclSuccess) {
    *newcomm = NULL;
    anycclCommFree(child);
  }
  return res;
}

NCCL_API(ncclResult_t, ncclCommShrink,
         (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,
          int shrinkFlags)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommShrink", 0));
  if (comm->bootstrap == NULL && comm->sim == NULL) {
    WARN("ncclCommShrink: not available on the %s backend yet", anycclRt.name);
    return ncclInvalidUsage;
  }
  if (newcomm == NULL || (excludeRanksCount > 0 && excludeRanksList == NULL) || excludeRanksCount < 0) {
    WARN("ncclCommShrink: newcomm %p, excludeRanksList %p, excludeRanksCount %d: pass a list of count ranks",
         (void*)newcomm, (void*)excludeRanksList, excludeRanksCount);
    return ncclInvalidArgument;
  }
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    WARN("ncclCommShrink: shrinkFlags %d; use NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT", shrinkFlags);
    return ncclInvalidArgument;
  }
  NCCLCHECK(checkConfig(config));
  int n = comm->nRanks;
  char* excluded = calloc(n, 1);
  if (excluded == NULL) return ncclSystemError;
  for (int i = 0; i < excludeRanksCount; i++) {
    int x = excludeRanksList[i];
    if (x < 0 || x >= n) {
      WARN("ncclCommShrink: excludeRanksList[%d] = %d is out of range [0, %d)", i, x, n);
      free(excluded);
      return ncclInvalidArgument;
    }
    excluded[x] = 1;
  }
  if (excluded[comm->rank]) {
    WARN("ncclCommShrink: rank %d is in excludeRanksList; excluded ranks must not call ncclCommShrink", comm->rank);
    free(excluded);
    return ncclInvalidArgument;
  }
  if (shrinkFlags == NCCL_SHRINK_ABORT) {
    __atomic_store_n(&comm->revoked, 1, __ATOMIC_RELEASE);
    anycclExecAbort(comm);
    anycclCommWaitRunning(comm); /* as ncclCommRevoke */
  }
  int nNew = 0, newRank = -1, leader = -1;
  for (int i = 0; i < n; i++)
    if (!excluded[i]) {
      if (leader < 0) leader = i;
      if (i == comm->rank) newRank = nNew;
      nNew++;
    }
  ncclUniqueId id;
  ncclResult_t res = ncclSuccess;
  const int tag = 0x5400;
  if (comm->sim) { /* every caller computes the same id; the parent's GPUs */
    struct anycclSimPlace* place = NULL;
    NCCLCHECKGOTO(anycclSimShrink(comm, excluded, &id, &place), res, out);
    res = initRankPlaced(newcomm, nNew, &id, newRank, config ? config : &comm->config, comm->cudaDev,
                         "ncclCommShrink", place);
    goto out;
  }
  if (comm->rank == leader) {
    NCCLCHECKGOTO(bootstrapGetUniqueId(&id), res, out);
    for (int i = 0; i < n; i++)
      if (!excluded[i] && i != leader) NCCLCHECKGOTO(bootstrapSend(comm->bootstrap, i, tag, &id, sizeof(id)), res, out);
  } else {
    NCCLCHECKGOTO(bootstrapRecv(comm->bootstrap, leader, tag, &id, sizeof(id)), res, out);
  }
  res = initRank(newcomm, nNew, &id, newRank, config ? config : &comm->config, comm->cudaDev, "ncclCommShrink");
out:
  free(excluded);
  return res;
}

/* ---- teardown --------------------------------------------------------------- */
static void joinInit(struct ncclComm* comm) {
  pthread_mutex_lock(&comm->lock);
  if (comm->initThreadStarted) {
    pthread_join(comm->initThread, NULL);
    comm->initThreadStarted = 0;
  }
  pthread_mutex_unlock(&comm->lock);
}

/* Aborted, revoked or failed: queued work will not run (it ends at once). */
static int commStopped(struct ncclComm* comm) {
  ncclResult_t async = __atomic_load_n(&comm->asyncResult, __ATOMIC_ACQUIRE);
  return __atomic_load_n(&comm->abortFlag, __ATOMIC_ACQUIRE) || __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE) ||
         (async != ncclSuccess && async != ncclInProgress);
}

NCCL_API(ncclResult_t, ncclCommFinalize, (ncclComm_t comm)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommFinalize", 0));
  joinInit(comm);
  if (commStopped(comm)) anycclCommWaitRunning(comm);
  else anycclCommWaitIdle(comm);
  int expect = COMM_READY;
  __atomic_compare_exchange_n(&comm->state, &expect, COMM_FINALIZED, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDestroy, (ncclComm_t comm)) {
  if (comm == NULL) return ncclSuccess; /* as NCCL */
  NCCLCHECK(anycclCommCheck(comm, "ncclCommDestroy", 0));
  joinInit(comm);
  INFO(NCCL_INIT, "comm %p rank %d nRanks %d cudaDev %d busId %s - Destroy COMPLETE", (void*)comm, comm->rank,
       comm->nRanks, comm->cudaDev, comm->busId);
  if (commStopped(comm)) {
    /* Work queued behind other work (another communicator's stuck operation
     * on the same stream) must not hold the destroy up: it is stopped, and
     * ends at once when it starts. */
    __atomic_store_n(&comm->abortFlag, 1, __ATOMIC_RELEASE);
    anycclExecAbort(comm);
    anycclCommStopAndFree(comm);
    return ncclSuccess;
  }
  anycclCommWaitIdle(comm);
  anycclCommFree(comm);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommAbort, (ncclComm_t comm)) {
  if (comm == NULL) return ncclSuccess;
  NCCLCHECK(anycclCommCheck(comm, "ncclCommAbort", 0));
  /* The bootstrap and every executor wait watch abortFlag: an init in
   * progress and running plans return promptly; commFree then closes. */
  __atomic_store_n(&comm->abortFlag, 1, __ATOMIC_RELEASE);
  anycclExecAbort(comm);
  joinInit(comm);
  INFO(NCCL_INIT, "comm %p rank %d nRanks %d - Abort COMPLETE", (void*)comm, comm->rank, comm->nRanks);
  anycclCommStopAndFree(comm); /* plans not started yet do not hold the abort up */
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommRevoke", 0));
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    WARN("ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT (0), got %d", revokeFlags);
    return ncclInvalidArgument;
  }
  __atomic_store_n(&comm->revoked, 1, __ATOMIC_RELEASE);
  anycclExecAbort(comm);
  anycclCommWaitRunning(comm); /* queued plans end at once when they start */
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * asyncError)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommGetAsyncError", 0));
  if (asyncError == NULL) {
    WARN("ncclCommGetAsyncError: asyncError is NULL");
    return ncclInvalidArgument;
  }
  anycclProfInit();
  const uint64_t t0 = anycclProfNow();
  ncclResult_t kernelErr = comm->exec ? comm->exec->asyncError(comm) : ncclSuccess;
  anycclProfAdd(PROF_ASYNCERR, t0);
  if (kernelErr != ncclSuccess) anycclCommSetError(comm, kernelErr);
  *asyncError = __atomic_load_n(&comm->asyncResult, __ATOMIC_ACQUIRE);
  if (*asyncError != ncclInProgress) joinInit(comm);
  return ncclSuccess;
}
