/* Communicators of one cluster share the fabric (docs/simulation.md,
 * "Communicators of one cluster"; ctest sets ANYCCL_BACKEND=sim): splits of
 * one parent whose traffic crosses the same NIC share it when launched
 * before either's time was needed, and get all of it when serialized by a
 * wait or a stream; splits on disjoint links do not slow each other. Times
 * against the model's formula computed by hand. One case per run:
 *   p2p allreduce streams disjoint outputs threads tpdp clusters */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cuda_runtime.h"
#include "nccl.h"

#include "sim_check.h"

/* 2 hosts of 2 GPUs; nics NICs per host of 100 Gb/s (12.5 GB/s): GPU g of a
 * host goes out by NIC g * nics / 2. */
#define NIC_BPS 12.5e9
#define LAUNCH_US 5.0
#define STEP_US 2.0 /* simple protocol: across hosts */
#define ROUTE_US 2.0 /* NIC out + NIC in, one hop each; both hosts on one leaf */
#define BYTES (8 << 20)

static char fabricPath[256];

static void writeFabric(int nics) {
  snprintf(fabricPath, sizeof(fabricPath), "/tmp/anyccl_simshare_%d_%d.fabric", (int)getpid(), nics);
  FILE* f = fopen(fabricPath, "w");
  if (f == NULL) {
    perror(fabricPath);
    exit(2);
  }
  fprintf(f, "hosts 2\ngpus_per_host 2\nnics_per_host %d\nnic_gbps 100\n", nics);
  fclose(f);
  setenv("ANYCCL_SIM_FABRIC", fabricPath, 1);
}

static int near(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b); }

struct pair {
  ncclComm_t parent[4], a[4], c[4]; /* a, c: two splits by parity (GPUs 0, 2 and GPUs 1, 3), c made after a */
  cudaStream_t s[4], s2[4];         /* per GPU: two streams */
  void* buf[4];
};

static void setup(struct pair* p, int nics) {
  writeFabric(nics);
  CHECK(ncclCommInitAll(p->parent, 4, NULL) == ncclSuccess, "ncclCommInitAll(4)");
  for (int k = 0; k < 2; k++) {
    ncclComm_t* out = k ? p->c : p->a;
    ncclGroupStart();
    for (int r = 0; r < 4; r++) ncclCommSplit(p->parent[r], r % 2, r, &out[r], NULL);
    CHECK(ncclGroupEnd() == ncclSuccess, "split");
  }
  for (int r = 0; r < 4; r++) {
    cudaSetDevice(r);
    cudaStreamCreate(&p->s[r]);
    cudaStreamCreate(&p->s2[r]);
    cudaMalloc(&p->buf[r], BYTES);
  }
}

static void teardown(struct pair* p) {
  for (int r = 0; r < 4; r++) {
    cudaSetDevice(r);
    cudaStreamSynchronize(p->s[r]);
    cudaStreamSynchronize(p->s2[r]);
    cudaFree(p->buf[r]);
    cudaStreamDestroy(p->s[r]);
    cudaStreamDestroy(p->s2[r]);
  }
  for (int r = 0; r < 4; r++) ncclCommDestroy(p->c[r]), ncclCommDestroy(p->a[r]);
  for (int r = 0; r < 4; r++) ncclCommDestroy(p->parent[r]);
  unlink(fabricPath);
}

/* One operation on the split `comms` of parity `odd` (GPUs odd and 2 + odd), on streams st. */
typedef void (*opFn)(struct pair* p, ncclComm_t* comms, int odd, cudaStream_t* st);

/* Its rank 0 (host 0) sends `bytes` to its rank 1 (host 1). */
static void sendBytes(struct pair* p, ncclComm_t* comms, int odd, cudaStream_t* st, size_t bytes) {
  int r0 = odd, r1 = 2 + odd;
  ncclGroupStart();
  cudaSetDevice(r0);
  ncclSend(p->buf[r0], bytes, ncclChar, 1, comms[r0], st[r0]);
  cudaSetDevice(r1);
  ncclRecv(p->buf[r1], bytes, ncclChar, 0, comms[r1], st[r1]);
  ncclGroupEnd();
}

static void sendOp(struct pair* p, ncclComm_t* comms, int odd, cudaStream_t* st) {
  sendBytes(p, comms, odd, st, BYTES);
}

static void allReduceOp(struct pair* p, ncclComm_t* comms, int odd, cudaStream_t* st) {
  ncclGroupStart();
  for (int r = odd; r < 4; r += 2) {
    cudaSetDevice(r);
    ncclAllReduce(p->buf[r], p->buf[r], BYTES / 4, ncclFloat, ncclSum, comms[r], st[r]);
  }
  ncclGroupEnd();
}

static cudaEvent_t recordOn(int r, cudaStream_t s) {
  cudaSetDevice(r);
  cudaEvent_t e;
  cudaEventCreate(&e);
  cudaEventRecord(e, s);
  return e;
}

static double usBetween(cudaEvent_t a, cudaEvent_t b) {
  float ms = -1;
  cudaEventSynchronize(b);
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1e3;
}

/* Two operations: op on (c1, odd1, streams st1), then on (c2, odd2, st2),
 * from a common start; sync 1: wait for the first before the second
 * launches; 2: record an event after the first before the second launches
 * (the second on the same streams: its end is the first's end plus its own);
 * 3: both in one ncclGroupStart/End; 4: the same (on one stream: end[0]
 * is then the second's end too).
 * end[i]: each one's end on its rank-1 GPU, us after the start. */
static void runTwo(struct pair* p, opFn op, ncclComm_t* c1, int odd1, cudaStream_t* st1, ncclComm_t* c2, int odd2,
                   cudaStream_t* st2, int sync, double* end) {
  for (int r = 0; r < 4; r++) { /* every stream caught up with the thread, the thread with them */
    cudaSetDevice(r);
    cudaStreamSynchronize(p->s[r]);
    cudaStreamSynchronize(p->s2[r]);
  }
  cudaEvent_t e0 = recordOn(0, p->s[0]);
  if (sync >= 3) ncclGroupStart();
  op(p, c1, odd1, st1);
  if (sync == 1) {
    cudaSetDevice(2 + odd1);
    cudaStreamSynchronize(st1[2 + odd1]);
    cudaSetDevice(odd1);
    cudaStreamSynchronize(st1[odd1]);
  }
  /* the first one's end: an event after it on its stream (on the second's
   * stream too, it would come after both) */
  cudaEvent_t e1 = sync == 2 ? recordOn(2 + odd1, st1[2 + odd1]) : NULL;
  op(p, c2, odd2, st2);
  if (sync >= 3) ncclGroupEnd();
  if (e1 == NULL) e1 = recordOn(2 + odd1, st1[2 + odd1]);
  cudaEvent_t e2 = recordOn(2 + odd2, st2[2 + odd2]);
  end[0] = usBetween(e0, e1);
  end[1] = usBetween(e0, e2);
  cudaEventDestroy(e0), cudaEventDestroy(e1), cudaEventDestroy(e2);
}

/* One operation alone: its duration. */
static double runOne(struct pair* p, opFn op, ncclComm_t* c, int odd) {
  for (int r = 0; r < 4; r++) {
    cudaSetDevice(r);
    cudaStreamSynchronize(p->s[r]);
  }
  cudaEvent_t e0 = recordOn(odd, p->s[odd]);
  op(p, c, odd, p->s);
  cudaEvent_t e1 = recordOn(2 + odd, p->s[2 + odd]);
  double us = usBetween(e0, e1);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return us;
}

static const double xferUs = BYTES / NIC_BPS * 1e6; /* BYTES over the whole NIC */

/* A send across hosts on each split, both through host 0's one NIC: the
 * model's time is launch + step latency + route latency + bytes / rate. */
static void caseP2p(void) {
  struct pair p;
  setup(&p, 1);
  double alone = runOne(&p, sendOp, p.a, 0);
  double want = LAUNCH_US + STEP_US + ROUTE_US + xferUs, half = LAUNCH_US + STEP_US + ROUTE_US + 2 * xferUs;
  printf("a send of %d B across hosts alone: %.3f us (by hand %.3f)\n", BYTES, alone, want);
  CHECK(near(alone, want, 1e-5), "alone %.3f us, want %.3f", alone, want);
  double end[2];
  runTwo(&p, sendOp, p.a, 0, p.s, p.a, 1, p.s, 0, end);
  printf("both splits at once: %.3f and %.3f us (by hand %.3f: half the NIC each)\n", end[0], end[1], half);
  CHECK(near(end[0], half, 1e-5) && near(end[1], half, 1e-5), "together: %.3f and %.3f us, want %.3f", end[0], end[1],
        half);
  runTwo(&p, sendOp, p.a, 0, p.s, p.a, 1, p.s, 1, end);
  printf("one after the other (a wait between): ends %.3f and %.3f us (by hand %.3f, %.3f)\n", end[0], end[1], want,
         2 * want);
  CHECK(near(end[0], want, 1e-5) && near(end[1], 2 * want, 1e-5), "serialized: ends %.3f and %.3f us, want %.3f, %.3f",
        end[0], end[1], want, 2 * want);
  runTwo(&p, sendOp, p.a, 0, p.s, p.a, 1, p.s, 3, end);
  CHECK(near(end[0], half, 1e-5) && near(end[1], half, 1e-5), "in one group: %.3f and %.3f us, want %.3f", end[0],
        end[1], half);
  /* the second launched first: the same */
  runTwo(&p, sendOp, p.a, 1, p.s, p.a, 0, p.s, 0, end);
  CHECK(near(end[0], half, 1e-5) && near(end[1], half, 1e-5), "together, b first: %.3f and %.3f us, want %.3f", end[0],
        end[1], half);
  teardown(&p);
}

/* Ring all-reduces of the two splits, both rings through host 0's one NIC
 * each way: together, every round moves twice the bytes over it. */
static void caseAllReduce(void) {
  struct pair p;
  setup(&p, 1);
  double alone = runOne(&p, allReduceOp, p.a, 0);
  /* rounds: each a step and a route latency; the NIC carries BYTES each way in all */
  double rounds = (alone - LAUNCH_US - xferUs) / (STEP_US + ROUTE_US);
  printf("all-reduce of %d B on 2 ranks across hosts alone: %.3f us = launch + %.3f x (step + route) + %.3f\n", BYTES,
         alone, rounds, xferUs);
  CHECK(rounds >= 2 && fabs(rounds - floor(rounds + 0.5)) < 1e-3, "alone: %.3f us is not launch + whole rounds + "
        "bytes over the NIC (%.4f rounds)", alone, rounds);
  double end[2];
  runTwo(&p, allReduceOp, p.a, 0, p.s, p.a, 1, p.s, 0, end);
  printf("both splits at once: %.3f and %.3f us (by hand %.3f: the bytes over half the NIC)\n", end[0], end[1],
         alone + xferUs);
  CHECK(near(end[0], alone + xferUs, 1e-5) && near(end[1], alone + xferUs, 1e-5), "together: %.3f, %.3f us, want %.3f",
        end[0], end[1], alone + xferUs);
  runTwo(&p, allReduceOp, p.a, 0, p.s, p.a, 1, p.s, 1, end);
  CHECK(near(end[0], alone, 1e-5) && near(end[1], 2 * alone, 1e-5), "serialized: ends %.3f, %.3f us, want %.3f, %.3f",
        end[0], end[1], alone, 2 * alone);
  teardown(&p);
}

/* Two splits on the same GPUs (a and c, GPUs 0 and 2): on the same streams
 * they run one after the other (as kernels on one stream do), on
 * different streams at once. */
static void caseStreams(void) {
  struct pair p;
  setup(&p, 1);
  double want = LAUNCH_US + STEP_US + ROUTE_US + xferUs, half = LAUNCH_US + STEP_US + ROUTE_US + 2 * xferUs;
  double end[2];
  runTwo(&p, sendOp, p.a, 0, p.s, p.c, 0, p.s, 2, end);
  printf("two splits on one stream: ends %.3f and %.3f us (by hand %.3f, %.3f)\n", end[0], end[1], want, 2 * want);
  CHECK(near(end[0], want, 1e-5) && near(end[1], 2 * want, 1e-5), "one stream: ends %.3f, %.3f us, want %.3f, %.3f",
        end[0], end[1], want, 2 * want);
  runTwo(&p, sendOp, p.a, 0, p.s, p.c, 0, p.s, 4, end);
  printf("two splits on one stream in one group: the second ends at %.3f us (by hand %.3f)\n", end[1], 2 * want);
  CHECK(near(end[1], 2 * want, 1e-5), "one stream, one group: the second ends at %.3f us, want %.3f", end[1], 2 * want);
  runTwo(&p, sendOp, p.a, 0, p.s, p.c, 0, p.s2, 0, end);
  printf("two splits on two streams: ends %.3f and %.3f us (by hand %.3f)\n", end[0], end[1], half);
  CHECK(near(end[0], half, 1e-5) && near(end[1], half, 1e-5), "two streams: %.3f, %.3f us, want %.3f", end[0], end[1],
        half);
  teardown(&p);
}

/* Two NICs per host: GPU 0 goes out by NIC 0, GPU 1 by NIC 1 (rails): the
 * splits share no link and each takes its time alone. */
static void caseDisjoint(void) {
  struct pair p;
  setup(&p, 2);
  double want = LAUNCH_US + STEP_US + ROUTE_US + xferUs;
  double alone = runOne(&p, sendOp, p.a, 0), end[2];
  runTwo(&p, sendOp, p.a, 0, p.s, p.a, 1, p.s, 0, end);
  printf("disjoint rails: alone %.3f us, together %.3f and %.3f us (by hand %.3f)\n", alone, end[0], end[1], want);
  CHECK(near(alone, want, 1e-5) && near(end[0], want, 1e-5) && near(end[1], want, 1e-5),
        "disjoint: alone %.3f, together %.3f, %.3f us, want %.3f", alone, end[0], end[1], want);
  double ar = runOne(&p, allReduceOp, p.a, 0);
  runTwo(&p, allReduceOp, p.a, 0, p.s, p.a, 1, p.s, 0, end);
  CHECK(near(end[0], ar, 1e-5) && near(end[1], ar, 1e-5), "disjoint all-reduce: alone %.3f, together %.3f, %.3f us",
        ar, end[0], end[1]);
  teardown(&p);
}

/* The flows in a flow file on link `link`: their count, and the start and
 * end of the first of them. */
static int flowsOn(const char* path, int link, double* firstStart, double* firstEnd) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return -1;
  char line[512];
  int n = 0;
  *firstStart = INFINITY, *firstEnd = 0;
  while (fgets(line, sizeof(line), f)) {
    char* field[12];
    int k = 0;
    for (char *q = line, *c; k < 12 && (c = strsep(&q, ",")) != NULL;) field[k++] = c;
    if (k < 12 || !strcmp(field[0], "flow")) continue;
    char route[160];
    snprintf(route, sizeof(route), " %s ", field[9]);
    char want[16];
    snprintf(want, sizeof(want), " %d ", link);
    if (strstr(route, want) == NULL) continue;
    double t0 = atof(field[10]), t1 = atof(field[11]);
    if (t0 < *firstStart) *firstStart = t0, *firstEnd = t1;
    n++;
  }
  fclose(f);
  return n;
}

/* Two clusters (two parents from two unique ids, each with its splits, on
 * the same 4 GPUs): a wait for one cluster's collective models that
 * cluster's queue only. Cluster Y queues a send on its even split; cluster
 * X's small send (tX us) is waited for; then Y's odd split sends. Y's two
 * sends were never waited for: they meet. The even one moves alone at the
 * whole NIC for tX, then both at half: it ends at launch + step + route +
 * 2 B/bw - tX, the odd one tX later. */
static void caseClusters(void) {
  struct pair x, y;
  setup(&x, 1);
  setup(&y, 1); /* the same fabric file, written again */
  for (int r = 0; r < 4; r++) {
    cudaSetDevice(r);
    cudaStreamSynchronize(x.s[r]), cudaStreamSynchronize(y.s[r]);
  }
  cudaEvent_t e0 = recordOn(0, y.s[0]);
  sendOp(&y, y.a, 0, y.s);
  sendBytes(&x, x.a, 0, x.s, 1024);
  cudaEvent_t ex = recordOn(2, x.s[2]);
  double tX = usBetween(e0, ex);
  sendOp(&y, y.a, 1, y.s);
  cudaEvent_t e1 = recordOn(2, y.s[2]), e2 = recordOn(3, y.s[3]);
  double even = usBetween(e0, e1), odd = usBetween(e0, e2);
  double wantEven = LAUNCH_US + STEP_US + ROUTE_US + 2 * xferUs - tX;
  printf("two clusters: X's 1 KB send ends at %.3f us; Y's sends end at %.3f and %.3f us (by hand %.3f, %.3f)\n", tX,
         even, odd, wantEven, wantEven + tX);
  CHECK(tX < 20, "X's small send: %.3f us", tX);
  CHECK(near(even, wantEven, 1e-5) && near(odd, wantEven + tX, 1e-5), "Y: %.3f and %.3f us, want %.3f and %.3f", even,
        odd, wantEven, wantEven + tX);
  cudaEventDestroy(e0), cudaEventDestroy(ex), cudaEventDestroy(e1), cudaEventDestroy(e2);
  teardown(&y);
  teardown(&x);
}

/* Output files (ANYCCL_SIM_FLOWS set by ctest, maybe ANYCCL_TRACE):
 * all-reduces on both splits at once. Each split writes its own flow file
 * (the parent's, then .1 and .2 for the splits), on the one clock: both
 * list flows on host 0's NIC out (link 16: after 4 links x 4 GPUs) that
 * overlap in time. */
static void caseOutputs(void) {
  struct pair p;
  setup(&p, 1);
  double end[2];
  runTwo(&p, allReduceOp, p.a, 0, p.s, p.a, 1, p.s, 0, end);
  teardown(&p);
  const char* flows = getenv("ANYCCL_SIM_FLOWS");
  if (flows == NULL) return;
  double e[2], st[2];
  int n[2];
  for (int k = 0; k < 2; k++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s.%d", flows, k + 1);
    n[k] = flowsOn(path, 16, &st[k], &e[k]);
  }
  printf("flows on host0/nic0/out: %d and %d in the splits' files; the first %.3f-%.3f us and %.3f-%.3f us\n",
         n[0], n[1], st[0], e[0], st[1], e[1]);
  CHECK(n[0] > 0 && n[1] > 0, "both splits' flow files list flows on the shared NIC (%d, %d)", n[0], n[1]);
  /* .1 is color 0's split (GPU 0 -> 2: PCIe out of GPU 0 is link 2), .2 color 1's (link 6) */
  char path[4096];
  snprintf(path, sizeof(path), "%s.1", flows);
  double x, y;
  CHECK(flowsOn(path, 2, &x, &y) > 0 && flowsOn(path, 6, &x, &y) == 0, "file .1 is not the even split's");
  CHECK(e[0] > st[1] && e[1] > st[0], "the splits' first flows on the shared NIC overlap in time");
}

/* A thread per parent rank: each launches its split's all-reduce and the
 * parent's on two streams, ITERS times, waiting for both each time. Which
 * collectives meet in the queue depends on the threads' timing here; every
 * one ends no sooner than alone and no later than with both splits and the
 * parent sharing every link, and a waiting stream does not wait for a
 * timeout (the last rank to launch models the queue when a stream waits). */
#define ITERS 20
struct thr {
  struct pair* p;
  int r;
  double minUs, maxUs;
  int fails;
};
static void* rankMain(void* arg) {
  struct thr* t = arg;
  struct pair* p = t->p;
  int r = t->r;
  cudaSetDevice(r);
  t->minUs = INFINITY, t->maxUs = 0;
  for (int i = 0; i < ITERS; i++) {
    cudaStreamSynchronize(p->s[r]);
    cudaStreamSynchronize(p->s2[r]);
    cudaEvent_t e0 = recordOn(r, p->s[r]);
    if (ncclAllReduce(p->buf[r], p->buf[r], BYTES / 4, ncclFloat, ncclSum, p->a[r], p->s[r]) != ncclSuccess ||
        ncclAllReduce(p->buf[r], p->buf[r], 1 << 20, ncclFloat, ncclSum, p->parent[r], p->s2[r]) != ncclSuccess)
      t->fails++;
    cudaEvent_t e1 = recordOn(r, p->s[r]);
    double us = usBetween(e0, e1);
    if (us < t->minUs) t->minUs = us;
    if (us > t->maxUs) t->maxUs = us;
    cudaEventDestroy(e0), cudaEventDestroy(e1);
  }
  return NULL;
}

static void caseThreads(void) {
  struct pair p;
  setup(&p, 1);
  double alone = runOne(&p, allReduceOp, p.a, 0);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  pthread_t th[4];
  struct thr t[4];
  for (int r = 0; r < 4; r++) {
    t[r] = (struct thr){.p = &p, .r = r};
    pthread_create(&th[r], NULL, rankMain, &t[r]);
  }
  for (int r = 0; r < 4; r++) pthread_join(th[r], NULL);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
  for (int r = 0; r < 4; r++) {
    printf("thread of rank %d: its split's all-reduce %.3f to %.3f us (alone %.3f)\n", r, t[r].minUs, t[r].maxUs,
           alone);
    CHECK(t[r].fails == 0, "rank %d: %d launches failed", r, t[r].fails);
    CHECK(t[r].minUs >= alone * (1 - 1e-5) && t[r].maxUs <= 3 * alone, "rank %d: %.3f to %.3f us, alone %.3f", r,
          t[r].minUs, t[r].maxUs, alone);
  }
  printf("%d iterations on 4 threads: %.2f s\n", ITERS, s);
  CHECK(s < 2, "%d iterations took %.2f s: streams waited for timeouts", ITERS, s);
  teardown(&p);
}

/* 3D-parallel layout on 2 hosts of 8 GPUs: tensor-parallel splits by host
 * (NVLink) and data-parallel splits by local rank (one GPU per host, the
 * network), all-reduces of 64 MB on all of them at once. With a NIC per
 * GPU (rails) the DP rings own their NICs and the TP rings their NVLink:
 * nothing meets, every split times as alone. With 2 NICs per host, 4 DP
 * rings share each NIC: a quarter of it each. */
static int G = 16; /* GPUs: 2 hosts of 8 (tpdp), or more (tpdp_scale) */
static void tpdpRun(int nics, size_t bytes, double* tpUs, double* dpOneUs, double* dpAllUs, double* tpBothUs,
                    double* dpBothUs) {
  snprintf(fabricPath, sizeof(fabricPath), "/tmp/anyccl_simshare_%d_tpdp%d.fabric", (int)getpid(), nics);
  FILE* f = fopen(fabricPath, "w");
  if (f == NULL) exit(2);
  fprintf(f, "hosts %d\ngpus_per_host 8\nnics_per_host %d\n", G / 8, nics);
  fclose(f);
  setenv("ANYCCL_SIM_FABRIC", fabricPath, 1);
  ncclComm_t *world = calloc(G, sizeof(ncclComm_t)), *tp = calloc(G, sizeof(ncclComm_t)),
             *dp = calloc(G, sizeof(ncclComm_t));
  cudaStream_t *sTp = calloc(G, sizeof(cudaStream_t)), *sDp = calloc(G, sizeof(cudaStream_t));
  void** buf = calloc(G, sizeof(void*));
  *tpUs = *dpOneUs = *dpAllUs = *tpBothUs = *dpBothUs = 0;
  CHECK(ncclCommInitAll(world, G, NULL) == ncclSuccess, "ncclCommInitAll(%d)", G);
  ncclGroupStart();
  for (int r = 0; r < G; r++) ncclCommSplit(world[r], r / 8, r, &tp[r], NULL);
  CHECK(ncclGroupEnd() == ncclSuccess, "TP split");
  ncclGroupStart();
  for (int r = 0; r < G; r++) ncclCommSplit(world[r], r % 8, r, &dp[r], NULL);
  CHECK(ncclGroupEnd() == ncclSuccess, "DP split");
  for (int r = 0; r < G; r++) {
    cudaSetDevice(r);
    cudaStreamCreate(&sTp[r]), cudaStreamCreate(&sDp[r]);
    cudaMalloc(&buf[r], bytes);
  }
  /* what: 1 TP, 2 one DP split (local rank 0), 4 every DP split */
  for (int what = 1; what <= 7; what = what == 1 ? 2 : what == 2 ? 4 : what == 4 ? 5 : 8) {
    for (int r = 0; r < G; r++) {
      cudaSetDevice(r);
      cudaStreamSynchronize(sTp[r]), cudaStreamSynchronize(sDp[r]);
    }
    cudaEvent_t e0 = recordOn(0, sTp[0]);
    ncclGroupStart();
    for (int r = 0; r < G; r++) {
      cudaSetDevice(r);
      if (what & 1) ncclAllReduce(buf[r], buf[r], bytes / 4, ncclFloat, ncclSum, tp[r], sTp[r]);
      if ((what & 4) || ((what & 2) && r % 8 == 0))
        ncclAllReduce(buf[r], buf[r], bytes / 4, ncclFloat, ncclSum, dp[r], sDp[r]);
    }
    CHECK(ncclGroupEnd() == ncclSuccess, "all-reduces");
    cudaEvent_t e1 = recordOn(0, sTp[0]), e2 = recordOn(0, sDp[0]);
    double t = usBetween(e0, e1), d = usBetween(e0, e2);
    if (what == 1) *tpUs = t;
    if (what == 2) *dpOneUs = d;
    if (what == 4) *dpAllUs = d;
    if (what == 5) *tpBothUs = t, *dpBothUs = d;
    cudaEventDestroy(e0), cudaEventDestroy(e1), cudaEventDestroy(e2);
  }
  for (int r = 0; r < G; r++) {
    cudaSetDevice(r);
    cudaStreamSynchronize(sTp[r]), cudaStreamSynchronize(sDp[r]);
    cudaStreamDestroy(sTp[r]), cudaStreamDestroy(sDp[r]);
    cudaFree(buf[r]);
  }
  for (int r = 0; r < G; r++) ncclCommDestroy(tp[r]), ncclCommDestroy(dp[r]);
  for (int r = 0; r < G; r++) ncclCommDestroy(world[r]);
  free(world), free(tp), free(dp), free(sTp), free(sDp), free(buf);
  unlink(fabricPath);
}

static void caseTpDp(void) {
  for (int nics = 8; nics >= 2; nics -= 6) {
    double tp = 0, dpOne = 0, dpAll = 0, tpBoth = 0, dpBoth = 0;
    tpdpRun(nics, 64 << 20, &tp, &dpOne, &dpAll, &tpBoth, &dpBoth);
    printf("%d NICs per host: TP alone %.1f us, one DP split alone %.1f us, all 8 DP splits %.1f us; "
           "TP and DP at once: %.1f and %.1f us\n", nics, tp, dpOne, dpAll, tpBoth, dpBoth);
    CHECK(near(tpBoth, tp, 1e-6), "%d NICs: TP with DP %.3f us, alone %.3f (NVLink is TP's alone)", nics, tpBoth, tp);
    CHECK(near(dpBoth, dpAll, 1e-6), "%d NICs: DP with TP %.3f us, without %.3f", nics, dpBoth, dpAll);
    if (nics == 8) CHECK(near(dpAll, dpOne, 1e-6), "rails: 8 DP splits %.3f us, one %.3f", dpAll, dpOne);
    else CHECK(dpAll > 2.5 * dpOne, "2 NICs: 8 DP splits %.3f us should be far slower than one %.3f", dpAll, dpOne);
  }
  /* 64 KB: TP takes the one-host LL kernel, timed alone in a joint batch */
  double tp = 0, dpOne = 0, dpAll = 0, tpBoth = 0, dpBoth = 0;
  tpdpRun(8, 64 << 10, &tp, &dpOne, &dpAll, &tpBoth, &dpBoth);
  printf("64 KB, 8 NICs per host: TP alone %.3f us, with DP %.3f us; DP %.3f us, with TP %.3f us\n", tp, tpBoth, dpAll,
         dpBoth);
  CHECK(near(tpBoth, tp, 1e-6) && near(dpBoth, dpAll, 1e-6), "64 KB: TP %.3f/%.3f us, DP %.3f/%.3f us", tp, tpBoth,
        dpAll, dpBoth);
}

/* Not a ctest: the cost of a joint batch at scale (docs/simulation.md):
 * test_simshare tpdp_scale HOSTS, 64 MB on TP splits by host and DP splits
 * by local rank, a NIC per GPU. */
static void caseTpDpScale(int hosts) {
  G = 8 * hosts;
  double tp = 0, dpOne = 0, dpAll = 0, tpBoth = 0, dpBoth = 0;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  tpdpRun(8, 64 << 20, &tp, &dpOne, &dpAll, &tpBoth, &dpBoth);
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%d GPUs: TP alone %.1f us, one DP split %.1f us, all DP splits %.1f us, TP and DP at once %.1f and %.1f us; "
         "%.2f s wall\n", G, tp, dpOne, dpAll, tpBoth, dpBoth,
         (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec));
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_simshare p2p|allreduce|streams|disjoint|outputs|threads|tpdp|clusters|"
                    "tpdp_scale HOSTS\n");
    return 2;
  }
  if (!strcmp(argv[1], "p2p")) caseP2p();
  else if (!strcmp(argv[1], "allreduce")) caseAllReduce();
  else if (!strcmp(argv[1], "streams")) caseStreams();
  else if (!strcmp(argv[1], "disjoint")) caseDisjoint();
  else if (!strcmp(argv[1], "outputs")) caseOutputs();
  else if (!strcmp(argv[1], "threads")) caseThreads();
  else if (!strcmp(argv[1], "tpdp")) caseTpDp();
  else if (!strcmp(argv[1], "clusters")) caseClusters();
  else if (!strcmp(argv[1], "tpdp_scale") && argc > 2) caseTpDpScale(atoi(argv[2]));
  else return 2;
  return simCheckDone(argv[1]);
}
