/* Ranks on virtual hosts, on real GPUs: the network transport for GPU buffers,
 * timed side by side with NCCL (LD_LIBRARY_PATH picks the library).
 *
 *   net_bench NRANKS RANKS_PER_HOST COLL MINBYTES MAXBYTES [ITERS]
 *     COLL: all_reduce | sendrecv (ring: send to r+1, receive from r-1)
 *
 * Rank r runs in its own process on GPU r with NCCL_HOSTID=host<r/RPH>, so
 * ranks of different "hosts" talk through the library's network transport
 * (sockets; NCCL_SOCKET_IFNAME picks the interface) even on one machine.
 * Prints nccl-tests' columns (out-of-place, float, sum) from rank 0, whose
 * time is the mean of ITERS back-to-back calls after 5 warm-ups, and checks
 * every size once against the host reference (#wrong). Exit 0 when every
 * rank found no wrong element. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../net/launch.h"

static int rank;

static ncclResult_t runOnce(int sendrecv, const float* in, float* out, size_t count, int n, ncclComm_t comm,
                            cudaStream_t s) {
  if (!sendrecv) return ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, s);
  ncclGroupStart();
  ncclSend(in, count, ncclFloat, (rank + 1) % n, comm, s);
  ncclRecv(out, count, ncclFloat, (rank + n - 1) % n, comm, s);
  return ncclGroupEnd();
}

static float inValue(int r, size_t i) { return (float)(r + 1) + (float)(i % 13); }

static int child(int n, const char* args, const char* idfile) {
  char coll[32];
  size_t minB = 0, maxB = 0;
  int iters = 20;
  if (sscanf(args, "%31[^,],%zu,%zu,%d", coll, &minB, &maxB, &iters) < 3) return 2;
  int sendrecv = strcmp(coll, "sendrecv") == 0;
  ncclUniqueId id;
  if (readUniqueId(idfile, &id) != 0) return 2;
  int ndev = 0;
  CUCK(cudaGetDeviceCount(&ndev));
  CUCK(cudaSetDevice(rank % ndev));
  ncclComm_t comm;
  CK(ncclCommInitRank(&comm, n, id, rank));
  cudaStream_t s;
  CUCK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  size_t maxCount = maxB / sizeof(float);
  float *in, *out, *host;
  CUCK(cudaMalloc((void**)&in, maxCount * sizeof(float)));
  CUCK(cudaMalloc((void**)&out, maxCount * sizeof(float)));
  host = malloc(maxCount * sizeof(float));
  for (size_t i = 0; i < maxCount; i++) host[i] = inValue(rank, i);
  CUCK(cudaMemcpy(in, host, maxCount * sizeof(float), cudaMemcpyHostToDevice));
  cudaEvent_t t0, t1;
  CUCK(cudaEventCreate(&t0));
  CUCK(cudaEventCreate(&t1));
  if (rank == 0) {
    printf("# net_bench: %d ranks, %s, float sum, out-of-place, %d iterations\n", n, coll, iters);
    printf("#%11s %12s %8s %6s %6s %9s %7s %7s %6s\n", "size", "count", "type", "redop", "root", "time", "algbw",
           "busbw", "#wrong");
    printf("#%11s %12s %8s %6s %6s %9s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  int totalWrong = 0;
  for (size_t bytes = minB; bytes <= maxB; bytes *= 2) {
    size_t count = bytes / sizeof(float);
    /* check */
    CUCK(cudaMemset(out, 0, bytes));
    CK(runOnce(sendrecv, in, out, count, n, comm, s));
    CUCK(cudaStreamSynchronize(s));
    CUCK(cudaMemcpy(host, out, bytes, cudaMemcpyDeviceToHost));
    long wrong = 0;
    int from = (rank + n - 1) % n;
    for (size_t i = 0; i < count; i++) {
      float e = sendrecv ? inValue(from, i) : (float)(n * (n + 1) / 2) + (float)n * (float)(i % 13);
      wrong += host[i] != e;
    }
    totalWrong += wrong > 0;
    /* time */
    for (int w = 0; w < 5; w++) CK(runOnce(sendrecv, in, out, count, n, comm, s));
    CUCK(cudaEventRecord(t0, s));
    for (int it = 0; it < iters; it++) CK(runOnce(sendrecv, in, out, count, n, comm, s));
    CUCK(cudaEventRecord(t1, s));
    CUCK(cudaEventSynchronize(t1));
    float ms = 0;
    CUCK(cudaEventElapsedTime(&ms, t0, t1));
    double us = ms * 1000.0 / iters;
    double algbw = (double)bytes / us / 1e3;
    double busbw = sendrecv ? algbw : algbw * 2.0 * (n - 1) / n;
    if (rank == 0)
      printf(" %12zu %12zu %8s %6s %6d %9.1f %7.2f %7.2f %6ld\n", bytes, count, "float", sendrecv ? "none" : "sum",
             -1, us, algbw, busbw, wrong);
    fflush(stdout);
    /* re-align the ranks before the next size */
    CK(ncclAllReduce(in, out, 1, ncclFloat, ncclSum, comm, s));
    CUCK(cudaStreamSynchronize(s));
  }
  CK(ncclCommDestroy(comm));
  free(host);
  return totalWrong ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc >= 7 && strcmp(argv[1], "--child") == 0) {
    rank = atoi(argv[2]);
    return child(atoi(argv[3]), argv[5], argv[6]);
  }
  if (argc < 6) {
    fprintf(stderr, "usage: %s NRANKS RANKS_PER_HOST all_reduce|sendrecv MINBYTES MAXBYTES [ITERS]\n", argv[0]);
    return 2;
  }
  char args[160];
  snprintf(args, sizeof(args), "%s,%s,%s,%s", argv[3], argv[4], argv[5], argc > 6 ? argv[6] : "20");
  int fails = launchRanks(argv[0], atoi(argv[1]), atoi(argv[2]), args);
  printf("%s: net_bench %s, %s ranks, %s per host\n", fails ? "FAIL" : "PASS", argv[3], argv[1], argv[2]);
  return fails ? 1 : 0;
}
