/* The device API across processes (windows mapped through CUDA IPC), one
 * process per GPU, checked against a host reference:
 *   1. all-reduce through LSA pointers between two LSA barriers;
 *   2. GIN: every rank puts its block into every peer's window with a
 *      signal increment, waits for nRanks signals, counters count the puts;
 *   3. a world barrier (ncclBarrierSession) and an LL all-to-all exchange.
 * Built by tests/gpu/devapi.sh against the installed anyccl:
 *   nvcc -std=c++17 -arch=sm_90 -I$PREFIX/include devapi_procs.cu -L$PREFIX/lib -lnccl
 *   devapi_procs NRANKS [ITERS]     exit status 0 pass */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "nccl.h"
#include "nccl_device.h"

#ifndef ANYCCL_NCCL_DEVICE_API
#error "not anyccl's nccl_device.h"
#endif

#define CHECK(cmd)                                                                           \
  do {                                                                                       \
    auto r_ = (cmd);                                                                         \
    if (r_ != 0) {                                                                           \
      fprintf(stderr, "rank %d: %s failed (%d) at line %d\n", rank, #cmd, (int)r_, __LINE__); \
      exit(2);                                                                               \
    }                                                                                        \
  } while (0)

enum { BLOCKS = 4, THREADS = 256, LL_SLOTS = 64 };

/* recv[i] = sum over ranks of send_r[i]; then put my block of send into every
 * peer's gin area at my slot; then LL: each rank sends rank*100+peer. */
__global__ void devapiKernel(ncclWindow_t sendWin, ncclWindow_t recvWin, ncclWindow_t ginWin, size_t count,
                             size_t block, ncclDevComm dc, float* llOut, int iter) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
  for (size_t i = threadIdx.x + blockIdx.x * blockDim.x; i < count; i += blockDim.x * gridDim.x) {
    float v = 0;
    for (int p = 0; p < dc.lsaSize; p++) v += ((const float*)ncclGetLsaPointer(sendWin, 0, p))[i];
    ((float*)ncclGetLocalPointer(recvWin, 0))[i] = v;
  }
  bar.sync(ncclCoopCta(), cuda::memory_order_release);

  ncclGin gin{dc, 0};
  uint32_t sig = blockIdx.x;
  uint64_t before = gin.readSignal(sig);
  ncclBarrierSession<ncclCoopCta> wbar{ncclCoopCta(), ncclTeamTagWorld(), gin, blockIdx.x};
  wbar.sync(ncclCoopCta(), cuda::memory_order_acquire, ncclGinFenceLevel::Relaxed);
  if (blockIdx.x == 0) {
    for (int p = 0; p < dc.nRanks; p++)
      gin.put(ncclTeamWorld(dc), p, ginWin, (size_t)dc.rank * block * sizeof(float), sendWin, 0,
              block * sizeof(float), ncclGin_SignalInc{sig}, ncclGin_CounterInc{0}, ncclCoopCta());
    gin.waitSignal(ncclCoopCta(), sig, before + dc.nRanks);
    gin.waitCounter(ncclCoopCta(), 0, (uint64_t)(iter + 1) * dc.nRanks);
    gin.flush(ncclCoopCta());
  }
  wbar.sync(ncclCoopCta(), cuda::memory_order_release, ncclGinFenceLevel::Relaxed);

  if (blockIdx.x == 0) {
    ncclLLA2ASession<ncclCoopCta> ll{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaLLA2A, 0, LL_SLOTS};
    for (int p = threadIdx.x; p < dc.lsaSize; p += blockDim.x)
      ll.send(p, dc.lsaRank, (float)(dc.rank * 100 + p + iter));
    for (int p = threadIdx.x; p < dc.lsaSize; p += blockDim.x) llOut[p] = ll.recv<float>(p);
    ll.endEpoch(ncclCoopCta());
  }
}

static float sendValue(int r, size_t i) { return (float)((r + 1) * 1000 + (int)(i % 997)); }

static int runRank(int rank, int n, ncclUniqueId id, int iters) {
  CHECK(cudaSetDevice(rank));
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, n, id, rank));
  const size_t count = 1 << 20, block = 4096;
  float *send, *recv, *gin, *llOut;
  CHECK(ncclMemAlloc((void**)&send, count * sizeof(float)));
  CHECK(ncclMemAlloc((void**)&recv, count * sizeof(float)));
  CHECK(ncclMemAlloc((void**)&gin, n * block * sizeof(float)));
  CHECK(cudaMalloc(&llOut, 64 * sizeof(float)));
  float* host = (float*)malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) host[i] = sendValue(rank, i);
  CHECK(cudaMemcpy(send, host, count * sizeof(float), cudaMemcpyHostToDevice));
  ncclWindow_t sw, rw, gw;
  CHECK(ncclCommWindowRegister(comm, send, count * sizeof(float), &sw, NCCL_WIN_COLL_SYMMETRIC));
  CHECK(ncclCommWindowRegister(comm, recv, count * sizeof(float), &rw, NCCL_WIN_COLL_SYMMETRIC));
  CHECK(ncclCommWindowRegister(comm, gin, n * block * sizeof(float), &gw, NCCL_WIN_COLL_SYMMETRIC));
  ncclDevCommRequirements reqs;
  memset(&reqs, 0, sizeof(reqs));
  reqs.lsaBarrierCount = BLOCKS;
  reqs.barrierCount = BLOCKS;
  reqs.ginSignalCount = BLOCKS;
  reqs.ginCounterCount = 1;
  reqs.lsaLLA2ABlockCount = 1;
  reqs.lsaLLA2ASlotCount = LL_SLOTS;
  ncclDevComm dc;
  CHECK(ncclDevCommCreate(comm, &reqs, &dc));
  int bad = 0;
  for (int it = 0; it < iters && !bad; it++) {
    CHECK(cudaMemset(recv, 0, count * sizeof(float)));
    devapiKernel<<<BLOCKS, THREADS>>>(sw, rw, gw, count, block, dc, llOut, it);
    CHECK(cudaDeviceSynchronize());
    ncclResult_t async;
    CHECK(ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess) {
      fprintf(stderr, "rank %d: async error %s\n", rank, ncclGetErrorString(async));
      bad = 1;
      break;
    }
    CHECK(cudaMemcpy(host, recv, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count && bad < 5; i++) {
      float want = 0;
      for (int r = 0; r < n; r++) want += sendValue(r, i);
      if (host[i] != want) fprintf(stderr, "rank %d iter %d: recv[%zu] = %g, want %g\n", rank, it, i, host[i], want), bad++;
    }
    CHECK(cudaMemcpy(host, gin, n * block * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < block && bad < 5; i++)
        if (host[r * block + i] != sendValue(r, i))
          fprintf(stderr, "rank %d iter %d: gin[%d][%zu] = %g, want %g\n", rank, it, r, i, host[r * block + i],
                  sendValue(r, i)), bad++;
    float ll[64];
    CHECK(cudaMemcpy(ll, llOut, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int p = 0; p < n; p++)
      if (ll[p] != (float)(p * 100 + rank + it))
        fprintf(stderr, "rank %d iter %d: ll from %d = %g, want %d\n", rank, it, p, ll[p], p * 100 + rank + it), bad++;
  }
  CHECK(ncclDevCommDestroy(comm, &dc));
  CHECK(ncclCommWindowDeregister(comm, sw));
  CHECK(ncclCommWindowDeregister(comm, rw));
  CHECK(ncclCommWindowDeregister(comm, gw));
  CHECK(ncclMemFree(send));
  CHECK(ncclMemFree(recv));
  CHECK(ncclMemFree(gin));
  CHECK(ncclCommDestroy(comm));
  if (!bad) printf("rank %d: ok (%d iterations)\n", rank, iters);
  return bad ? 1 : 0;
}

int main(int argc, char** argv) {
  int rank = -1;
  int n = argc > 1 ? atoi(argv[1]) : 2, iters = argc > 2 ? atoi(argv[2]) : 20;
  if (n < 1 || n > 64) return 2;
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  for (int r = 0; r < n; r++)
    if (fork() == 0) _exit(runRank(r, n, id, iters));
  int fails = 0;
  for (int r = 0; r < n; r++) {
    int st = 0;
    wait(&st);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fails++;
  }
  printf("%s: %d processes, %d failed\n", fails ? "FAIL" : "ok", n, fails);
  return fails ? 1 : 0;
}
