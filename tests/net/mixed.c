/* Ranks as threads inside processes: `mixed NPROCS THREADS` forks NPROCS
 * processes, each running THREADS ranks as threads (one device each); an
 * all-reduce, an all-gather and a send/recv ring are checked on every rank.
 * Ranks of one process use P2P, ranks of different processes SHM. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static ncclUniqueId id;
static int nranks, threads;
static size_t count = 300007;

static void* rankMain(void* arg) {
  int rank = (int)(intptr_t)arg, bad = 0;
  cudaSetDevice(rank); /* devices of one host are shared by its processes */
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return (void*)1;
  cudaStream_t s;
  cudaStreamCreate(&s);
  float *in, *out;
  cudaMalloc((void**)&in, count * sizeof(float));
  cudaMalloc((void**)&out, count * nranks * sizeof(float));
  for (size_t i = 0; i < count; i++) in[i] = (float)(rank + 1) + (float)(i % 11);
  ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, s);
  cudaStreamSynchronize(s);
  for (size_t i = 0; i < count; i++)
    bad += out[i] != (float)(nranks * (nranks + 1) / 2) + (float)nranks * (float)(i % 11);
  ncclAllGather(in, out, count, ncclFloat, comm, s);
  cudaStreamSynchronize(s);
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < count; i += 97) bad += out[r * count + i] != (float)(r + 1) + (float)(i % 11);
  ncclGroupStart();
  ncclSend(in, count, ncclFloat, (rank + 1) % nranks, comm, s);
  ncclRecv(out, count, ncclFloat, (rank + nranks - 1) % nranks, comm, s);
  ncclGroupEnd();
  cudaStreamSynchronize(s);
  int from = (rank + nranks - 1) % nranks;
  for (size_t i = 0; i < count; i++) bad += out[i] != (float)(from + 1) + (float)(i % 11);
  ncclCommDestroy(comm);
  if (bad) fprintf(stderr, "rank %d: %d wrong\n", rank, bad);
  return (void*)(intptr_t)(bad != 0);
}

int main(int argc, char** argv) {
  int nprocs = argc > 1 ? atoi(argv[1]) : 2;
  threads = argc > 2 ? atoi(argv[2]) : 2;
  nranks = nprocs * threads;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  pid_t pids[64];
  for (int p = 0; p < nprocs; p++) {
    pids[p] = fork();
    if (pids[p] == 0) {
      pthread_t t[64];
      int fail = 0;
      for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, rankMain, (void*)(intptr_t)(p * threads + i));
      for (int i = 0; i < threads; i++) {
        void* r;
        pthread_join(t[i], &r);
        fail |= r != NULL;
      }
      _exit(fail);
    }
  }
  int fails = 0;
  for (int p = 0; p < nprocs; p++) {
    int st;
    waitpid(pids[p], &st, 0);
    fails += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  printf("%s: %d processes x %d thread ranks\n", fails ? "FAIL" : "PASS", nprocs, threads);
  return fails != 0;
}
