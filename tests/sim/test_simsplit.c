/* ncclCommSplit and ncclCommShrink on the sim backend (ctest sets
 * ANYCCL_BACKEND=sim): the new communicators' ranks and devices, and their
 * ranks staying on the parent's GPUs, seen in the modelled times (a split
 * of one host's ranks times as a world of one host; ranks one per host time
 * as across the network). One case per run: group threads missing */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cuda_runtime.h"
#include "nccl.h"

#include "sim_check.h"

#define N 16 /* the default fabric: 2 hosts of 8 GPUs */
#define BYTES (64 << 20)

/* The modelled time (us) of an in-place float all-reduce of BYTES on the n
 * communicators, one thread driving them all: events on comms[0]'s stream. */
static double allReduceUs(ncclComm_t* comms, int n) {
  cudaStream_t* s = calloc(n, sizeof(*s));
  void** b = calloc(n, sizeof(*b));
  for (int i = 0; i < n; i++) {
    int d = -1;
    ncclCommCuDevice(comms[i], &d);
    cudaSetDevice(d);
    cudaStreamCreate(&s[i]);
    cudaMalloc(&b[i], BYTES);
  }
  int d0 = -1;
  ncclCommCuDevice(comms[0], &d0);
  cudaSetDevice(d0);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  cudaEventRecord(e0, s[0]);
  ncclGroupStart();
  for (int i = 0; i < n; i++) ncclAllReduce(b[i], b[i], BYTES / 4, ncclFloat, ncclSum, comms[i], s[i]);
  ncclResult_t r = ncclGroupEnd();
  CHECK(r == ncclSuccess, "all-reduce on %d ranks: %s", n, ncclGetErrorString(r));
  cudaSetDevice(d0);
  cudaEventRecord(e1, s[0]);
  cudaEventSynchronize(e1);
  float ms = -1;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  for (int i = 0; i < n; i++) {
    int d = -1;
    ncclCommCuDevice(comms[i], &d);
    cudaSetDevice(d);
    cudaStreamSynchronize(s[i]);
    cudaFree(b[i]);
    cudaStreamDestroy(s[i]);
  }
  free(s), free(b);
  return ms * 1000.0;
}

/* A world of its own: n ranks on GPUs 0..n-1. */
static double freshUs(int n) {
  ncclComm_t* c = calloc(n, sizeof(*c));
  CHECK(ncclCommInitAll(c, n, NULL) == ncclSuccess, "ncclCommInitAll(%d)", n);
  double us = allReduceUs(c, n);
  for (int i = 0; i < n; i++) ncclCommDestroy(c[i]);
  free(c);
  return us;
}

static int relNear(double a, double b, double tol) { return a > 0 && b > 0 && (a > b ? a - b : b - a) <= tol * b; }

/* Split every parent rank (one thread, in a group): color(r), key(r). */
static void split(ncclComm_t* parent, ncclComm_t* child, int (*color)(int), int (*key)(int)) {
  CHECK(ncclGroupStart() == ncclSuccess, "group start");
  for (int r = 0; r < N; r++) CHECK(ncclCommSplit(parent[r], color(r), key(r), &child[r], NULL) == ncclSuccess, "split %d", r);
  ncclResult_t res = ncclGroupEnd();
  CHECK(res == ncclSuccess, "split group: %s", ncclGetErrorString(res));
}

static int byHost(int r) { return r / 8; }
static int byLocal(int r) { return r % 8; }
static int firstFour(int r) { return r < 4 ? 7 : NCCL_SPLIT_NOCOLOR; }
static int plainKey(int r) { return r; }
static int reverseKey(int r) { return -r; }

static void destroyAll(ncclComm_t* c, int n) {
  for (int i = 0; i < n; i++)
    if (c[i]) ncclCommDestroy(c[i]);
}

static void caseGroup(void) {
  ncclComm_t parent[N], child[N];
  CHECK(ncclCommInitAll(parent, N, NULL) == ncclSuccess, "ncclCommInitAll(%d)", N);
  double oneHost = freshUs(8), twoNv = freshUs(2), fifteen = freshUs(15);

  /* by host: two communicators of one host each; the second one's ranks
   * are GPUs 8-15 (host 1), and time as a world of one host does */
  split(parent, child, byHost, plainKey);
  for (int r = 0; r < N; r++) {
    int n = -1, me = -1, d = -1;
    ncclCommCount(child[r], &n), ncclCommUserRank(child[r], &me), ncclCommCuDevice(child[r], &d);
    CHECK(n == 8 && me == r % 8 && d == r, "byHost: parent rank %d -> nranks %d rank %d device %d", r, n, me, d);
  }
  double h1 = allReduceUs(child + 8, 8);
  printf("split by host: host 1's 8 ranks %.1f us, a world of 8 on one host %.1f us\n", h1, oneHost);
  CHECK(relNear(h1, oneHost, 1e-6), "host 1's split (%.3f us) should time as one host of 8 (%.3f us)", h1, oneHost);
  destroyAll(child, N);

  /* local rank: 8 communicators of 2 ranks, one per host; reverse keys make
   * parent rank 8+c child rank 0. Across the network: slower than 2 GPUs of
   * one host by far (NVLink against one NIC each way). */
  split(parent, child, byLocal, reverseKey);
  for (int r = 0; r < N; r++) {
    int n = -1, me = -1, d = -1;
    ncclCommCount(child[r], &n), ncclCommUserRank(child[r], &me), ncclCommCuDevice(child[r], &d);
    CHECK(n == 2 && me == (r < 8 ? 1 : 0) && d == r, "byLocal: parent rank %d -> nranks %d rank %d device %d", r, n,
          me, d);
  }
  ncclComm_t pair[2] = {child[8], child[0]};
  double net = allReduceUs(pair, 2);
  printf("split by local rank: a pair across hosts %.1f us, 2 GPUs of one host %.1f us\n", net, twoNv);
  CHECK(net > 3 * twoNv, "a pair on two hosts (%.1f us) should be far slower than on one (%.1f us)", net, twoNv);
  destroyAll(child, N);

  /* NCCL_SPLIT_NOCOLOR: no communicator */
  split(parent, child, firstFour, reverseKey);
  for (int r = 0; r < N; r++) {
    int n = -1, me = -1;
    if (r >= 4) {
      CHECK(child[r] == NULL, "NOCOLOR rank %d got a communicator", r);
      continue;
    }
    ncclCommCount(child[r], &n), ncclCommUserRank(child[r], &me);
    CHECK(n == 4 && me == 3 - r, "firstFour: parent rank %d -> nranks %d rank %d", r, n, me);
  }
  ncclComm_t four[4] = {child[3], child[2], child[1], child[0]};
  CHECK(allReduceUs(four, 4) > 0, "the 4-rank split runs");
  destroyAll(child, N);

  /* shrink without rank 15: GPUs 0-14, as a world of 15 */
  int ex = 15;
  for (int r = 0; r < 15; r++)
    CHECK(ncclCommShrink(parent[r], &ex, 1, &child[r], NULL, NCCL_SHRINK_DEFAULT) == ncclSuccess, "shrink %d", r);
  double s15 = allReduceUs(child, 15);
  printf("shrink without rank 15: %.1f us, a world of 15 %.1f us\n", s15, fifteen);
  CHECK(relNear(s15, fifteen, 1e-6), "shrunk to 15 (%.3f us) should time as a world of 15 (%.3f us)", s15, fifteen);
  destroyAll(child, 15);

  /* shrink without ranks 0 and 9: the others keep their devices, in order */
  int ex2[2] = {9, 0};
  ncclComm_t kept[N];
  int k = 0;
  for (int r = 0; r < N; r++) {
    if (r == 0 || r == 9) continue;
    CHECK(ncclCommShrink(parent[r], ex2, 2, &kept[k], NULL, NCCL_SHRINK_DEFAULT) == ncclSuccess, "shrink %d", r);
    int n = -1, me = -1, d = -1;
    ncclCommCount(kept[k], &n), ncclCommUserRank(kept[k], &me), ncclCommCuDevice(kept[k], &d);
    CHECK(n == 14 && me == k && d == r, "shrink: parent rank %d -> nranks %d rank %d device %d", r, n, me, d);
    k++;
  }
  CHECK(allReduceUs(kept, 14) > 0, "the shrunk communicator runs");
  destroyAll(kept, 14);
  /* the parent still works after all that */
  CHECK(relNear(allReduceUs(parent, N), freshUs(N), 1e-6), "the parent times as before");
  destroyAll(parent, N);
}

/* A thread per rank, each calling ncclCommSplit alone (no group). */
struct thr {
  ncclUniqueId id;
  int rank;
  ncclResult_t res;
  int childRank, childN;
};
static void* rankMain(void* arg) {
  struct thr* t = arg;
  cudaSetDevice(t->rank);
  ncclComm_t c = NULL, s = NULL;
  t->res = ncclCommInitRank(&c, 8, t->id, t->rank);
  if (t->res == ncclSuccess) t->res = ncclCommSplit(c, t->rank % 2, t->rank, &s, NULL);
  if (t->res == ncclSuccess) {
    ncclCommCount(s, &t->childN), ncclCommUserRank(s, &t->childRank);
    cudaStream_t st;
    cudaStreamCreate(&st);
    void* b;
    cudaMalloc(&b, 1 << 20);
    t->res = ncclAllReduce(b, b, 1 << 18, ncclFloat, ncclSum, s, st);
    if (t->res == ncclSuccess && cudaStreamSynchronize(st) != cudaSuccess) t->res = ncclUnhandledCudaError;
    cudaFree(b);
    cudaStreamDestroy(st);
  }
  if (s) ncclCommDestroy(s);
  if (c) ncclCommDestroy(c);
  return NULL;
}

static void caseThreads(void) {
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
  pthread_t th[8];
  struct thr t[8];
  for (int r = 0; r < 8; r++) {
    t[r] = (struct thr){.id = id, .rank = r, .childRank = -1, .childN = -1};
    pthread_create(&th[r], NULL, rankMain, &t[r]);
  }
  for (int r = 0; r < 8; r++) {
    pthread_join(th[r], NULL);
    CHECK(t[r].res == ncclSuccess && t[r].childN == 4 && t[r].childRank == r / 2,
          "thread rank %d: %s, child nranks %d rank %d", r, ncclGetErrorString(t[r].res), t[r].childN, t[r].childRank);
  }
}

/* One rank never calls split: the others fail within the bootstrap timeout
 * (ctest sets ANYCCL_BOOTSTRAP_TIMEOUT=1), naming the wait. */
static void caseMissing(void) {
  ncclComm_t parent[4], child[4] = {0};
  CHECK(ncclCommInitAll(parent, 4, NULL) == ncclSuccess, "ncclCommInitAll(4)");
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  ncclGroupStart();
  for (int r = 0; r < 3; r++) ncclCommSplit(parent[r], 0, r, &child[r], NULL);
  ncclResult_t res = ncclGroupEnd();
  clock_gettime(CLOCK_MONOTONIC, &b);
  double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
  printf("split with a rank missing: %s after %.2f s\n", ncclGetErrorString(res), s);
  CHECK(res == ncclSystemError, "split with a rank missing should fail with ncclSystemError, got %s",
        ncclGetErrorString(res));
  CHECK(s < 10, "the failure took %.1f s", s);
  for (int r = 0; r < 3; r++)
    if (child[r]) ncclCommDestroy(child[r]);
  /* the meeting was left cleanly: all four split now */
  ncclComm_t again[4];
  ncclGroupStart();
  for (int r = 0; r < 4; r++) ncclCommSplit(parent[r], r % 2, r, &again[r], NULL);
  res = ncclGroupEnd();
  CHECK(res == ncclSuccess, "a full split after a failed one: %s", ncclGetErrorString(res));
  if (res == ncclSuccess) destroyAll(again, 4);
  destroyAll(parent, 4);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_simsplit group|threads|missing\n");
    return 2;
  }
  if (!strcmp(argv[1], "group")) caseGroup();
  else if (!strcmp(argv[1], "threads")) caseThreads();
  else if (!strcmp(argv[1], "missing")) caseMissing();
  else return 2;
  return simCheckDone(argv[1]);
}
