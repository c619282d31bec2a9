/* The device API across processes (windows mapped through CUDA IPC), one
 * process per GPU, checked against a host reference:
 *   1. all-reduce through LSA pointers between two LSA barriers;
 *   2. GIN: every rank puts its block into every peer's window with a
 *      signal increment, waits for nRanks signals, counters count the puts;
 *   3. a world barrier (ncclBarrierSession) and an LL all-to-all exchange.
 * Built by tests/gpu/devapi.sh against the installed anyccl:
 *   nvcc -std=c++17 -arch=sm_90 -I$PREFIX/include devapi_procs.cu -L$PREFIX/lib -lnccl
 *   devapi_procs NRANKS [ITERS]     exit status 0 pass
 *   devapi_procs NRANKS 0 timeout   rank 0 launches nothing: the others' barrier
 *                                   gives up after ANYCCL_DEV_TIMEOUT (set 2 here)
 *                                   and ncclCommGetAsyncError reports it
 *   devapi_procs NRANKS 0 abort     the same with no timeout: ncclCommAbort ends
 *                                   the waiting kernels
 *   devapi_procs NRANKS ITERS hosts each rank on a host of its own (NCCL_HOSTID): LSA
 *                                   teams of 1, rail team of NRANKS; the same checks,
 *                                   GIN and the world barrier through the proxy
 *                                   (staged puts, host-word signals and counters),
 *                                   plus a put-value with a signal add */
#include <chrono>
#include <thread>
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
  const size_t valueArea = (size_t)dc.nRanks * block * sizeof(float); /* then one uint64_t per rank */
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
    for (int p = 0; p < dc.nRanks; p++)
      gin.putValue(ncclTeamWorld(dc), p, ginWin, valueArea + (size_t)dc.rank * 8,
                   (uint64_t)(dc.rank * 1000 + iter + 7), ncclGin_SignalAdd{sig, 2}, ncclCoopCta());
    gin.waitSignal(ncclCoopCta(), sig, before + 3 * dc.nRanks);
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

/* The device communicator every mode here uses: barriers and GIN signals per
 * block, one counter, the LL all-to-all. */
static ncclResult_t devCommCreate(ncclComm_t comm, ncclDevComm* dc) {
  ncclDevCommRequirements reqs;
  memset(&reqs, 0, sizeof(reqs));
  reqs.lsaBarrierCount = BLOCKS;
  reqs.barrierCount = BLOCKS;
  reqs.ginSignalCount = BLOCKS;
  reqs.ginCounterCount = 1;
  reqs.lsaLLA2ABlockCount = 1;
  reqs.lsaLLA2ASlotCount = LL_SLOTS;
  return ncclDevCommCreate(comm, &reqs, dc);
}

static int runComm(int rank, int n, ncclComm_t comm, int iters);
static int runRank(int rank, int n, ncclUniqueId id, int iters) {
  CHECK(cudaSetDevice(rank));
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, n, id, rank));
  return runComm(rank, n, comm, iters);
}

/* The checks on a communicator (its LSA team: the ranks of this host). */
static int runComm(int rank, int n, ncclComm_t comm, int iters) {
  ncclTeam_t lsa = ncclTeamLsa(comm);
  const int base = rank - lsa.rank;
  const size_t count = 1 << 20, block = 4096, ginBytes = n * block * sizeof(float) + n * sizeof(uint64_t);
  float *send, *recv, *gin, *llOut;
  CHECK(ncclMemAlloc((void**)&send, count * sizeof(float)));
  CHECK(ncclMemAlloc((void**)&recv, count * sizeof(float)));
  CHECK(ncclMemAlloc((void**)&gin, ginBytes));
  CHECK(cudaMalloc(&llOut, 64 * sizeof(float)));
  float* host = (float*)malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) host[i] = sendValue(rank, i);
  CHECK(cudaMemcpy(send, host, count * sizeof(float), cudaMemcpyHostToDevice));
  ncclWindow_t sw, rw, gw;
  CHECK(ncclCommWindowRegister(comm, send, count * sizeof(float), &sw, NCCL_WIN_COLL_SYMMETRIC));
  CHECK(ncclCommWindowRegister(comm, recv, count * sizeof(float), &rw, NCCL_WIN_COLL_SYMMETRIC));
  CHECK(ncclCommWindowRegister(comm, gin, ginBytes, &gw, NCCL_WIN_COLL_SYMMETRIC));
  ncclDevComm dc;
  CHECK(devCommCreate(comm, &dc));
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
      for (int r = base; r < base + lsa.nRanks; r++) want += sendValue(r, i);
      if (host[i] != want) fprintf(stderr, "rank %d iter %d: recv[%zu] = %g, want %g\n", rank, it, i, host[i], want), bad++;
    }
    CHECK(cudaMemcpy(host, gin, ginBytes, cudaMemcpyDeviceToHost));
    const uint64_t* values = (const uint64_t*)(host + n * block);
    for (int r = 0; r < n; r++)
      if (values[r] != (uint64_t)(r * 1000 + it + 7))
        fprintf(stderr, "rank %d iter %d: put-value from %d = %llu, want %d\n", rank, it, r,
                (unsigned long long)values[r], r * 1000 + it + 7), bad++;
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < block && bad < 5; i++)
        if (host[r * block + i] != sendValue(r, i))
          fprintf(stderr, "rank %d iter %d: gin[%d][%zu] = %g, want %g\n", rank, it, r, i, host[r * block + i],
                  sendValue(r, i)), bad++;
    float ll[64];
    CHECK(cudaMemcpy(ll, llOut, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int p = 0; p < lsa.nRanks; p++)
      if (ll[p] != (float)((base + p) * 100 + lsa.rank + it))
        fprintf(stderr, "rank %d iter %d: ll from %d = %g, want %d\n", rank, it, base + p, ll[p],
                (base + p) * 100 + lsa.rank + it), bad++;
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
  fflush(stdout);
  return bad ? 1 : 0;
}

/* Rank 0 never arrives; the others must come back, with the error reported. */
static int runStuck(int rank, int n, ncclUniqueId id, int useAbort) {
  CHECK(cudaSetDevice(rank));
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, n, id, rank));
  float *buf, *llOut;
  CHECK(ncclMemAlloc((void**)&buf, 1 << 20));
  CHECK(cudaMalloc(&llOut, 64 * sizeof(float)));
  ncclWindow_t w;
  CHECK(ncclCommWindowRegister(comm, buf, 1 << 20, &w, NCCL_WIN_COLL_SYMMETRIC));
  ncclDevComm dc;
  CHECK(devCommCreate(comm, &dc));
  int bad = 0;
  if (rank != 0) {
    auto t0 = std::chrono::steady_clock::now();
    devapiKernel<<<BLOCKS, THREADS>>>(w, w, w, 1024, 16, dc, llOut, 0);
    if (useAbort) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      if (cudaStreamQuery(0) != cudaErrorNotReady) {
        fprintf(stderr, "rank %d: the kernel did not wait for rank 0\n", rank);
        bad = 1;
      }
      CHECK(ncclCommAbort(comm)); /* must return: the kernel watches the abort flag */
    } else {
      CHECK(cudaDeviceSynchronize());
      ncclResult_t async;
      CHECK(ncclCommGetAsyncError(comm, &async));
      if (async != ncclSystemError) {
        fprintf(stderr, "rank %d: async error %d after a timed-out barrier, want ncclSystemError\n", rank, (int)async);
        bad = 1;
      }
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 60) {
      fprintf(stderr, "rank %d: the waiting kernel took %.1f s to come back\n", rank, s);
      bad = 1;
    }
    if (!bad) printf("rank %d: stuck kernel came back after %.1f s (%s)\n", rank, s, useAbort ? "abort" : "timeout");
    if (useAbort) return bad;
  }
  CHECK(ncclDevCommDestroy(comm, &dc));
  CHECK(ncclCommWindowDeregister(comm, w));
  CHECK(ncclCommDestroy(comm));
  return bad;
}

/* Every rank a host of its own: the LSA team is the rank alone, GIN goes
 * through the proxy. */
static int runHosts(int rank, int n, ncclUniqueId id, int iters) {
  CHECK(cudaSetDevice(rank));
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, n, id, rank));
  ncclTeam_t lsa = ncclTeamLsa(comm), rail = ncclTeamRail(comm);
  if (lsa.nRanks != 1 || rail.nRanks != n || rail.rank != rank) {
    fprintf(stderr, "rank %d: lsa team %d, rail team %d/%d\n", rank, lsa.nRanks, rail.rank, rail.nRanks);
    return 1;
  }
  int bad = runComm(rank, n, comm, iters);
  if (!bad) printf("rank %d: hosts of one rank: GIN through the proxy, %d iterations checked\n", rank, iters);
  return bad;
}

int main(int argc, char** argv) {
  int rank = -1;
  int n = argc > 1 ? atoi(argv[1]) : 2, iters = argc > 2 ? atoi(argv[2]) : 20;
  const char* mode = argc > 3 ? argv[3] : "check";
  if (n < 1 || n > 64) return 2;
  if (strcmp(mode, "timeout") == 0) setenv("ANYCCL_DEV_TIMEOUT", "2", 1);
  if (strcmp(mode, "abort") == 0) setenv("ANYCCL_DEV_TIMEOUT", "0", 1);
  ncclUniqueId id;
  if (strcmp(mode, "hosts-rank") == 0 && argc > 5) { /* a rank of "hosts", with its own NCCL_HOSTID */
    rank = atoi(argv[4]);
    for (size_t i = 0; i < sizeof(id); i++) {
      unsigned v = 0;
      sscanf(argv[5] + 2 * i, "%2x", &v);
      id.internal[i] = (char)v;
    }
    int res = runHosts(rank, n, id, iters);
    fflush(stdout);
    return res;
  }
  CHECK(ncclGetUniqueId(&id));
  for (int r = 0; r < n; r++)
    if (fork() == 0) {
      if (strcmp(mode, "hosts") == 0) { /* parameters are read once: a fresh process per host id */
        char host[32], rs[16], idHex[2 * sizeof(id) + 1];
        snprintf(host, sizeof(host), "devapi-host-%d", r);
        setenv("NCCL_HOSTID", host, 1);
        snprintf(rs, sizeof(rs), "%d", r);
        for (size_t i = 0; i < sizeof(id); i++) snprintf(idHex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
        execl("/proc/self/exe", argv[0], argv[1], argv[2], "hosts-rank", rs, idHex, (char*)NULL);
        _exit(3);
      }
      int res = strcmp(mode, "check") == 0 ? runRank(r, n, id, iters) : runStuck(r, n, id, strcmp(mode, "abort") == 0);
      fflush(stdout);
      _exit(res);
    }
  int fails = 0;
  for (int r = 0; r < n; r++) {
    int st = 0;
    wait(&st);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fails++;
  }
  printf("%s: %d processes, %d failed\n", fails ? "FAIL" : "ok", n, fails);
  return fails ? 1 : 0;
}
