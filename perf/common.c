/* The harness shared by every *_perf tool: processes (MPI when built with
 * ANYCCL_PERF_MPI), threads (-t), devices per thread (-g), communicators,
 * buffers, the timed loop, the data check, the header and the footer.
 *
 * Semantics follow nccl-tests 2.19 (see perf.h): for every type, op and root
 * the tool warms up every size (doubling), then for each size times -n
 * iterations out-of-place and then in-place (host clock around the loop,
 * then a stream synchronisation), aggregates the time over threads and
 * processes (-a), and checks one more call against the host reference (-c).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#ifdef ANYCCL_PERF_MPI
#include <mpi.h>
#endif
#include "perf.h"

extern char** environ;

/* ---- this process ------------------------------------------------------------ */

static struct {
  const struct perfColl* coll;
  const char* prog;
  int totalProcs, proc;       /* MPI_COMM_WORLD */
  int ncclProcs, ncclProc;    /* the processes sharing one communicator */
  int color, localRank;
  char host[1024];
  int ncclVersion;
  int types[PERF_NUM_TYPES], ntypes; /* what -d all runs */
  int corrupt;                       /* ANYCCL_PERF_CORRUPT: elements to spoil per check */
  int poll;                          /* wait like nccl-tests: cudaStreamQuery + yield */
  int progress;
  double t0;
#ifdef ANYCCL_PERF_MPI
  MPI_Comm mpiComm;
#endif
} P;

struct perfThread {
  int thread;
  int firstRank;
  int* devs;
  ncclComm_t* comms;
  cudaStream_t* streams;
  char** send;
  char** recv;
  void** sendReg;
  void** recvReg;
  void* host; /* staging for init and check: maxBytes */
  ncclRedOp_t premulOps[PERF_MAX_GPUS]; /* "mulsum": one ncclRedOpCreatePreMulSum op per device */
  /* the current size */
  struct perfCounts c;
  size_t es;
  int reportErrors;
  /* results */
  int errors;
  double bw;
  int bwCount;
  unsigned rep;
  pthread_t tid;
};

static int nranksTotal(void) { return P.ncclProcs * perfOpt.nThreads * perfOpt.nGpus; }
static int isMain(const struct perfThread* t) { return P.proc == 0 && t->thread == 0; }

/* The sim backend (ANYCCL_BACKEND=sim with anyccl-cpu) keeps a virtual
 * clock per thread: the tools time with it, so they report modelled time. */
static double (*simNow)(void);

static double now(void) {
  if (simNow) return simNow();
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- failures: one line, then the whole job ends (peers would hang) ---------- */

enum { TEST_CUDA = 2, TEST_NCCL = 3, TEST_TIMEOUT = 4, TEST_USAGE = 6, TEST_WRONG = 7 };

static void die(int code) __attribute__((noreturn));
static void die(int code) {
  perfProgressClear();
  fflush(stdout);
  fflush(stderr);
#ifdef ANYCCL_PERF_MPI
  if (P.totalProcs > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  _exit(code);
}

#define CUDACHECK(cmd)                                                                                      \
  do {                                                                                                      \
    cudaError_t e_ = (cmd);                                                                                 \
    if (e_ != cudaSuccess) {                                                                                \
      printf("%s: Test CUDA failure %s:%d '%s'\n", P.host, __FILE__, __LINE__, cudaGetErrorString(e_));    \
      die(TEST_CUDA);                                                                                       \
    }                                                                                                       \
  } while (0)

#define NCCLCHECK(cmd)                                                                                      \
  do {                                                                                                      \
    ncclResult_t r_ = (cmd);                                                                                \
    if (r_ != ncclSuccess) {                                                                                \
      printf("%s: Test NCCL failure %s:%d '%s / %s'\n", P.host, __FILE__, __LINE__, ncclGetErrorString(r_), \
             ncclGetLastError(NULL));                                                                       \
      die(TEST_NCCL);                                                                                       \
    }                                                                                                       \
  } while (0)

/* ---- barrier and reduction over threads (and processes) --------------------- */

enum { AGG_RANK0 = 0, AGG_AVG = 1, AGG_MIN = 2, AGG_MAX = 3, AGG_SUM = 4, AGG_BARRIER = 5 };

static pthread_mutex_t syncLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t syncCond = PTHREAD_COND_INITIALIZER;
static int syncCount;
static unsigned syncGen;
static double syncAcc[2];

/* Every thread of every process calls this in the same order; the last
 * thread of a process to arrive does the MPI part. -a 0 (rank 0) keeps
 * each process's thread-0 value, as nccl-tests does. */
static double threadAllreduce(const struct perfThread* t, double v, int mode) {
  pthread_mutex_lock(&syncLock);
  unsigned gen = syncGen;
  double* acc = &syncAcc[gen & 1];
  if (syncCount == 0) {
    *acc = (mode != AGG_RANK0 || t->thread == 0) ? v : 0;
  } else if (mode == AGG_RANK0) {
    if (t->thread == 0) *acc = v;
  } else if (mode == AGG_AVG || mode == AGG_SUM) {
    *acc += v;
  } else if (mode == AGG_MIN) {
    *acc = v < *acc ? v : *acc;
  } else if (mode == AGG_MAX) {
    *acc = v > *acc ? v : *acc;
  }
  if (++syncCount == perfOpt.nThreads) {
#ifdef ANYCCL_PERF_MPI
    if (P.totalProcs > 1 && mode == AGG_BARRIER) MPI_Barrier(MPI_COMM_WORLD);
    if (P.totalProcs > 1 && mode != AGG_BARRIER && mode != AGG_RANK0) {
      MPI_Op op = mode == AGG_MIN ? MPI_MIN : mode == AGG_MAX ? MPI_MAX : MPI_SUM;
      MPI_Allreduce(MPI_IN_PLACE, acc, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    }
#endif
    if (mode == AGG_AVG) *acc /= (double)P.totalProcs * perfOpt.nThreads;
    syncCount = 0;
    syncGen++;
    pthread_cond_broadcast(&syncCond);
  } else {
    while (syncGen == gen) pthread_cond_wait(&syncCond, &syncLock);
  }
  double r = *acc;
  pthread_mutex_unlock(&syncLock);
  return r;
}

static void barrier(const struct perfThread* t) { threadAllreduce(t, 0, AGG_BARRIER); }

/* ---- streams ------------------------------------------------------------------ */

static void checkAsync(const struct perfThread* t) {
  for (int i = 0; i < perfOpt.nGpus; i++) {
    ncclResult_t ae = ncclSuccess;
    NCCLCHECK(ncclCommGetAsyncError(t->comms[i], &ae));
    if (ae != ncclSuccess) {
      for (int j = 0; j < perfOpt.nGpus; j++) ncclCommAbort(t->comms[j]);
      NCCLCHECK(ae);
    }
  }
}

/* nccl-tests' way: poll every stream, yield, watch for async errors and -T. */
static void syncStreamsPoll(const struct perfThread* t) {
  char* done = calloc(perfOpt.nGpus, 1);
  int remaining = perfOpt.nGpus;
  if (done == NULL) {
    printf("%s: out of memory\n", P.host);
    die(TEST_CUDA);
  }
  double start = now();
  while (remaining > 0) {
    int idle = 1;
    for (int i = 0; i < perfOpt.nGpus; i++) {
      if (done[i]) continue;
      if (perfOpt.streamNull) CUDACHECK(cudaSetDevice(t->devs[i]));
      cudaError_t e = cudaStreamQuery(t->streams[i]);
      if (e == cudaSuccess) {
        done[i] = 1, remaining--, idle = 0;
        continue;
      }
      if (e != cudaErrorNotReady) CUDACHECK(e);
      checkAsync(t);
      if (perfOpt.timeout > 0 && now() - start > perfOpt.timeout) {
        for (int j = 0; j < perfOpt.nGpus; j++) ncclCommAbort(t->comms[j]);
        printf("%s: Test timeout (%ds) %s:%d\n", P.host, perfOpt.timeout, __FILE__, __LINE__);
        die(TEST_TIMEOUT);
      }
    }
    if (idle) sched_yield();
  }
  free(done);
}

/* Wait for every stream of this thread. Blocking waits by default: polling
 * threads compete with the library's own threads when ranks share cores. */
static void syncStreams(const struct perfThread* t) {
  if (P.poll || perfOpt.timeout > 0) {
    syncStreamsPoll(t);
    return;
  }
  for (int i = 0; i < perfOpt.nGpus; i++) {
    if (perfOpt.streamNull) CUDACHECK(cudaSetDevice(t->devs[i]));
    CUDACHECK(cudaStreamSynchronize(t->streams[i]));
  }
  checkAsync(t);
}

/* ---- one call of the collective on every device of this thread -------------- */

static void startColl(struct perfThread* t, int type, int opIdx, int root, int inPlace, int iter) {
  const struct perfCounts* c = &t->c;
  size_t es = t->es;
  /* a different offset each iteration (cache effects), as nccl-tests does */
  size_t total = (c->send > c->recv ? c->send : c->recv) * es;
  size_t steps = total ? perfOpt.maxBytes / total : 1;
  size_t shift = total * ((size_t)iter % (steps ? steps : 1));
  if (perfOpt.nGpus > 1) NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < perfOpt.nGpus; i++) {
    int rank = t->firstRank + i;
    char* recv = t->recv[i] + shift;
    char* send = t->send[i] + shift;
    ncclRedOp_t op = opIdx == PERF_OP_MULSUM ? t->premulOps[i] : (ncclRedOp_t)opIdx;
    const void* sp = inPlace ? recv + c->sendInplaceOffset * es * (size_t)rank : send;
    void* rp = recv + (inPlace ? c->recvInplaceOffset * es * (size_t)rank : 0);
    NCCLCHECK(P.coll->run(sp, rp, c->param, (ncclDataType_t)type, op, root, t->comms[i], t->streams[i]));
  }
  if (perfOpt.nGpus > 1) NCCLCHECK(ncclGroupEnd());
  if (perfOpt.blocking) syncStreams(t);
  if (perfOpt.blocking == 1) barrier(t);
}

static void completeColl(const struct perfThread* t) {
  if (perfOpt.blocking && perfOpt.aggIters <= 1) return;
  syncStreams(t);
}

/* ---- data ----------------------------------------------------------------------- */

static int hasInput(int rank, int root) { return P.coll->hasInput ? P.coll->hasInput(rank, root) : 1; }

static void initData(struct perfThread* t, const struct perfModel* m, int root, uint64_t seed, int inPlace) {
  const struct perfCounts* c = &t->c;
  size_t es = t->es;
  for (int i = 0; i < perfOpt.nGpus; i++) {
    int rank = t->firstRank + i;
    size_t sendOff = inPlace ? c->sendInplaceOffset * (size_t)rank : 0;
    size_t recvOff = inPlace ? c->recvInplaceOffset * (size_t)rank : 0;
    size_t clear = inPlace ? (recvOff + c->recv > sendOff + c->send ? recvOff + c->recv : sendOff + c->send) : c->recv;
    CUDACHECK(cudaSetDevice(t->devs[i]));
    CUDACHECK(cudaMemset(t->recv[i], 0, clear * es));
    if (hasInput(rank, root) && c->send > 0) {
      perfFill(m, seed, rank, c->send, t->host);
      char* dst = inPlace ? t->recv[i] + sendOff * es : t->send[i];
      CUDACHECK(cudaMemcpy(dst, t->host, c->send * es, cudaMemcpyHostToDevice));
    }
    CUDACHECK(cudaDeviceSynchronize());
  }
}

/* Elements of this thread's outputs that differ from the host reference.
 * Ranks that expect the same output (all-reduce) are read back block by
 * block and compared with one reference, computed once. */
static int64_t checkDataIn(struct perfThread* t, const struct perfModel* red, const struct perfModel* cp, int root,
                           uint64_t seed, int inPlace, struct perfCheckArgs* a, char** region, const void** got);
static int64_t checkData(struct perfThread* t, const struct perfModel* red, const struct perfModel* cp, int root,
                         uint64_t seed, int inPlace) {
  int G = perfOpt.nGpus;
  struct perfCheckArgs* a = calloc(G, sizeof(*a));
  char** region = calloc(G, sizeof(*region));
  const void** got = calloc(G, sizeof(*got));
  if (a == NULL || region == NULL || got == NULL) {
    printf("%s: out of memory for the data check\n", P.host);
    die(TEST_CUDA);
  }
  int64_t wrong = checkDataIn(t, red, cp, root, seed, inPlace, a, region, got);
  free(a), free(region), free(got);
  return wrong;
}

static int64_t checkDataIn(struct perfThread* t, const struct perfModel* red, const struct perfModel* cp, int root,
                           uint64_t seed, int inPlace, struct perfCheckArgs* a, char** region, const void** got) {
  const struct perfCounts* c = &t->c;
  size_t es = t->es;
  int G = perfOpt.nGpus, shared = P.coll->sameOutput && G > 1;
  if (c->recv == 0) return 0;
  for (int i = 0; i < G; i++) {
    int rank = t->firstRank + i;
    a[i] = (struct perfCheckArgs){
        .coll = P.coll, .red = P.coll->reduces ? red : NULL, .copy = cp, .seed = seed, .rank = rank,
        .nranks = nranksTotal(), .root = root, .c = *c, .inPlace = inPlace, .hasInput = hasInput(rank, root),
        .sendOff = inPlace ? c->sendInplaceOffset * (size_t)rank : 0,
        .recvOff = inPlace ? c->recvInplaceOffset * (size_t)rank : 0,
    };
    region[i] = t->recv[i] + a[i].recvOff * es;
    CUDACHECK(cudaSetDevice(t->devs[i]));
    if (P.corrupt > 0 && rank == 0) { /* test hook: spoil the output on the device */
      size_t n = (size_t)P.corrupt < c->recv ? (size_t)P.corrupt : c->recv;
      CUDACHECK(cudaMemcpy(t->host, region[i], n * es, cudaMemcpyDeviceToHost));
      for (size_t b = 0; b < n * es; b++) ((unsigned char*)t->host)[b] ^= 0xff;
      CUDACHECK(cudaMemcpy(region[i], t->host, n * es, cudaMemcpyHostToDevice));
    }
  }
  int64_t wrong = 0;
  if (!shared) {
    for (int i = 0; i < G; i++) {
      CUDACHECK(cudaSetDevice(t->devs[i]));
      CUDACHECK(cudaMemcpy(t->host, region[i], c->recv * es, cudaMemcpyDeviceToHost));
      got[0] = t->host;
      wrong += perfCheck(&a[i], 0, c->recv, got, 1);
    }
    return wrong;
  }
  size_t block = perfOpt.maxBytes / es / (size_t)G; /* t->host holds G blocks */
  if (block == 0) block = 1;
  for (size_t j0 = 0; j0 < c->recv; j0 += block) {
    size_t n = c->recv - j0 < block ? c->recv - j0 : block;
    for (int i = 0; i < G; i++) {
      char* dst = (char*)t->host + (size_t)i * n * es;
      CUDACHECK(cudaSetDevice(t->devs[i]));
      CUDACHECK(cudaMemcpy(dst, region[i] + j0 * es, n * es, cudaMemcpyDeviceToHost));
      got[i] = dst;
    }
    wrong += perfCheck(&a[0], j0, n, got, G);
  }
  return wrong;
}

/* ---- one measurement: a size, out-of-place or in-place ----------------------- */

static void benchTime(struct perfThread* t, int type, int op, int root, int inPlace) {
  struct perfModel red, cp;
  perfModelInit(&red, type, op < 0 ? ncclSum : op, nranksTotal());
  perfModelInit(&cp, type, PERF_OP_COPY, nranksTotal());
  const struct perfModel* inModel = P.coll->reduces ? &red : &cp;
  t->reportErrors = perfOpt.datacheck && (!inPlace || P.coll->checkInPlace);

  if (perfOpt.datacheck) initData(t, inModel, root, 99, inPlace);
  startColl(t, type, op, root, inPlace, 0); /* sync */
  completeColl(t);
  barrier(t);

  double start = now(), collOnly = 0;
  for (int iter = 0; iter < perfOpt.iters; iter++) {
    double it0 = now();
    if (perfOpt.aggIters > 1) NCCLCHECK(ncclGroupStart());
    for (int a = 0; a < perfOpt.aggIters; a++) startColl(t, type, op, root, inPlace, iter * perfOpt.aggIters + a);
    if (perfOpt.aggIters > 1) NCCLCHECK(ncclGroupEnd());
    if (perfOpt.blocking == 3) {
      syncStreams(t);
      collOnly += now() - it0;
      barrier(t);
    }
  }
  double calls = (double)perfOpt.iters * perfOpt.aggIters;
  double cpuSec = (perfOpt.blocking == 3 ? collOnly : now() - start) / calls;
  completeColl(t);
  double sec = (perfOpt.blocking == 3 ? collOnly : now() - start) / calls;
  sec = threadAllreduce(t, sec, perfOpt.average);

  double algBw = 0, busBw = 0;
  P.coll->bw(t->c.param, t->es, sec, nranksTotal(), &algBw, &busBw);
  barrier(t);

  int64_t wrong = 0;
  t->rep++;
  for (int c = 0; c < perfOpt.datacheck && t->reportErrors; c++) {
    uint64_t seed = t->rep;
    initData(t, inModel, root, seed, inPlace);
    startColl(t, type, op, root, inPlace, 0);
    completeColl(t);
    int64_t local = checkData(t, &red, &cp, root, seed, inPlace);
    if (local) t->errors++;
    wrong = (int64_t)threadAllreduce(t, (double)local, AGG_SUM);
    if (wrong) break;
  }
  if (isMain(t)) {
    double us = (perfOpt.cputime ? cpuSec : sec) * 1e6;
    perfRowBody(us, algBw, busBw, t->reportErrors, wrong, !inPlace, perfOpt.cputime, perfOpt.timestamps);
  }
  t->bw += busBw;
  t->bwCount++;
}

static size_t nextSize(size_t size) {
  if (perfOpt.stepFactor > 1) return size ? size * perfOpt.stepFactor : 1;
  return size + perfOpt.stepBytes;
}

static void setupSize(struct perfThread* t, size_t size, int type) {
  t->es = perfTypeSize(type);
  P.coll->counts(size / t->es, t->es, nranksTotal(), &t->c);
}

static void progress(const struct perfThread* t, const char* what, int type, int op, int root, size_t size, int k,
                     int n) {
  if (!isMain(t) || !P.progress || now() - P.t0 < 1.0) return;
  char rootStr[32] = "";
  if (root >= 0) snprintf(rootStr, sizeof(rootStr), " root %d", root);
  perfProgress("# %s: %s%s%s%s: %zu B %s (%d/%d)", P.prog, perfTypeNames[type], op < 0 ? "" : " ",
               op < 0 ? "" : perfOpNames[op], rootStr, size, what, k, n);
}

/* "mulsum" runs with one premultiply op per device, created for the whole
 * sweep (nccl-tests creates and destroys one around every call). */
static void premulOps(struct perfThread* t, int type, int create) {
  for (int i = 0; i < perfOpt.nGpus; i++) {
    if (create) {
      uint64_t scalar = perfPremulScalar(type, t->firstRank + i);
      NCCLCHECK(ncclRedOpCreatePreMulSum(&t->premulOps[i], &scalar, (ncclDataType_t)type, ncclScalarHostImmediate,
                                         t->comms[i]));
    } else {
      NCCLCHECK(ncclRedOpDestroy(t->premulOps[i], t->comms[i]));
    }
  }
}

static void timeTest(struct perfThread* t, int type, int op, int root) {
  const char* opName = op < 0 ? "none" : perfOpNames[op];
  size_t es = perfTypeSize(type);
  barrier(t);
  if (op == PERF_OP_MULSUM) premulOps(t, type, 1);
  for (int i = 0; i < perfOpt.nGpus; i++) t->send[i] += perfOpt.unalign * es, t->recv[i] += perfOpt.unalign * es;

  int nSizes = 0;
  for (size_t s = perfOpt.minBytes; s <= perfOpt.maxBytes; s = nextSize(s)) nSizes++;
  /* warm-up every size, doubling */
  for (size_t size = perfOpt.minBytes; size <= perfOpt.maxBytes; size = size ? size * 2 : 1) {
    setupSize(t, size, type);
    progress(t, "warm-up", type, op, root, size, 0, nSizes);
    for (int w = 0; w < perfOpt.warmup; w++) startColl(t, type, op < 0 ? ncclSum : op, root, 0, w);
    completeColl(t);
  }
  long repeat = perfOpt.runCycles;
  do {
    int k = 0;
    for (size_t size = perfOpt.minBytes; size <= perfOpt.maxBytes; size = nextSize(size)) {
      setupSize(t, size, type);
      k++;
      if (isMain(t)) {
        size_t bytes = (t->c.send > t->c.recv ? t->c.send : t->c.recv) * t->es;
        perfRowStart(bytes, t->c.param, perfTypeNames[type], opName, root);
      }
      progress(t, "out-of-place", type, op, root, size, k, nSizes);
      benchTime(t, type, op < 0 ? ncclSum : op, root, 0);
      progress(t, "in-place", type, op, root, size, k, nSizes);
      benchTime(t, type, op < 0 ? ncclSum : op, root, 1);
      if (isMain(t)) perfRowEnd(perfOpt.iters);
    }
  } while (--repeat);

  for (int i = 0; i < perfOpt.nGpus; i++) t->send[i] -= perfOpt.unalign * es, t->recv[i] -= perfOpt.unalign * es;
  if (op == PERF_OP_MULSUM) premulOps(t, type, 0);
}

/* ---- the loops over types, ops and roots ---------------------------------------- */

static void runTests(struct perfThread* t) {
  int ntypes = perfOpt.type < 0 ? P.ntypes : 1;
  int nops = !P.coll->loopsOps ? 1 : perfOpt.op < 0 ? PERF_NUM_OPS : 1;
  int r0 = !P.coll->rooted ? -1 : perfOpt.root < 0 ? 0 : perfOpt.root;
  int r1 = !P.coll->rooted ? -1 : perfOpt.root < 0 ? nranksTotal() - 1 : perfOpt.root;
  CUDACHECK(cudaSetDevice(t->devs[0]));
  for (int i = 0; i < ntypes; i++) {
    int type = perfOpt.type < 0 ? P.types[i] : perfOpt.type;
    for (int j = 0; j < nops; j++) {
      int op = !P.coll->loopsOps ? -1 : perfOpt.op < 0 ? j : perfOpt.op;
      for (int root = r0; root <= r1; root++) timeTest(t, type, op, root);
    }
  }
}

/* ---- communicators and buffers ---------------------------------------------------- */

static ncclUniqueId ncclId;

static void initComms(ncclComm_t* comms, int n, int firstRank, const int* devs) {
  ncclConfig_t* config = calloc((size_t)n, sizeof(ncclConfig_t));
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < n; i++) {
    config[i] = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    if (perfOpt.ctaPolicy >= 0) config[i].CTAPolicy = perfOpt.ctaPolicy;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    config[i].nvlinkCentricSched = 1; /* as nccl-tests sets it */
#endif
    CUDACHECK(cudaSetDevice(devs[i]));
    NCCLCHECK(ncclCommInitRankConfig(comms + i, nranksTotal(), ncclId, firstRank + i, config + i));
  }
  NCCLCHECK(ncclGroupEnd());
  free(config);
}

static void allocBuffers(struct perfThread* t) {
  size_t bytes = perfOpt.maxBytes + 8 * (size_t)perfOpt.unalign + 64;
  for (int i = 0; i < perfOpt.nGpus; i++) {
    CUDACHECK(cudaSetDevice(t->devs[i]));
    NCCLCHECK(ncclMemAlloc((void**)&t->send[i], bytes));
    NCCLCHECK(ncclMemAlloc((void**)&t->recv[i], bytes));
  }
  if (perfOpt.localRegister) {
    NCCLCHECK(ncclGroupStart());
    for (int i = 0; i < perfOpt.nGpus; i++) {
      if (perfOpt.localRegister == 2) {
        NCCLCHECK(ncclCommWindowRegister(t->comms[i], t->send[i], perfOpt.maxBytes, (ncclWindow_t*)&t->sendReg[i],
                                         NCCL_WIN_COLL_SYMMETRIC));
        NCCLCHECK(ncclCommWindowRegister(t->comms[i], t->recv[i], perfOpt.maxBytes, (ncclWindow_t*)&t->recvReg[i],
                                         NCCL_WIN_COLL_SYMMETRIC));
      } else {
        NCCLCHECK(ncclCommRegister(t->comms[i], t->send[i], perfOpt.maxBytes, &t->sendReg[i]));
        NCCLCHECK(ncclCommRegister(t->comms[i], t->recv[i], perfOpt.maxBytes, &t->recvReg[i]));
      }
    }
    NCCLCHECK(ncclGroupEnd());
  }
  t->host = malloc(perfOpt.maxBytes + 8 * PERF_MAX_GPUS + 64);
  if (t->host == NULL) {
    printf("%s: cannot allocate %zu bytes of host memory for the data check\n", P.host, perfOpt.maxBytes);
    die(TEST_CUDA);
  }
}

static void freeResources(struct perfThread* t) {
  for (int i = 0; i < perfOpt.nGpus; i++) {
    if (perfOpt.localRegister == 2) {
      NCCLCHECK(ncclCommWindowDeregister(t->comms[i], (ncclWindow_t)t->sendReg[i]));
      NCCLCHECK(ncclCommWindowDeregister(t->comms[i], (ncclWindow_t)t->recvReg[i]));
    } else if (perfOpt.localRegister) {
      NCCLCHECK(ncclCommDeregister(t->comms[i], t->sendReg[i]));
      NCCLCHECK(ncclCommDeregister(t->comms[i], t->recvReg[i]));
    }
  }
  for (int i = 0; i < perfOpt.nGpus; i++) NCCLCHECK(ncclCommDestroy(t->comms[i]));
  for (int i = 0; i < perfOpt.nGpus; i++) {
    CUDACHECK(cudaSetDevice(t->devs[i]));
    NCCLCHECK(ncclMemFree(t->send[i]));
    NCCLCHECK(ncclMemFree(t->recv[i]));
    if (!perfOpt.streamNull) CUDACHECK(cudaStreamDestroy(t->streams[i]));
  }
  free(t->host);
}

static void* threadMain(void* arg) {
  struct perfThread* t = arg;
  if (perfOpt.parallelInit) {
    initComms(t->comms, perfOpt.nGpus, t->firstRank, t->devs);
    allocBuffers(t);
  }
  runTests(t);
  return NULL;
}

/* ---- header, devices, footer -------------------------------------------------------- */

#define PRINT(...)                       \
  do {                                   \
    if (P.proc == 0) printf(__VA_ARGS__); \
  } while (0)
#define MAX_LINE 2048

/* Prints the run's parameters and one line per device, in rank order over
 * all processes; returns the smallest device memory. */
static size_t deviceReport(int gpu0) {
  const struct perfOptions* o = &perfOpt;
  int nLocal = o->nThreads * o->nGpus;
  PRINT("# anyccl perf tools %s (nccl-tests %s format) nccl-headers=%d nccl-library=%d\n", PERF_VERSION,
        PERF_FORMAT_VERSION, NCCL_VERSION_CODE, P.ncclVersion);
  PRINT("# Collective test starting: %s\n", P.prog);
  PRINT("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
        "validation: %d graph: %d unalign: %d\n",
        o->nThreads, o->nGpus, o->minBytes, o->maxBytes, o->stepFactor > 1 ? o->stepFactor : o->stepBytes,
        o->stepFactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->aggIters, o->datacheck, 0, o->unalign);
  if (perfOpt.blocking == 1) PRINT("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  if (perfOpt.blocking == 2) PRINT("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  if (perfOpt.blocking == 3)
    PRINT("# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n");
  if (perfOpt.parallelInit) PRINT("# Parallel Init Enabled: threads call into NcclInitRank concurrently \n");
  if (simNow) PRINT("# Simulated (ANYCCL_BACKEND=sim): times are modelled on a virtual clock; no data moves, none is checked\n");
  PRINT("#\n");
  if (P.proc == 0 && perfJsonActive()) {
    perfJsonKey("config"), perfJsonBeginObject();
    perfJsonKey("nthreads"), perfJsonInt(perfOpt.nThreads);
    perfJsonKey("ngpus"), perfJsonInt(perfOpt.nGpus);
    perfJsonKey("minimum_bytes"), perfJsonInt((long long)perfOpt.minBytes);
    perfJsonKey("maximum_bytes"), perfJsonInt((long long)perfOpt.maxBytes);
    if (perfOpt.stepFactor > 1) {
      perfJsonKey("step_factor"), perfJsonInt((long long)perfOpt.stepFactor);
    } else {
      perfJsonKey("step_bytes"), perfJsonInt((long long)perfOpt.stepBytes);
    }
    perfJsonKey("warmup_iters"), perfJsonInt(perfOpt.warmup);
    perfJsonKey("iterations"), perfJsonInt(perfOpt.iters);
    perfJsonKey("aggregated_iterations"), perfJsonInt(perfOpt.aggIters);
    perfJsonKey("validation"), perfJsonInt(perfOpt.datacheck);
    perfJsonKey("graph"), perfJsonInt(0);
    perfJsonKey("blocking_collectives"), perfJsonBool(perfOpt.blocking);
    perfJsonKey("per_iter_timing"), perfJsonBool(0);
    perfJsonKey("per_iter_skip"), perfJsonInt(0);
    perfJsonKey("parallel_init"), perfJsonBool(perfOpt.parallelInit);
  }
  PRINT("# Using devices\n");
  char line[MAX_LINE];
  int len = 0, available = 0, bad = 0;
  size_t maxMem = ~(size_t)0;
  CUDACHECK(cudaGetDeviceCount(&available));
  for (int i = 0; i < nLocal; i++) {
    int dev = (gpu0 != -1 ? gpu0 : P.localRank * nLocal) + i;
    int rank = P.proc * nLocal + i;
    if (dev >= available) {
      fprintf(stderr, "Invalid number of GPUs: %d requested but only %d were found.\n",
              (gpu0 != -1 ? gpu0 : P.localRank * nLocal) + nLocal, available);
      fprintf(stderr, "Please check the number of processes and GPUs per process.\n");
      bad = 1;
      break;
    }
    struct cudaDeviceProp prop;
    CUDACHECK(cudaGetDeviceProperties(&prop, dev));
    if (len < MAX_LINE) {
      len += snprintf(line + len, MAX_LINE - len,
                      "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n", rank, P.color,
                      (int)getpid(), P.host, dev, prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, prop.name);
    }
    if (prop.totalGlobalMem < maxMem) maxMem = prop.totalGlobalMem;
  }
  if (len >= MAX_LINE) strcpy(line + MAX_LINE - 5, "...\n");
  if (len == 0) line[0] = 0;
  char* lines = line;
  int nLines = 1;
#ifdef ANYCCL_PERF_MPI
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (P.totalProcs > 1) {
    lines = P.proc == 0 ? malloc((size_t)P.totalProcs * MAX_LINE) : NULL;
    MPI_Gather(line, MAX_LINE, MPI_BYTE, lines, MAX_LINE, MPI_BYTE, 0, MPI_COMM_WORLD);
    nLines = P.totalProcs;
    unsigned long long m = maxMem;
    MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    maxMem = (size_t)m;
  }
#endif
  if (P.proc == 0) {
    perfJsonKey("devices"), perfJsonBeginList();
    for (int p = 0; p < nLines; p++) {
      char* l = lines + (size_t)MAX_LINE * p;
      PRINT("%s", l);
      for (char* s = l; s && *s;) { /* one JSON object per device line */
        perfJsonDeviceLine(s);
        s = strchr(s, '\n');
        s = s ? s + 1 : NULL;
      }
    }
    perfJsonEndList();
    perfJsonEndObject(); /* config */
  }
  if (lines != line) free(lines);
  if (bad) die(TEST_USAGE);
  return maxMem;
}

static void tableHeader(void) {
  const char* ts = perfOpt.timestamps ? "timestamp" : "";
  const char* tsFmt = perfOpt.timestamps ? "%Y-%m-%d %H:%M:%S" : "";
  int tsPad = perfOpt.timestamps ? 19 : 0;
  const char* tm = perfOpt.cputime ? "cputime" : "time";
  PRINT("#\n");
  PRINT("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "",
        "");
  PRINT("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size", "count", "type", "redop",
        "root", tm, "algbw", "busbw", "#wrong", tm, "algbw", "busbw", "#wrong", tsPad, ts);
  PRINT("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)", "(elements)", "", "", "",
        "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", tsPad, tsFmt);
  if (P.proc == 0) perfJsonKey("results"), perfJsonBeginList();
}

static int footer(int errors, double bw) {
  const char* env = getenv("NCCL_TESTS_MIN_BW");
  double minBw = env ? atof(env) : -1;
  int bwBad = minBw != -1 && bw < minBw * 0.9;
  if (P.proc == 0) perfJsonEndList(); /* results */
  PRINT("# %-20s : %d %s\n", "Out of bounds values", errors, errors ? "FAILED" : "OK");
  PRINT("# %-20s : %g %s\n", "Avg bus bandwidth", bw, minBw == -1 ? "" : bwBad ? "FAILED" : "OK");
  PRINT("#\n");
  PRINT("# Collective test concluded: %s\n", P.prog);
  if (P.proc == 0 && perfJsonActive()) {
    perfJsonKey("out_of_bounds"), perfJsonBeginObject();
    perfJsonKey("count"), perfJsonInt(errors);
    perfJsonKey("okay"), perfJsonBool(errors == 0);
    perfJsonEndObject();
    perfJsonKey("average_bus_bandwidth"), perfJsonBeginObject();
    perfJsonKey("bandwidth"), perfJsonDouble(bw);
    perfJsonKey("okay");
    if (minBw == -1) {
      perfJsonStr("unchecked");
    } else {
      perfJsonBool(!bwBad);
    }
    perfJsonEndObject();
  }
  PRINT("#\n");
  return errors || bwBad;
}

static void lastError(void) {
  const char* err = ncclGetLastError(NULL);
  if (err && *err) {
    PRINT("# error: %s\n", err);
  } else {
    PRINT("\n");
  }
  if (P.proc == 0 && perfJsonActive()) {
    perfJsonKey("errors"), perfJsonBeginList();
    if (err) perfJsonStr(err);
    perfJsonEndList();
  }
}

/* ---- processes -------------------------------------------------------------------- */

static uint64_t hostHash(void) {
  uint64_t h = 1469598103934665603ULL;
  for (const char* s = P.host; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  const char* id = getenv("NCCL_HOSTID"); /* anyccl's virtual hosts */
  for (const char* s = id ? id : ""; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

#ifdef ANYCCL_PERF_MPI
/* NCCL_TESTS_SPLIT_MASK=0x.. (color = proc & mask) or NCCL_TESTS_SPLIT="AND 0x3" | "OR .." | "MOD .." |
 * "DIV .." (also & | % /), as in nccl-tests. */
static int splitColor(int proc) {
  const char* env = getenv("NCCL_TESTS_SPLIT_MASK");
  if (env) return proc & (int)strtoul(env, NULL, 16);
  env = getenv("NCCL_TESTS_SPLIT");
  if (!env) return 0;
  static const struct {
    const char* name;
    char op;
  } ops[] = {{"AND", '&'}, {"&", '&'}, {"OR", '|'}, {"|", '|'}, {"MOD", '%'}, {"%", '%'}, {"DIV", '/'}, {"/", '/'}};
  for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
    size_t n = strlen(ops[i].name);
    if (strncasecmp(env, ops[i].name, n) != 0) continue;
    const char* s = env + n;
    while (*s == ' ' || *s == '\t') s++;
    char* end = NULL;
    int v = strncasecmp(s, "0b", 2) == 0 ? (int)strtoul(s + 2, &end, 2) : (int)strtoul(s, &end, 0);
    if (end == s) return 0;
    switch (ops[i].op) {
      case '&': return proc & v;
      case '|': return proc | v;
      case '%': return v ? proc % v : 0;
      default: return v ? proc / v : 0;
    }
  }
  return 0;
}
#endif

static void setupProcesses(void) {
  P.totalProcs = P.ncclProcs = 1;
  gethostname(P.host, sizeof(P.host) - 1);
  char* dot = strchr(P.host, '.');
  if (dot) *dot = 0;
#ifdef ANYCCL_PERF_MPI
  MPI_Comm_size(MPI_COMM_WORLD, &P.totalProcs);
  MPI_Comm_rank(MPI_COMM_WORLD, &P.proc);
  uint64_t* hashes = calloc((size_t)P.totalProcs, sizeof(uint64_t));
  hashes[P.proc] = hostHash();
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hashes, sizeof(uint64_t), MPI_BYTE, MPI_COMM_WORLD);
  for (int p = 0; p < P.proc; p++) P.localRank += hashes[p] == hashes[P.proc];
  free(hashes);
  P.color = splitColor(P.proc);
  MPI_Comm_split(MPI_COMM_WORLD, P.color, P.proc, &P.mpiComm);
  MPI_Comm_size(P.mpiComm, &P.ncclProcs);
  MPI_Comm_rank(P.mpiComm, &P.ncclProc);
#else
  (void)hostHash;
#endif
}

/* ---- the run ---------------------------------------------------------------------- */

static int run(void) {
  setupProcesses();
  const char* env = getenv("NCCL_TESTS_DEVICE");
  int gpu0 = env ? atoi(env) : -1;
  size_t maxMem = deviceReport(gpu0);

  /* leave room as nccl-tests does: 1 GiB per 16 GiB (at most 4), plus 1 GiB */
  const size_t GB = (size_t)1 << 30;
  size_t reserve = (maxMem + 16 * GB - 1) / (16 * GB) * GB;
  if (reserve > 4 * GB) reserve = 4 * GB;
  if (maxMem > reserve + GB) {
    size_t memMax = (maxMem - reserve - GB) / (perfOpt.datacheck ? 3 : 2);
    if (perfOpt.maxBytes > memMax) {
      perfOpt.maxBytes = memMax;
      if (perfOpt.minBytes > perfOpt.maxBytes) perfOpt.minBytes = perfOpt.maxBytes;
      PRINT("#\n# Reducing maxBytes to %zu due to memory limitation\n", perfOpt.maxBytes);
    }
  }

  if (P.ncclProc == 0) NCCLCHECK(ncclGetUniqueId(&ncclId));
#ifdef ANYCCL_PERF_MPI
  MPI_Bcast(&ncclId, sizeof(ncclId), MPI_BYTE, 0, P.mpiComm);
  MPI_Barrier(MPI_COMM_WORLD);
#endif

  int nLocal = perfOpt.nThreads * perfOpt.nGpus;
  int* devs = calloc((size_t)nLocal, sizeof(int));
  ncclComm_t* comms = calloc((size_t)nLocal, sizeof(ncclComm_t));
  cudaStream_t* streams = calloc((size_t)nLocal, sizeof(cudaStream_t));
  char** bufs = calloc(2 * (size_t)nLocal, sizeof(char*));
  void** regs = calloc(2 * (size_t)nLocal, sizeof(void*));
  struct perfThread* threads = calloc((size_t)perfOpt.nThreads, sizeof(struct perfThread));
  int minArch = 1 << 30;
  for (int i = 0; i < nLocal; i++) {
    devs[i] = (gpu0 != -1 ? gpu0 : P.localRank * nLocal) + i;
    CUDACHECK(cudaSetDevice(devs[i]));
    if (!perfOpt.streamNull) CUDACHECK(cudaStreamCreateWithFlags(streams + i, cudaStreamNonBlocking));
    int major = 0, minor = 0;
    CUDACHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, devs[i]));
    CUDACHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, devs[i]));
    if (100 * major + 10 * minor < minArch) minArch = 100 * major + 10 * minor;
  }
#ifdef ANYCCL_PERF_MPI
  MPI_Allreduce(MPI_IN_PLACE, &minArch, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
#endif
  P.ntypes = 0;
  for (int ty = 0; ty < PERF_NUM_TYPES; ty++) {
#ifndef ANYCCL_CPU_CUDA_RUNTIME_H /* NCCL reduces fp8 on sm_90 and later; anyccl-cpu everywhere */
    if ((ty == ncclFloat8e4m3 || ty == ncclFloat8e5m2) && minArch < 900) continue;
#endif
    P.types[P.ntypes++] = ty;
  }
  (void)minArch;

  for (int t = 0; t < perfOpt.nThreads; t++) {
    struct perfThread* th = &threads[t];
    th->thread = t;
    th->firstRank = (P.ncclProc * perfOpt.nThreads + t) * perfOpt.nGpus;
    th->devs = devs + t * perfOpt.nGpus;
    th->comms = comms + t * perfOpt.nGpus;
    th->streams = streams + t * perfOpt.nGpus;
    th->send = bufs + t * perfOpt.nGpus;
    th->recv = bufs + nLocal + t * perfOpt.nGpus;
    th->sendReg = regs + t * perfOpt.nGpus;
    th->recvReg = regs + nLocal + t * perfOpt.nGpus;
  }
  if (!perfOpt.parallelInit) {
    initComms(comms, nLocal, P.ncclProc * nLocal, devs);
    for (int t = 0; t < perfOpt.nThreads; t++) allocBuffers(&threads[t]);
  }
  fflush(stdout);
  tableHeader();

  P.t0 = now();
  for (int t = perfOpt.nThreads - 1; t > 0; t--) {
    if (pthread_create(&threads[t].tid, NULL, threadMain, &threads[t]) != 0) {
      printf("%s: cannot start thread %d\n", P.host, t);
      die(TEST_USAGE);
    }
  }
  threadMain(&threads[0]);
  int errors = 0, bwCount = 0;
  double bw = 0;
  for (int t = perfOpt.nThreads - 1; t >= 0; t--) {
    if (t) pthread_join(threads[t].tid, NULL);
    errors += threads[t].errors, bw += threads[t].bw, bwCount += threads[t].bwCount;
  }
#ifdef ANYCCL_PERF_MPI
  MPI_Allreduce(MPI_IN_PLACE, &errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
#endif
  for (int t = 0; t < perfOpt.nThreads; t++) freeResources(&threads[t]);
  perfProgressClear();
  int bad = footer(errors, bwCount ? bw / bwCount : 0);
  free(devs), free(comms), free(streams), free(bufs), free(regs), free(threads);
  return bad ? TEST_WRONG : 0;
}

int perfMain(int argc, char** argv, const struct perfColl* coll) {
  setlinebuf(stdout);
  P.coll = coll;
  const char* slash = strrchr(argv[0], '/');
  P.prog = slash ? slash + 1 : argv[0];
  P.ncclVersion = NCCL_VERSION_CODE;
  ncclGetVersion(&P.ncclVersion);
  gethostname(P.host, sizeof(P.host) - 1);
  int rc = perfParseArgs(argc, argv, P.prog);
  if (rc >= 0) return rc;
  const char* env = getenv("ANYCCL_PERF_CORRUPT");
  P.corrupt = env ? atoi(env) : 0;
  env = getenv("ANYCCL_PERF_DEBUG");
  perfCheckReport = env ? atoi(env) : 0;
  env = getenv("ANYCCL_PERF_POLL");
  P.poll = env && atoi(env) != 0;
  int (*simMode)(void);
  *(void**)&simMode = dlsym(RTLD_DEFAULT, "anycclCpuSimMode");
  if (simMode && simMode()) {
    *(void**)&simNow = dlsym(RTLD_DEFAULT, "anycclCpuSimNow");
    perfOpt.datacheck = 0; /* no data moves: nothing to check (#wrong: N/A) */
  }
  perfDataInit();

#ifdef ANYCCL_PERF_MPI
  int provided;
  int required = perfOpt.nThreads > 1 ? MPI_THREAD_SERIALIZED : MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, required, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &P.proc);
  if (provided < required && P.proc == 0) /* threads take turns calling MPI (barriers, reductions) */
    printf("# warning: the MPI library gives thread level %d, -t %d needs MPI_THREAD_SERIALIZED\n", provided,
           perfOpt.nThreads);
#endif
  env = getenv("ANYCCL_PERF_NO_PROGRESS");
  P.progress = P.proc == 0 && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) && !(env && atoi(env));
  perfProgressInit(P.progress);
  if (P.proc == 0) perfJsonOpen(perfOpt.jsonPath, argc, argv, environ, P.ncclVersion);

  rc = run();
  lastError();
#ifdef ANYCCL_PERF_MPI
  MPI_Comm_free(&P.mpiComm);
  MPI_Finalize();
#endif
  perfJsonClose();
  free(perfOpt.jsonPath);
  return rc;
}
