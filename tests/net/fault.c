/* A peer dies: `fault NRANKS RANKS_PER_HOST` starts NRANKS processes
 * (NCCL_HOSTID=host<r/RPH>); after init the last rank exits without taking
 * part, the others start an all-reduce and must see ncclCommGetAsyncError
 * report ncclRemoteError or ncclSystemError within LIMIT seconds, and
 * ncclCommAbort must return promptly. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "launch.h"

#define LIMIT 15.0

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int child(int rank, int n, int rph, const char* idfile) {
  ncclUniqueId id;
  if (readUniqueId(idfile, &id) != 0) return 2;
  cudaSetDevice(rank % rph);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return 3;
  if (rank == n - 1) _exit(0); /* dies without a word */
  size_t count = 1 << 20;
  float* buf;
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaMalloc((void**)&buf, count * sizeof(float));
  usleep(200000);
  double t0 = now();
  /* The failure may already be known (a dropped socket): then the call
   * itself refuses with the communicator's error. */
  ncclResult_t async = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, s);
  if (async != ncclSuccess && async != ncclRemoteError && async != ncclSystemError) return 4;
  while (async == ncclSuccess && now() - t0 < LIMIT) {
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return 5;
    if (async != ncclSuccess && async != ncclInProgress) break;
    usleep(10000);
  }
  double detect = now() - t0;
  if (async != ncclRemoteError && async != ncclSystemError) {
    fprintf(stderr, "rank %d: no error after %.1f s (async %d)\n", rank, detect, async);
    return 6;
  }
  double t1 = now();
  if (ncclCommAbort(comm) != ncclSuccess) return 7;
  double abortTime = now() - t1;
  cudaStreamSynchronize(s); /* the pending work has ended */
  printf("rank %d: %s after %.2f s, abort took %.3f s\n", rank, ncclGetErrorString(async), detect, abortTime);
  return abortTime < 5.0 ? 0 : 8;
}

int main(int argc, char** argv) {
  if (argc >= 7 && strcmp(argv[1], "--child") == 0)
    return child(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argv[6]);
  int n = argc > 1 ? atoi(argv[1]) : 3;
  int rph = argc > 2 ? atoi(argv[2]) : 1;
  int fails = launchRanks(argv[0], n, rph, NULL);
  printf("%s: dead peer among %d ranks, %d per host\n", fails ? "FAIL" : "PASS", n, rph);
  return fails ? 1 : 0;
}
