/* Ranks as processes on virtual hosts: `net_ranks NRANKS RANKS_PER_HOST [bytes]`
 * starts NRANKS processes (exec of itself), rank r with NCCL_HOSTID=host<r/RPH>,
 * and checks all-reduce, all-gather, broadcast and a send/recv ring across
 * them. Exit 0 when every rank passed. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "launch.h"

static int rank;

static int child(int n, int rph, size_t count, const char* idfile) {
  ncclUniqueId id;
  if (readUniqueId(idfile, &id) != 0) return 2;
  cudaSetDevice(rank % rph);
  ncclComm_t comm;
  const char* want = getenv("NET_RANKS_INIT_FAILS"); /* tests: init must fail with this error */
  if (want) {
    ncclResult_t r = ncclCommInitRank(&comm, n, id, rank);
    if (r == ncclSuccess || strncmp(ncclGetErrorString(r), want, strlen(want)) != 0) {
      fprintf(stderr, "rank %d: ncclCommInitRank returned \"%s\", expected \"%s\"\n", rank, ncclGetErrorString(r), want);
      return 1;
    }
    printf("rank %d: init failed as expected: %s\n", rank, ncclGetLastError(NULL));
    return 0;
  }
  CK(ncclCommInitRank(&comm, n, id, rank));
  cudaStream_t s;
  cudaStreamCreate(&s);
  float *in, *out;
  cudaMalloc((void**)&in, count * sizeof(float));
  cudaMalloc((void**)&out, count * n * sizeof(float));
  for (size_t i = 0; i < count; i++) in[i] = (float)(rank + 1) + (float)(i % 13);
  int bad = 0;
  CK(ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, s));
  cudaStreamSynchronize(s);
  for (size_t i = 0; i < count; i++) {
    float e = (float)(n * (n + 1) / 2) + (float)n * (float)(i % 13);
    if (out[i] != e && bad++ < 3) fprintf(stderr, "rank %d allreduce[%zu]=%g want %g\n", rank, i, out[i], e);
  }
  CK(ncclAllGather(in, out, count, ncclFloat, comm, s));
  cudaStreamSynchronize(s);
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) {
      float e = (float)(r + 1) + (float)(i % 13);
      if (out[r * count + i] != e && bad++ < 3) fprintf(stderr, "rank %d allgather[%d][%zu] wrong\n", rank, r, i);
    }
  CK(ncclBroadcast(in, out, count, ncclFloat, n - 1, comm, s));
  cudaStreamSynchronize(s);
  for (size_t i = 0; i < count; i++)
    if (out[i] != (float)n + (float)(i % 13) && bad++ < 3) fprintf(stderr, "rank %d bcast[%zu] wrong\n", rank, i);
  CK(ncclGroupStart());
  CK(ncclSend(in, count, ncclFloat, (rank + 1) % n, comm, s));
  CK(ncclRecv(out, count, ncclFloat, (rank + n - 1) % n, comm, s));
  CK(ncclGroupEnd());
  cudaStreamSynchronize(s);
  int from = (rank + n - 1) % n;
  for (size_t i = 0; i < count; i++)
    if (out[i] != (float)(from + 1) + (float)(i % 13) && bad++ < 3) fprintf(stderr, "rank %d recv[%zu] = %g wrong\n", rank, i, out[i]);
  /* Split across hosts: colour by parity (each child spans both hosts when
   * there are two ranks per host), keys reversed; the child matches devices
   * by bus id afresh, not by the parent's ranks. */
  ncclComm_t child;
  CK(ncclCommSplit(comm, rank % 2, -rank, &child, NULL));
  int cn, cr;
  CK(ncclCommCount(child, &cn));
  CK(ncclCommUserRank(child, &cr));
  int expectN = (n + 1 - rank % 2) / 2;
  int expectR = (n - 1 - rank) / 2; /* reversed order among same parity */
  if (cn != expectN || cr != expectR) {
    fprintf(stderr, "rank %d: split gave rank %d of %d, expected %d of %d\n", rank, cr, cn, expectR, expectN);
    bad++;
  }
  CK(ncclAllReduce(in, out, count, ncclFloat, ncclSum, child, s));
  cudaStreamSynchronize(s);
  float sumIds = 0;
  for (int q = rank % 2; q < n; q += 2) sumIds += (float)(q + 1);
  for (size_t i = 0; i < count; i++) {
    float e = sumIds + (float)cn * (float)(i % 13);
    if (out[i] != e && bad++ < 3) fprintf(stderr, "rank %d split allreduce[%zu]=%g want %g\n", rank, i, out[i], e);
  }
  CK(ncclCommDestroy(child));
  /* Shrink: drop the last rank (which does not call). */
  if (rank != n - 1 && n > 1) {
    int ex = n - 1;
    ncclComm_t small;
    CK(ncclCommShrink(comm, &ex, 1, &small, NULL, NCCL_SHRINK_DEFAULT));
    CK(ncclAllReduce(in, out, count, ncclFloat, ncclSum, small, s));
    cudaStreamSynchronize(s);
    for (size_t i = 0; i < count; i++) {
      float e = (float)((n - 1) * n / 2) + (float)(n - 1) * (float)(i % 13);
      if (out[i] != e && bad++ < 3) fprintf(stderr, "rank %d shrink allreduce[%zu]=%g want %g\n", rank, i, out[i], e);
    }
    CK(ncclCommDestroy(small));
  }
  CK(ncclCommDestroy(comm));
  return bad ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc >= 7 && strcmp(argv[1], "--child") == 0) {
    rank = atoi(argv[2]);
    return child(atoi(argv[3]), atoi(argv[4]), strtoull(argv[5], NULL, 0), argv[6]);
  }
  int n = argc > 1 ? atoi(argv[1]) : 4;
  int rph = argc > 2 ? atoi(argv[2]) : 2;
  int fails = launchRanks(argv[0], n, rph, argc > 3 ? argv[3] : "100003");
  printf("%s: %d ranks, %d per host\n", fails ? "FAIL" : "PASS", n, rph);
  return fails ? 1 : 0;
}
