/* Every wait is bounded: one case per kind of wait (docs/failures.md has the
 * table). Each case has a hard alarm() of its own, so a wait that regresses
 * into a hang fails here instead of stalling CI.
 *
 *   test_waits default        ANYCCL_OP_TIMEOUT is 600 s by default, and the
 *                             bootstrap (init) bound follows it
 *   test_waits init_missing   a peer never arrives at init (ANYCCL_OP_TIMEOUT
 *                             set by CTest): a blocking init and a group init
 *                             end with ncclSystemError within the bound
 *   test_waits init_abort     ncclCommAbort ends a nonblocking init that waits
 *                             for a missing peer, and a split that waits for a
 *                             peer that never splits, at once
 *   test_waits coll_timeout   a collective and a receive whose peer never
 *                             calls end with ncclSystemError within
 *                             ANYCCL_OP_TIMEOUT (1 s); destroy returns at once
 *   test_waits coll_abort     ncclCommAbort releases cudaStreamSynchronize,
 *                             cudaEventSynchronize and cudaDeviceSynchronize
 *                             blocked on such a collective (no op timeout)
 *   test_waits coll_revoke    ncclCommRevoke does the same; later calls are
 *                             refused; destroy returns at once
 *   test_waits queued_stop    abort (and revoke + destroy) of a communicator
 *                             whose work is queued on a stream behind another
 *                             communicator's stuck collective returns at once
 *   test_waits large_timeout  as coll_timeout for a single-copy message
 *   test_waits net_timeout    ranks on two virtual hosts (network proxy and
 *   test_waits net_revoke     sockets); the peer is alive but silent: the
 *   test_waits net_abort      send ends by timeout / revoke / abort, and
 *                             destroy does not wait to drain it
 *   test_waits peer_gone      a peer process exits after init: a bootstrap
 *                             receive from it (ncclCommShrink waiting for the
 *                             leader's id) ends with ncclRemoteError at once,
 *                             not at the timeout
 *   test_waits launch_busy    a group never waits for a launch thread that is
 *                             busy with another group's job
 * Prints "PASS: <case>" or the first failure, and exits non-zero on failure. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include "bootstrap.h"
#include "launchers.h"
#include "param.h"
#include "rt.h"

/* weak: the test also builds against code from before the bound existed */
int64_t bootstrapTimeoutMs(void) __attribute__((weak));

static const char* self;
static char failMsg[512];

static double nowS(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static void sleepMs(int ms) { usleep(ms * 1000); }

#define FAIL(...)                                                 \
  do {                                                            \
    snprintf(failMsg, sizeof(failMsg), __VA_ARGS__);              \
    return 1;                                                     \
  } while (0)
#define NCK(x)                                                                         \
  do {                                                                                 \
    ncclResult_t r_ = (x);                                                             \
    if (r_ != ncclSuccess) FAIL("%s: %s (line %d)", #x, ncclGetErrorString(r_), __LINE__); \
  } while (0)
#define CUCK(x)                                                                          \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) FAIL("%s: %s (line %d)", #x, cudaGetErrorString(e_), __LINE__); \
  } while (0)
/* t seconds must lie in [lo, hi] */
#define WITHIN(what, t, lo, hi) \
  do {                          \
    double t_ = (t);            \
    if (t_ < (lo) || t_ > (hi)) FAIL("%s took %.2f s, outside [%.1f, %.1f] s", what, t_, (double)(lo), (double)(hi)); \
  } while (0)

/* ---- default ------------------------------------------------------------ */
static int caseDefault(void) {
  if (getenv("ANYCCL_OP_TIMEOUT") || getenv("ANYCCL_BOOTSTRAP_TIMEOUT")) FAIL("run without the timeout variables");
  if (anycclParamInt(PARAM_OP_TIMEOUT) != 600) FAIL("ANYCCL_OP_TIMEOUT defaults to %lld, not 600", (long long)anycclParamInt(PARAM_OP_TIMEOUT));
  if (bootstrapTimeoutMs == NULL) FAIL("no bootstrapTimeoutMs(): init has no bound of its own");
  if (bootstrapTimeoutMs() != 600000) FAIL("the bootstrap bound defaults to %lld ms, not 600000", (long long)bootstrapTimeoutMs());
  return 0;
}

/* ---- init with a missing peer ------------------------------------------- */
static int caseInitMissing(void) {
  long bound = atol(getenv("ANYCCL_OP_TIMEOUT") ? getenv("ANYCCL_OP_TIMEOUT") : "0");
  if (bound < 1 || bound > 5) FAIL("set ANYCCL_OP_TIMEOUT to 1..5 s");
  ncclUniqueId id;
  NCK(ncclGetUniqueId(&id));
  ncclComm_t comm = NULL;
  double t0 = nowS();
  ncclResult_t r = ncclCommInitRank(&comm, 2, id, 0);
  if (r != ncclSystemError || comm != NULL) FAIL("blocking init without its peer returned %s, comm %p", ncclGetErrorString(r), (void*)comm);
  WITHIN("blocking init without its peer", nowS() - t0, bound - 0.5, bound + 2.0);
  /* the same inside a group (the init runs at ncclGroupEnd) */
  NCK(ncclGetUniqueId(&id));
  t0 = nowS();
  NCK(ncclGroupStart());
  r = ncclCommInitRank(&comm, 3, id, 1);
  ncclResult_t g = ncclGroupEnd();
  if (g != ncclSystemError) FAIL("group init without its peers: ncclGroupEnd returned %s (init %s)", ncclGetErrorString(g), ncclGetErrorString(r));
  WITHIN("group init without its peers", nowS() - t0, bound - 0.5, bound + 2.0);
  if (comm) ncclCommAbort(comm);
  return 0;
}

/* ---- abort during init and split ------------------------------------------ */
struct splitArg {
  ncclComm_t comm, out;
  ncclResult_t res;
  double took;
};
static void* splitMain(void* a) {
  struct splitArg* s = a;
  cudaSetDevice(0);
  double t0 = nowS();
  s->res = ncclCommSplit(s->comm, 0, 0, &s->out, NULL);
  s->took = nowS() - t0;
  return NULL;
}

static int caseInitAbort(void) {
  ncclUniqueId id;
  NCK(ncclGetUniqueId(&id));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, 0, &cfg);
  if (r != ncclInProgress) FAIL("nonblocking init returned %s, not ncclInProgress", ncclGetErrorString(r));
  sleepMs(300);
  ncclResult_t async;
  NCK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclInProgress) FAIL("init without its peer is %s after 0.3 s, not in progress", ncclGetErrorString(async));
  double t0 = nowS();
  NCK(ncclCommAbort(comm));
  WITHIN("ncclCommAbort of an init waiting for its peer", nowS() - t0, 0, 0.5);

  /* a split waits (bootstrap all-gather) for a peer that never splits */
  ncclComm_t comms[2];
  NCK(ncclCommInitAll(comms, 2, NULL));
  struct splitArg s = {comms[0], NULL, ncclSuccess, 0};
  pthread_t t;
  pthread_create(&t, NULL, splitMain, &s);
  sleepMs(300);
  t0 = nowS();
  NCK(ncclCommAbort(comms[0]));
  double abortS = nowS() - t0;
  pthread_join(t, NULL);
  if (s.res == ncclSuccess || s.res == ncclInProgress) FAIL("a split aborted while waiting returned %s", ncclGetErrorString(s.res));
  WITHIN("ncclCommAbort during a split", abortS, 0, 0.5);
  WITHIN("a split ended by abort", s.took, 0.2, 1.0);
  NCK(ncclCommAbort(comms[1]));

  /* a nonblocking split waits for a peer that never splits: aborting the
   * new communicator ends it */
  NCK(ncclCommInitAll(comms, 2, NULL));
  CUCK(cudaSetDevice(0));
  ncclComm_t child = NULL;
  r = ncclCommSplit(comms[0], 0, 0, &child, &cfg);
  if (r != ncclInProgress || child == NULL) FAIL("nonblocking split returned %s, comm %p", ncclGetErrorString(r), (void*)child);
  sleepMs(300);
  t0 = nowS();
  NCK(ncclCommAbort(child));
  WITHIN("ncclCommAbort of a nonblocking split waiting for its peer", nowS() - t0, 0, 0.5);
  NCK(ncclCommAbort(comms[0]));
  NCK(ncclCommAbort(comms[1]));
  return 0;
}

/* ---- a collective whose peer never calls ----------------------------------- */
struct pair {
  ncclComm_t comm[2];
  cudaStream_t stream;
  float* buf;
  size_t count;
};

static int pairOpen(struct pair* p, size_t count) {
  NCK(ncclCommInitAll(p->comm, 2, NULL));
  CUCK(cudaSetDevice(0));
  CUCK(cudaStreamCreate(&p->stream));
  CUCK(cudaMalloc((void**)&p->buf, count * sizeof(float)));
  CUCK(cudaMemset(p->buf, 0, count * sizeof(float)));
  p->count = count;
  return 0;
}

static void pairClose(struct pair* p) {
  cudaSetDevice(0);
  cudaStreamDestroy(p->stream);
  cudaFree(p->buf);
}

/* Rank 0 runs op on its stream, rank 1 never does; within the op timeout
 * the stream completes and the communicator reports ncclSystemError. */
static int timeoutOne(const char* what, size_t count, int recv) {
  double bound = atof(getenv("ANYCCL_OP_TIMEOUT") ? getenv("ANYCCL_OP_TIMEOUT") : "0");
  if (bound < 1 || bound > 3) FAIL("set ANYCCL_OP_TIMEOUT to 1..3 s");
  struct pair p;
  if (pairOpen(&p, count)) return 1;
  double t0 = nowS();
  if (recv) NCK(ncclRecv(p.buf, p.count, ncclFloat, 1, p.comm[0], p.stream));
  else NCK(ncclAllReduce(p.buf, p.buf, p.count, ncclFloat, ncclSum, p.comm[0], p.stream));
  CUCK(cudaStreamSynchronize(p.stream));
  double took = nowS() - t0;
  ncclResult_t async;
  NCK(ncclCommGetAsyncError(p.comm[0], &async));
  if (async != ncclSystemError) FAIL("%s without its peer: the communicator reports %s, not ncclSystemError", what, ncclGetErrorString(async));
  WITHIN(what, took, bound - 0.1, bound + 2.5);
  if (ncclAllReduce(p.buf, p.buf, 1, ncclFloat, ncclSum, p.comm[0], p.stream) == ncclSuccess) FAIL("a failed communicator accepted a collective");
  t0 = nowS();
  NCK(ncclCommDestroy(p.comm[0]));
  WITHIN("ncclCommDestroy after a timeout", nowS() - t0, 0, 0.5);
  NCK(ncclCommDestroy(p.comm[1]));
  pairClose(&p);
  return 0;
}

static int caseCollTimeout(void) {
  if (timeoutOne("an all-reduce", 1024, 0)) return 1;
  return timeoutOne("a receive", 1024, 1);
}

static int caseLargeTimeout(void) {
  return timeoutOne("a single-copy all-reduce (4 MB)", 1 << 20, 0);
}

/* Threads blocked in a stream, event and device synchronize on rank 0's
 * collective; `stop` (abort or revoke) must release them all at once. */
struct syncArg {
  int kind; /* 0 stream, 1 event, 2 device */
  cudaStream_t stream;
  cudaEvent_t event;
  double doneAt;
  int done;
  cudaError_t err;
};
static void* syncMain(void* a) {
  struct syncArg* s = a;
  cudaSetDevice(0);
  s->err = s->kind == 0 ? cudaStreamSynchronize(s->stream) : s->kind == 1 ? cudaEventSynchronize(s->event)
                                                                            : cudaDeviceSynchronize();
  s->doneAt = nowS();
  __atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static int stopCase(int revoke) {
  const char* name = revoke ? "ncclCommRevoke" : "ncclCommAbort";
  struct pair p;
  if (pairOpen(&p, 1 << 12)) return 1;
  cudaEvent_t ev;
  CUCK(cudaEventCreate(&ev));
  NCK(ncclAllReduce(p.buf, p.buf, p.count, ncclFloat, ncclSum, p.comm[0], p.stream));
  CUCK(cudaEventRecord(ev, p.stream));
  struct syncArg s[3];
  pthread_t t[3];
  for (int k = 0; k < 3; k++) {
    s[k] = (struct syncArg){k, p.stream, ev, 0, 0, cudaSuccess};
    pthread_create(&t[k], NULL, syncMain, &s[k]);
  }
  sleepMs(400);
  for (int k = 0; k < 3; k++)
    if (__atomic_load_n(&s[k].done, __ATOMIC_ACQUIRE)) FAIL("synchronize %d returned before %s: the collective did not wait", k, name);
  double t0 = nowS();
  if (revoke) NCK(ncclCommRevoke(p.comm[0], NCCL_REVOKE_DEFAULT));
  else NCK(ncclCommAbort(p.comm[0]));
  WITHIN(name, nowS() - t0, 0, 0.5);
  for (int k = 0; k < 3; k++) {
    pthread_join(t[k], NULL);
    if (s[k].err != cudaSuccess) FAIL("synchronize %d returned %s", k, cudaGetErrorString(s[k].err));
    WITHIN(k == 0 ? "cudaStreamSynchronize released" : k == 1 ? "cudaEventSynchronize released" : "cudaDeviceSynchronize released",
           s[k].doneAt - t0, 0, 0.5);
  }
  if (revoke) {
    if (ncclAllReduce(p.buf, p.buf, 1, ncclFloat, ncclSum, p.comm[0], p.stream) == ncclSuccess) FAIL("a revoked communicator accepted a collective");
    t0 = nowS();
    NCK(ncclCommDestroy(p.comm[0]));
    WITHIN("ncclCommDestroy after a revoke", nowS() - t0, 0, 0.5);
  }
  NCK(ncclCommAbort(p.comm[1]));
  cudaEventDestroy(ev);
  pairClose(&p);
  return 0;
}

static int caseCollAbort(void) { return stopCase(0); }

/* Y's collective is queued on the stream behind X's, whose peer never
 * calls: stopping Y must not wait for X's to end. mode 0: abort Y; 1: revoke
 * then destroy Y. The queued plan ends (and frees Y) once X is aborted. */
static int queuedOne(int mode) {
  struct pair x;
  if (pairOpen(&x, 1 << 12)) return 1;
  ncclComm_t y[2];
  NCK(ncclCommInitAll(y, 2, NULL));
  CUCK(cudaSetDevice(0));
  NCK(ncclAllReduce(x.buf, x.buf, x.count, ncclFloat, ncclSum, x.comm[0], x.stream));
  NCK(ncclAllReduce(x.buf, x.buf, x.count, ncclFloat, ncclSum, y[0], x.stream));
  sleepMs(300);
  double t0 = nowS();
  if (mode == 0) {
    NCK(ncclCommAbort(y[0]));
    WITHIN("ncclCommAbort of a communicator whose work is queued behind a stuck one", nowS() - t0, 0, 0.5);
  } else {
    NCK(ncclCommRevoke(y[0], NCCL_REVOKE_DEFAULT));
    WITHIN("ncclCommRevoke of a communicator whose work is queued behind a stuck one", nowS() - t0, 0, 0.5);
    t0 = nowS();
    NCK(ncclCommDestroy(y[0]));
    WITHIN("ncclCommDestroy after that revoke", nowS() - t0, 0, 0.5);
  }
  if (cudaStreamQuery(x.stream) != cudaErrorNotReady) FAIL("the stream completed while X's collective still waits");
  NCK(ncclCommAbort(x.comm[0]));
  t0 = nowS();
  CUCK(cudaStreamSynchronize(x.stream));
  WITHIN("the stream after X's abort", nowS() - t0, 0, 0.5);
  NCK(ncclCommAbort(x.comm[1]));
  NCK(ncclCommAbort(y[1]));
  pairClose(&x);
  return 0;
}

static int caseQueuedStop(void) {
  if (queuedOne(0)) return 1;
  return queuedOne(1);
}
static int caseCollRevoke(void) { return stopCase(1); }

/* ---- processes: ranks on virtual hosts ----------------------------------- */
/* Start `self child CASE RANK IDFILE` for ranks 0..n-1, with NCCL_HOSTID
 * host<rank / perHost>; the id is made here and published through IDFILE. */
static int spawn(const char* cs, int n, int perHost, pid_t* pids, char* idfile, size_t idLen) {
  snprintf(idfile, idLen, "/tmp/anyccl-waits-%d", (int)getpid());
  ncclUniqueId id;
  NCK(ncclGetUniqueId(&id));
  FILE* f = fopen(idfile, "wb");
  if (f == NULL || fwrite(&id, sizeof(id), 1, f) != 1) FAIL("cannot write %s", idfile);
  fclose(f);
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      char host[32], rs[16];
      snprintf(host, sizeof(host), "host%d", r / perHost);
      snprintf(rs, sizeof(rs), "%d", r);
      setenv("NCCL_HOSTID", host, 1);
      execl("/proc/self/exe", self, "child", cs, rs, idfile, (char*)NULL);
      _exit(127);
    }
  }
  return 0;
}

/* The judge rank's exit status decides; the others are killed once it is done. */
static int reap(int n, int judge, pid_t* pids, const char* idfile) {
  int st = 0;
  waitpid(pids[judge], &st, 0);
  for (int r = 0; r < n; r++)
    if (r != judge) kill(pids[r], SIGKILL);
  for (int r = 0; r < n; r++)
    if (r != judge) waitpid(pids[r], NULL, 0);
  unlink(idfile);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) FAIL("rank %d failed (status 0x%x): see its output above", judge, st);
  return 0;
}

static int runProcs(const char* cs, int n, int perHost, int judge) {
  pid_t pids[4];
  char idfile[64];
  if (spawn(cs, n, perHost, pids, idfile, sizeof(idfile))) return 1;
  return reap(n, judge, pids, idfile);
}

/* The silent peer: alive (its proxy runs) but it never calls. */
static void silent(ncclComm_t comm) {
  (void)comm;
  for (;;) pause();
}

/* Rank 0 sends 64 MB to a silent peer over the network: more than the
 * peer's FIFO and the sockets hold, so data is still pending in rank 0's
 * staging FIFO when the send ends. mode: 0 timeout, 1 revoke, 2 abort. */
static int netRank0(ncclComm_t comm, int mode) {
  size_t count = 16 << 20;
  float* buf;
  cudaStream_t s;
  CUCK(cudaStreamCreate(&s));
  CUCK(cudaMalloc((void**)&buf, count * sizeof(float)));
  double bound = mode == 0 ? atof(getenv("ANYCCL_OP_TIMEOUT") ? getenv("ANYCCL_OP_TIMEOUT") : "0") : 0;
  if (mode == 0 && (bound < 1 || bound > 3)) FAIL("set ANYCCL_OP_TIMEOUT to 1..3 s");
  double t0 = nowS();
  NCK(ncclSend(buf, count, ncclFloat, 1, comm, s));
  if (mode == 0) {
    CUCK(cudaStreamSynchronize(s));
    WITHIN("a send to a silent network peer", nowS() - t0, bound - 0.1, bound + 2.5);
    ncclResult_t async;
    NCK(ncclCommGetAsyncError(comm, &async));
    if (async != ncclSystemError) FAIL("the communicator reports %s, not ncclSystemError", ncclGetErrorString(async));
    t0 = nowS();
    NCK(ncclCommDestroy(comm));
    WITHIN("ncclCommDestroy after a network timeout", nowS() - t0, 0, 0.5);
  } else {
    sleepMs(500);
    if (cudaStreamQuery(s) != cudaErrorNotReady) FAIL("the send ended before the peer received it");
    t0 = nowS();
    if (mode == 1) NCK(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
    else NCK(ncclCommAbort(comm));
    WITHIN(mode == 1 ? "ncclCommRevoke of a network send" : "ncclCommAbort of a network send", nowS() - t0, 0, 0.5);
    CUCK(cudaStreamSynchronize(s));
    WITHIN("the stream after the stop", nowS() - t0, 0, 0.5);
    if (mode == 1) {
      t0 = nowS();
      NCK(ncclCommDestroy(comm));
      WITHIN("ncclCommDestroy after a revoke (pending network sends)", nowS() - t0, 0, 0.5);
    }
  }
  cudaFree(buf);
  cudaStreamDestroy(s);
  return 0;
}

/* After init, rank 0 exits; rank 1's shrink waits in the bootstrap for the
 * new id from rank 0 (the leader). */
static int goneRank1(ncclComm_t comm) {
  sleepMs(300);
  ncclComm_t out = NULL;
  double t0 = nowS();
  ncclResult_t r = ncclCommShrink(comm, NULL, 0, &out, NULL, NCCL_SHRINK_DEFAULT);
  if (r != ncclRemoteError) FAIL("a shrink whose leader exited returned %s, not ncclRemoteError", ncclGetErrorString(r));
  WITHIN("a shrink whose leader exited", nowS() - t0, 0, 1.0);
  ncclCommAbort(comm);
  return 0;
}

static int child(const char* cs, int rank, const char* idfile) {
  ncclUniqueId id;
  FILE* f = fopen(idfile, "rb");
  if (f == NULL || fread(&id, sizeof(id), 1, f) != 1) FAIL("rank %d: no unique id in %s", rank, idfile);
  fclose(f);
  CUCK(cudaSetDevice(rank)); /* distinct devices when the ranks share a host */
  ncclComm_t comm;
  NCK(ncclCommInitRank(&comm, 2, id, rank));
  if (strcmp(cs, "peer_gone") == 0) {
    if (rank == 0) _exit(0);
    return goneRank1(comm);
  }
  if (rank == 1) silent(comm);
  return netRank0(comm, strcmp(cs, "net_timeout") == 0 ? 0 : strcmp(cs, "net_revoke") == 0 ? 1 : 2);
}

/* ---- launch threads ------------------------------------------------------- */
struct ljob {
  struct anycclLaunchJob j;
  double busyS;
  int started;
  pthread_t by;
};
static void ljobRun(struct anycclLaunchJob* aj, int* curDev) {
  struct ljob* j = (struct ljob*)aj;
  (void)curDev;
  j->by = pthread_self();
  __atomic_store_n(&j->started, 1, __ATOMIC_RELEASE);
  double end = nowS() + j->busyS;
  while (nowS() < end) sleepMs(1);
}
struct lgroup {
  struct ljob jobs[2];
  pthread_t caller;
};
static void* lgroupMain(void* a) {
  struct lgroup* g = a;
  g->caller = pthread_self();
  int cur = 0;
  anycclRt.setDevice(0);
  struct anycclLaunchJob* order[2] = {&g->jobs[0].j, &g->jobs[1].j};
  anycclLaunchRun(order, 2, &cur);
  return NULL;
}

static int caseLaunchBusy(void) {
  if (!anycclLaunchThreadsOn()) FAIL("launch threads are off (ANYCCL_LAUNCH_THREADS)");
  NCK(anycclRtInit());
  /* Group A: device 1's job (2 s) on device 1's launch thread. A job the
   * thread was too slow to take runs on A's own thread: then try again. */
  struct lgroup a;
  pthread_t ta;
  int onThread = 0;
  for (int attempt = 0; attempt < 20 && !onThread; attempt++) {
    memset(&a, 0, sizeof(a));
    a.jobs[0] = (struct ljob){{0, ljobRun, 0}, 0.02, 0, 0};
    a.jobs[1] = (struct ljob){{1, ljobRun, 0}, 2.0, 0, 0};
    pthread_create(&ta, NULL, lgroupMain, &a);
    while (!__atomic_load_n(&a.jobs[1].started, __ATOMIC_ACQUIRE)) sleepMs(1);
    onThread = !pthread_equal(a.jobs[1].by, a.caller);
    if (!onThread) pthread_join(ta, NULL);
  }
  if (!onThread) FAIL("device 1's launch thread never took a job");
  /* Group B, meanwhile: its device 1 job must not wait for the busy thread. */
  struct lgroup b;
  memset(&b, 0, sizeof(b));
  b.jobs[0] = (struct ljob){{0, ljobRun, 0}, 0.001, 0, 0};
  b.jobs[1] = (struct ljob){{1, ljobRun, 0}, 0.001, 0, 0};
  double t0 = nowS();
  lgroupMain(&b);
  double took = nowS() - t0;
  if (__atomic_load_n(&a.jobs[1].started, __ATOMIC_ACQUIRE) == 0) FAIL("lost job");
  pthread_join(ta, NULL);
  WITHIN("a group while a launch thread is busy", took, 0, 0.5);
  if (!pthread_equal(b.jobs[1].by, b.caller)) FAIL("group B's job ran on the busy launch thread");
  return 0;
}

/* ---- main ----------------------------------------------------------------- */
struct tcase {
  const char* name;
  int (*fn)(void);
  int alarmS;
  int procs; /* processes on virtual hosts: ranks per host */
};

static int caseNetTimeout(void) { return runProcs("net_timeout", 2, 1, 0); }
static int caseNetRevoke(void) { return runProcs("net_revoke", 2, 1, 0); }
static int caseNetAbort(void) { return runProcs("net_abort", 2, 1, 0); }
static int casePeerGone(void) { return runProcs("peer_gone", 2, 2, 1); }

static const struct tcase cases[] = {
    {"default", caseDefault, 5, 0},          {"init_missing", caseInitMissing, 15, 0},
    {"init_abort", caseInitAbort, 10, 0},    {"coll_timeout", caseCollTimeout, 15, 0},
    {"coll_abort", caseCollAbort, 10, 0},    {"coll_revoke", caseCollRevoke, 10, 0},
    {"large_timeout", caseLargeTimeout, 10, 0}, {"queued_stop", caseQueuedStop, 10, 0}, {"net_timeout", caseNetTimeout, 15, 0},
    {"net_revoke", caseNetRevoke, 15, 0},    {"net_abort", caseNetAbort, 15, 0},
    {"peer_gone", casePeerGone, 15, 0},      {"launch_busy", caseLaunchBusy, 15, 0},
};

int main(int argc, char** argv) {
  self = argv[0];
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc == 5 && strcmp(argv[1], "child") == 0) {
    alarm(20);
    int rc = child(argv[2], atoi(argv[3]), argv[4]);
    if (rc) fprintf(stderr, "FAIL: %s rank %s: %s\n", argv[2], argv[3], failMsg);
    return rc;
  }
  for (size_t i = 0; argc == 2 && i < sizeof(cases) / sizeof(cases[0]); i++) {
    if (strcmp(argv[1], cases[i].name) != 0) continue;
    alarm(cases[i].alarmS); /* a hang is a failure (SIGALRM) */
    double t0 = nowS();
    int rc = cases[i].fn();
    if (rc) {
      fprintf(stderr, "FAIL: %s: %s\n", cases[i].name, failMsg);
      return 1;
    }
    printf("PASS: %s (%.1f s)\n", cases[i].name, nowS() - t0);
    return 0;
  }
  fprintf(stderr, "usage: %s CASE (default, init_missing, init_abort, coll_timeout, coll_abort, coll_revoke, "
          "queued_stop, large_timeout, net_timeout, net_revoke, net_abort, peer_gone, launch_busy)\n", argv[0]);
  return 2;
}
