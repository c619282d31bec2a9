/* Ranks that call a collective (or send/recv) with different arguments:
 * every rank must end with ncclInvalidUsage (the call, stream sync or
 * ncclCommGetAsyncError), nothing may be written outside any buffer, and
 * ncclCommAbort must return promptly. Two ranks, as
 *
 *   coll_mismatch threads|procs|hosts CASE...   (CASE: a name below, or "all")
 *
 * MISMATCH_NRANKS=N (default 2): rank 0 calls the first variant, every other
 * rank the second; in hosts mode rank r is on virtual host r % 2, so that
 * three ranks mix a local and a remote peer. Send/recv: rank 0 to rank 1.
 *
 * threads: one process, a thread per rank; procs: a process per rank (shared
 * memory, single-copy through IPC); hosts: a process per rank on two virtual
 * hosts (NCCL_HOSTID: the network transport). Each case runs in a fresh
 * process (its path depends on parameters read once), under alarm(). The
 * "ok_" cases call matching operations and check the result.
 *
 * coll_mismatch_gpu (COLL_MISMATCH_GPU) is this file on real GPUs (the cuda
 * backend). On one host all-reduce, all-gather, reduce-scatter, broadcast
 * and reduce up to 1 MB take the LL kernels of symm.cu, all-reduce up to
 * 4 MB (ar_staged) the staged two-barrier kernels; run it again with
 * ANYCCL_CUDA_SYMM=0 for the FIFO paths: messages up to 128 KB there run
 * the LL protocol (ar_direct, ar_type, ar_op, ar_ring, bc_*, sendrecv),
 * larger ones the simple protocol (ar_single, ar_op_single,
 * sendrecv_simple), and some cases mix the two (ar_direct_single,
 * ar_ring_single, sendrecv_prefix). */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { AR, BC, RD, AG, RS, A2A, GA, SC, SR };
typedef struct {
  const char* name;
  int func;
  size_t count[2];
  ncclDataType_t type[2];
  ncclRedOp_t op[2];
  int root[2];
  const char* env; /* "NAME=value" or NULL */
} case_t;

/* Paths at the defaults (slots of 128 KB, direct up to 32 KB, single-copy
 * from 256 KB on one host; across hosts there is no single-copy). */
static const case_t cases[] = {
    {"ar_single", AR, {100000, 120000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ar_direct_single", AR, {1000, 200000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ar_ring_single", AR, {20000, 200000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ar_ring", AR, {20000, 24000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ar_direct", AR, {1000, 1200}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ar_direct_ring", AR, {1000, 20000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ar_type", AR, {1000, 1000}, {ncclFloat, ncclInt32}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ar_op", AR, {1000, 1000}, {ncclFloat, ncclFloat}, {ncclSum, ncclMax}, {0, 0}, NULL},
    {"ar_op_single", AR, {100000, 100000}, {ncclFloat, ncclFloat}, {ncclSum, ncclMax}, {0, 0}, NULL},
    {"bc_chain", BC, {20000, 24000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"bc_direct", BC, {1000, 1200}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {1, 1}, NULL},
    {"bc_single", BC, {100000, 120000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"rd_chain", RD, {20000, 24000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {1, 1}, NULL},
    {"rd_root", RD, {20000, 20000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 1}, NULL},
    {"rd_root_large", RD, {400000, 400000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 1}, NULL},
    {"ar_staged", AR, {400000, 480000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ag_ring", AG, {10000, 12000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"rs_ring", RS, {10000, 12000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"a2a", A2A, {1000, 1200}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"a2a_single", A2A, {40000, 48000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"gather", GA, {1000, 1200}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"scatter", SC, {1000, 1200}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {1, 1}, NULL},
    {"sendrecv", SR, {1000, 2000}, {ncclUint8, ncclUint8}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"sendrecv_prefix", SR, {3 << 17, 1 << 17}, {ncclUint8, ncclUint8}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"sendrecv_simple", SR, {1 << 19, 1 << 18}, {ncclUint8, ncclUint8}, {ncclSum, ncclSum}, {0, 0}, NULL},
    /* controls: the same calls on both ranks must succeed */
    {"ok_single", AR, {100000, 100000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ok_direct", AR, {1000, 1000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ok_ring", AR, {20000, 20000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ok_bc", BC, {20000, 20000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {1, 1}, NULL},
    {"ok_sendrecv", SR, {3 << 17, 3 << 17}, {ncclUint8, ncclUint8}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ok_sendrecv_ll", SR, {1000, 1000}, {ncclUint8, ncclUint8}, {ncclSum, ncclSum}, {0, 0}, NULL},
    /* grp_*: a group of a matching in-place all-reduce of 1000 floats and
     * then the case's call: each collective of a group has its own number,
     * so the second's mismatch is found though the first matches */
    {"grp_ar_ring", AR, {20000, 24000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"grp_scatter", SC, {40000, 48000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {1, 1}, NULL},
    {"ok_grp_ring", AR, {20000, 20000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
    {"ok_grp_scatter", SC, {40000, 40000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {1, 1}, NULL},
    /* ranks > 0 arrive 0.7 s late (rank 0 stalls: across hosts it sends its
     * signature, which the others must skip), then a direct all-reduce over
     * the connections that carried it */
    {"ok_late", AR, {20000, 20000}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, NULL},
};
#define NCASES (int)(sizeof(cases) / sizeof(cases[0]))
#define GUARD_BYTES (1u << 20) /* more than the largest difference of two ranks' buffers in any case */
#define CASE_SECONDS 20
#define MAX_RANKS 8
static int nRanks(void) {
  const char* e = getenv("MISMATCH_NRANKS");
  int n = e ? atoi(e) : 2;
  return n < 2 ? 2 : n > MAX_RANKS ? MAX_RANKS : n;
}

static void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL [pid %d] ", (int)getpid());
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  _exit(1);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t tsize(ncclDataType_t t) { return t == ncclUint8 ? 1 : t == ncclFloat64 ? 8 : 4; }

/* A buffer with guard regions: guard | data | guard, all in one cudaMalloc
 * allocation (device memory on GPUs: filled and read with cudaMemcpy). */
typedef struct {
  unsigned char* base;
  unsigned char* data;
  size_t bytes; /* data bytes */
  size_t total; /* allocation bytes */
} buf_t;

/* COLL_MISMATCH_HOSTMEM=1 (cpu backend, threads): exact-size malloc buffers
 * without guards instead, so that AddressSanitizer sees any write past them. */
static int hostMem(void) { return getenv("COLL_MISMATCH_HOSTMEM") != NULL; }

static void bufAlloc(buf_t* b, size_t bytes, const unsigned char* init) {
  b->bytes = bytes;
  size_t guard = hostMem() ? 0 : GUARD_BYTES;
  b->total = bytes + 2 * guard;
  unsigned char* h = malloc(b->total ? b->total : 1);
  if (h == NULL) fail("malloc");
  memset(h, 0xA5, b->total);
  if (init) memcpy(h + guard, init, bytes);
  if (hostMem()) b->base = malloc(b->total ? b->total : 1);
  else if (cudaMalloc((void**)&b->base, b->total) != cudaSuccess) b->base = NULL;
  if (b->base == NULL) fail("allocating %zu bytes", b->total);
  b->data = b->base + guard;
  if (cudaMemcpy(b->base, h, b->total, cudaMemcpyDefault) != cudaSuccess) fail("cudaMemcpy");
  free(h);
}
static void bufFree(buf_t* b) {
  if (hostMem()) free(b->base);
  else cudaFree(b->base);
}
/* The data, copied back; the guards must be untouched. */
static unsigned char* bufCheck(buf_t* b, int rank, const char* what) {
  unsigned char* h = malloc(b->total ? b->total : 1);
  if (h == NULL || cudaMemcpy(h, b->base, b->total, cudaMemcpyDefault) != cudaSuccess) fail("cudaMemcpy back");
  size_t guard = (size_t)(b->data - b->base);
  for (size_t i = 0; i < guard; i++)
    if (h[i] != 0xA5) fail("rank %d: %s: byte %zu before the buffer was overwritten", rank, what, guard - i);
  for (size_t i = guard + b->bytes; i < b->total; i++)
    if (h[i] != 0xA5)
      fail("rank %d: %s: byte %zu past the end of the buffer was overwritten", rank, what, i - guard - b->bytes);
  memmove(h, h + guard, b->bytes);
  return h;
}

/* A matching direct all-reduce of 1000 floats after a late arrival. */
static void followUp(ncclComm_t comm, cudaStream_t stream, int rank, int n) {
  float h[1000];
  float* b;
  for (int i = 0; i < 1000; i++) h[i] = (float)(rank + 1 + i % 7);
  if (cudaMalloc((void**)&b, sizeof(h)) != cudaSuccess) fail("cudaMalloc");
  cudaMemcpy(b, h, sizeof(h), cudaMemcpyDefault);
  ncclResult_t r = ncclAllReduce(b, b, 1000, ncclFloat, ncclSum, comm, stream);
  if (r != ncclSuccess || cudaStreamSynchronize(stream) != cudaSuccess) fail("rank %d: follow-up all-reduce", rank);
  ncclResult_t async;
  if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess)
    fail("rank %d: follow-up all-reduce ended with %s", rank, ncclGetErrorString(async));
  cudaMemcpy(h, b, sizeof(h), cudaMemcpyDefault);
  for (int i = 0; i < 1000; i++)
    if (h[i] != (float)(n * (n + 1) / 2 + n * (i % 7))) fail("rank %d: follow-up element %d is %g", rank, i, h[i]);
  cudaFree(b);
}

/* One rank of a case: returns after every check passed (fail() otherwise). */
static void rankRun(const case_t* c, int rank, const ncclUniqueId* id) {
  const int n = nRanks();
  int ndev = 0;
  cudaGetDeviceCount(&ndev);
  if (cudaSetDevice(ndev > 1 ? rank : 0) != cudaSuccess) fail("cudaSetDevice(%d)", rank);
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRank(&comm, n, *id, rank);
  if (r != ncclSuccess) fail("rank %d: ncclCommInitRank: %s", rank, ncclGetErrorString(r));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  const int v = rank == 0 ? 0 : 1; /* which variant this rank calls */
  size_t count = c->count[v], es = tsize(c->type[v]);
  int mul = c->func == AG || c->func == A2A || (c->func == GA && c->root[v] == rank) ? n : 1;
  int smul = c->func == RS || c->func == A2A || (c->func == SC && c->root[v] == rank) ? n : 1;
  /* inputs: element i of rank q is q + 1 + (i % 7) (exact in every type used) */
  unsigned char* in = malloc(count * es * smul + 1);
  for (size_t i = 0; i < count * smul; i++) {
    if (c->type[v] == ncclFloat) ((float*)in)[i] = (float)(rank + 1 + i % 7);
    else if (c->type[v] == ncclInt32) ((int32_t*)in)[i] = (int32_t)(rank + 1 + i % 7);
    else in[i] = (unsigned char)(rank + 1 + i % 7);
  }
  buf_t sb, rb;
  bufAlloc(&sb, count * es * smul, in);
  bufAlloc(&rb, count * es * mul, NULL);
  unsigned char* s = sb.data;
  unsigned char* d = rb.data;
  int late = strcmp(c->name, "ok_late") == 0;
  if (late && rank > 0) usleep(700000);
  const int grp = strstr(c->name, "grp_") != NULL;
  buf_t pb;
  if (grp) {
    float pre[1000];
    for (int i = 0; i < 1000; i++) pre[i] = (float)(rank + 1 + i % 7);
    bufAlloc(&pb, sizeof(pre), (const unsigned char*)pre);
    if (ncclGroupStart() != ncclSuccess) fail("rank %d: ncclGroupStart", rank);
    r = ncclAllReduce(pb.data, pb.data, 1000, ncclFloat, ncclSum, comm, stream);
    if (r != ncclSuccess) fail("rank %d: %s: the group's all-reduce returned %s", rank, c->name, ncclGetErrorString(r));
  }
  switch (c->func) {
    case AR: r = ncclAllReduce(s, d, count, c->type[v], c->op[v], comm, stream); break;
    case BC: r = ncclBroadcast(s, d, count, c->type[v], c->root[v], comm, stream); break;
    case RD: r = ncclReduce(s, d, count, c->type[v], c->op[v], c->root[v], comm, stream); break;
    case AG: r = ncclAllGather(s, d, count, c->type[v], comm, stream); break;
    case RS: r = ncclReduceScatter(s, d, count, c->type[v], c->op[v], comm, stream); break;
    case A2A: r = ncclAlltoAll(s, d, count, c->type[v], comm, stream); break;
    case GA: r = ncclGather(s, d, count, c->type[v], c->root[v], comm, stream); break;
    case SC: r = ncclScatter(s, d, count, c->type[v], c->root[v], comm, stream); break;
    case SR:
      r = rank == 0 ? ncclSend(s, count, c->type[v], 1, comm, stream)
          : rank == 1 ? ncclRecv(d, count, c->type[v], 0, comm, stream) : ncclSuccess;
      break;
  }
  if (grp) {
    ncclResult_t g = ncclGroupEnd();
    if (r == ncclSuccess) r = g;
  }
  int control = strncmp(c->name, "ok_", 3) == 0;
  if (r != ncclSuccess && (control || r != ncclInvalidUsage))
    fail("rank %d: %s: the call returned %s", rank, c->name, ncclGetErrorString(r));
  if (r == ncclSuccess) {
    /* NCCL's pattern: poll the stream and the communicator's async error; a
     * rank whose part completed learns the mismatch from its peer. */
    int idle = 0;
    ncclResult_t async = ncclSuccess;
    double deadline = now() + 10;
    for (;;) {
      if (!idle) idle = cudaStreamQuery(stream) == cudaSuccess;
      if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) fail("rank %d: ncclCommGetAsyncError failed", rank);
      if (async != ncclSuccess || (idle && control) || now() > deadline) break;
      usleep(1000);
    }
    if (!idle && async == ncclSuccess) fail("rank %d: %s: the operation did not end in 10 s", rank, c->name);
    r = async;
  }
  if (late && r == ncclSuccess) followUp(comm, stream, rank, n);
  double t0 = now();
  ncclResult_t fin = control && r == ncclSuccess ? ncclCommDestroy(comm) : ncclCommAbort(comm);
  if (fin != ncclSuccess) fail("rank %d: ncclCommAbort/Destroy: %s", rank, ncclGetErrorString(fin));
  if (now() - t0 > 3) fail("rank %d: ncclCommAbort took %.1f s", rank, now() - t0);
  if (cudaStreamSynchronize(stream) != cudaSuccess) fail("rank %d: cudaStreamSynchronize after abort", rank);
  /* guards first: a write outside a buffer is the worst outcome */
  free(bufCheck(&sb, rank, "send buffer"));
  unsigned char* out = bufCheck(&rb, rank, "receive buffer");
  if (control && r != ncclSuccess) fail("rank %d: %s: matching calls ended with %s", rank, c->name, ncclGetErrorString(r));
#ifdef COLL_MISMATCH_GPU
  /* a reduce where both ranks name themselves the root, across hosts on
   * GPUs: both wait for data that never comes and no op word crosses hosts
   * without it, so ANYCCL_OP_TIMEOUT ends it (bounded, but not named) */
  if (!control && r == ncclSystemError && strncmp(c->name, "rd_root", 7) == 0 && getenv("NCCL_HOSTID")) {
    printf("rank %d: %s across hosts: ended by ANYCCL_OP_TIMEOUT (%s)\n", rank, c->name, ncclGetErrorString(r));
    r = ncclInvalidUsage;
  }
#endif
  if (!control && r != ncclInvalidUsage)
    fail("rank %d: %s: expected ncclInvalidUsage, got %s", rank, c->name, ncclGetErrorString(r));
  if (control) { /* the result, where this rank gets one */
    for (size_t i = 0; i < count * mul; i++) {
      double want, got = c->type[0] == ncclFloat ? ((float*)out)[i] : out[i];
      if (c->func == AR) want = n * (n + 1) / 2 + n * (double)(i % 7);
      else if (c->func == BC) want = c->root[0] + 1 + (double)(i % 7);
      else if (c->func == SR) want = rank == 1 ? (unsigned char)(1 + i % 7) : 0xA5;
      else want = got;
      if (got != want) fail("rank %d: %s: element %zu is %g, expected %g", rank, c->name, i, got, want);
    }
  }
  if (grp) { /* the group's all-reduce: guards always, the sum where the group matched */
    float* pre = (float*)bufCheck(&pb, rank, "the group's all-reduce buffer");
    for (int i = 0; control && i < 1000; i++)
      if (pre[i] != (float)(n * (n + 1) / 2 + n * (i % 7)))
        fail("rank %d: %s: the group's all-reduce element %d is %g", rank, c->name, i, pre[i]);
    free(pre);
    bufFree(&pb);
  }
  free(out);
  free(in);
  bufFree(&sb);
  bufFree(&rb);
  cudaStreamDestroy(stream);
}

typedef struct {
  const case_t* c;
  int rank;
  ncclUniqueId id;
} targ_t;
static void* rankThread(void* p) {
  targ_t* a = p;
  rankRun(a->c, a->rank, &a->id);
  return NULL;
}

/* One case in this process (a child of the driver). */
static int runCase(const char* mode, const case_t* c) {
  alarm(CASE_SECONDS);
  int n = nRanks();
  ncclUniqueId id;
  if (strcmp(mode, "threads") == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) fail("ncclGetUniqueId");
    pthread_t th[MAX_RANKS];
    targ_t a[MAX_RANKS];
    for (int r = 0; r < n; r++) {
      a[r] = (targ_t){c, r, id};
      pthread_create(&th[r], NULL, rankThread, &a[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    return 0;
  }
  int fds[2];
  if (pipe(fds) != 0) fail("pipe");
  pid_t pids[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] < 0) fail("fork");
    if (pids[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (strcmp(mode, "hosts") == 0) setenv("NCCL_HOSTID", r % 2 == 0 ? "vhost0" : "vhost1", 1);
      if (r == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess) fail("ncclGetUniqueId");
        for (int q = 1; q < n; q++) /* one copy per reader (atomic: < PIPE_BUF) */
          if (write(fds[1], &id, sizeof(id)) != (ssize_t)sizeof(id)) fail("write id");
      } else if (read(fds[0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
        fail("read id");
      }
      rankRun(c, r, &id);
      _exit(0);
    }
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf("FAIL %s %s: rank %d %s %d\n", mode, c->name, r, WIFEXITED(st) ? "exited with" : "was killed by signal",
             WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      bad = 1;
    }
  }
  return bad;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 4 && strcmp(argv[1], "case") == 0) { /* child: case MODE NAME */
    for (int i = 0; i < NCASES; i++)
      if (strcmp(cases[i].name, argv[3]) == 0) return runCase(argv[2], &cases[i]);
    fail("no case %s", argv[3]);
  }
  if (argc < 3) {
    fprintf(stderr, "usage: coll_mismatch threads|procs|hosts CASE...|all\n");
    return 2;
  }
  int failed = 0, ran = 0;
  double t0 = now();
  for (int i = 0; i < NCASES; i++) {
    int want = 0;
    for (int a = 2; a < argc; a++) want |= strcmp(argv[a], "all") == 0 || strcmp(argv[a], cases[i].name) == 0;
    if (!want) continue;
    double t = now();
    pid_t pid = fork();
    if (pid == 0) {
      if (cases[i].env) putenv((char*)cases[i].env);
      execl("/proc/self/exe", argv[0], "case", argv[1], cases[i].name, (char*)NULL);
      _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("%s %s %s (%.2f s)%s\n", ok ? "PASS" : "FAIL", argv[1], cases[i].name, now() - t,
           WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? ": hung (alarm)" : "");
    failed += !ok;
    ran++;
  }
  printf("coll_mismatch %s: %d cases, %d failed, %.1f s\n", argv[1], ran, failed, now() - t0);
  return failed || ran == 0 ? 1 : 0;
}
