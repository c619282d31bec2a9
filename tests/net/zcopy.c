/* Sends from the user's buffer (ANYCCL_NET_ZCOPY_MIN): `net_zcopy` starts 2
 * processes on 2 virtual hosts and checks that
 *  - a send that returned has taken its bytes: rank 0 sends 16 MB one way
 *    and overwrites its buffer as soon as the stream is done (what is still
 *    in flight then would reach rank 1 as the next round's pattern);
 *  - in-place all-reduce, all-gather and an out-of-place broadcast, whose
 *    steps write the buffers that earlier steps sent from (under
 *    NCCL_ALGO=Direct the all-reduce writes its result over a send of the
 *    same bytes that may still be reading them);
 *  - receives straight into the output when a stalled rank's signature
 *    comes ahead of the data the receives were bound to (a small gather
 *    that rank 1 enters late, then a scatter).
 * Exit 0 when both ranks passed. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "launch.h"

static int rank;

static float pattern(int round, size_t i) { return (float)(round * 7 + 1) + (float)(i % 1021); }

static int child(int n, size_t count, const char* idfile) {
  ncclUniqueId id;
  if (readUniqueId(idfile, &id) != 0) return 2;
  cudaSetDevice(0);
  ncclComm_t comm;
  CK(ncclCommInitRank(&comm, n, id, rank));
  cudaStream_t s;
  CUCK(cudaStreamCreate(&s));
  float *buf, *out;
  CUCK(cudaMalloc((void**)&buf, count * n * sizeof(float)));
  CUCK(cudaMalloc((void**)&out, count * n * sizeof(float)));
  int bad = 0;
  /* one way, the sender's buffer overwritten at once */
  for (int round = 0; round < 4; round++) {
    if (rank == 0) {
      for (size_t i = 0; i < count; i++) buf[i] = pattern(round, i);
      CK(ncclSend(buf, count, ncclFloat, 1, comm, s));
      CUCK(cudaStreamSynchronize(s));
      for (size_t i = 0; i < count; i++) buf[i] = -1.0f;
    } else if (rank == 1) {
      memset(out, 0, count * sizeof(float));
      CK(ncclRecv(out, count, ncclFloat, 0, comm, s));
      CUCK(cudaStreamSynchronize(s));
      for (size_t i = 0; i < count; i++)
        if (out[i] != pattern(round, i) && bad++ < 3)
          fprintf(stderr, "rank 1 round %d recv[%zu] = %g want %g\n", round, i, out[i], pattern(round, i));
    }
  }
  /* in-place all-reduce */
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1) * pattern(round, i);
    CK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, s));
    CUCK(cudaStreamSynchronize(s));
    float k = (float)(n * (n + 1) / 2);
    for (size_t i = 0; i < count; i++)
      if (buf[i] != k * pattern(round, i) && bad++ < 3)
        fprintf(stderr, "rank %d round %d allreduce[%zu] = %g want %g\n", rank, round, i, buf[i],
                k * pattern(round, i));
  }
  /* out-of-place all-reduce and all-gather: their last steps receive
   * straight into the output */
  for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1) * pattern(5, i);
  CK(ncclAllReduce(buf, out, count, ncclFloat, ncclSum, comm, s));
  CUCK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < count; i++)
    if (out[i] != (float)(n * (n + 1) / 2) * pattern(5, i) && bad++ < 3)
      fprintf(stderr, "rank %d allreduce out[%zu] = %g\n", rank, i, out[i]);
  for (size_t i = 0; i < count; i++) buf[i] = pattern(40 + rank, i);
  CK(ncclAllGather(buf, out, count, ncclFloat, comm, s));
  CUCK(cudaStreamSynchronize(s));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++)
      if (out[(size_t)r * count + i] != pattern(40 + r, i) && bad++ < 3)
        fprintf(stderr, "rank %d allgather out[%d][%zu] = %g\n", rank, r, i, out[(size_t)r * count + i]);
  /* in-place all-gather: my block is buf + rank * count */
  for (size_t i = 0; i < count; i++) buf[(size_t)rank * count + i] = pattern(rank, i);
  CK(ncclAllGather(buf + (size_t)rank * count, buf, count, ncclFloat, comm, s));
  CUCK(cudaStreamSynchronize(s));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++)
      if (buf[(size_t)r * count + i] != pattern(r, i) && bad++ < 3)
        fprintf(stderr, "rank %d allgather[%d][%zu] = %g\n", rank, r, i, buf[(size_t)r * count + i]);
  /* out-of-place broadcast from rank 0 (the root copies in -> out and sends) */
  for (size_t i = 0; i < count; i++) {
    buf[i] = rank == 0 ? pattern(9, i) : -2.0f;
    out[i] = -3.0f;
  }
  CK(ncclBroadcast(buf, out, count, ncclFloat, 0, comm, s));
  CUCK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < count; i++)
    if (out[i] != pattern(9, i) && bad++ < 3) fprintf(stderr, "rank %d bcast[%zu] = %g\n", rank, i, out[i]);
  /* a small gather to rank 0 that rank 1 enters late: rank 0 stalls with
   * room in its send FIFO to rank 1 and sends its signature there; rank 1
   * (not waiting: the gather has room) reads it in the next collective that
   * receives from rank 0, a scatter, one message ahead of the data its
   * receives were bound to */
  for (size_t i = 0; i < 1024; i++) buf[i] = pattern(20 + rank, i);
  if (rank == 1) usleep(800000);
  CK(ncclGather(buf, out, 1024, ncclFloat, 0, comm, s));
  CUCK(cudaStreamSynchronize(s));
  for (int r = 0; r < n && rank == 0; r++)
    for (size_t i = 0; i < 1024; i++)
      if (out[(size_t)r * 1024 + i] != pattern(20 + r, i) && bad++ < 3)
        fprintf(stderr, "rank 0 gather[%d][%zu] = %g\n", r, i, out[(size_t)r * 1024 + i]);
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) buf[(size_t)r * count + i] = pattern(30 + r, i);
  for (size_t i = 0; i < count; i++) out[i] = -4.0f;
  if (rank == 0) usleep(100000); /* rank 1 binds its receives before the data comes */
  CK(ncclScatter(buf, out, count, ncclFloat, 0, comm, s));
  CUCK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < count; i++)
    if (out[i] != pattern(30 + rank, i) && bad++ < 3) fprintf(stderr, "rank %d scatter[%zu] = %g\n", rank, i, out[i]);
  CK(ncclCommDestroy(comm));
  CUCK(cudaFree(buf));
  CUCK(cudaFree(out));
  return bad ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc >= 7 && strcmp(argv[1], "--child") == 0) {
    rank = atoi(argv[2]);
    return child(atoi(argv[3]), strtoull(argv[5], NULL, 0), argv[6]);
  }
  const char* count = argc > 1 ? argv[1] : "4194304";
  int fails = launchRanks(argv[0], 2, 1, count);
  printf("%s: 2 ranks on 2 hosts, %s floats\n", fails ? "FAIL" : "PASS", count);
  return fails ? 1 : 0;
}
