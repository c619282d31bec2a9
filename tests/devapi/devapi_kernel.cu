/* Kernels in the style of nccl-tests 2.19's device implementations, built
 * by header_test.sh with nvcc against anyccl's include/ only: the headers
 * must compile, and they must be anyccl's (NVIDIA's nccl_device.h may sit
 * in the CUDA toolkit's include directory). */
#include "nccl.h"
#include "nccl_device.h"

#ifndef ANYCCL_NCCL_DEVICE_API
#error "nccl_device.h came from elsewhere than anyccl's include directory"
#endif
#ifndef ANYCCL_VERSION_STRING
#error "nccl.h came from elsewhere than anyccl's include directory"
#endif

template <typename T>
__global__ void lsaAllReduce(ncclWindow_t sendwin, size_t sendoffset, ncclWindow_t recvwin, size_t recvoffset,
                             size_t count, struct ncclDevComm devComm) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), devComm, ncclTeamLsa(devComm), devComm.lsaBarrier, blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
  const int rank = devComm.rank, nRanks = devComm.nRanks;
  const int tid = threadIdx.x + blockDim.x * (rank + blockIdx.x * nRanks);
  const int nthreads = blockDim.x * gridDim.x * nRanks;
  for (size_t o = tid; o < count; o += nthreads) {
    T v = T{0};
    for (int peer = 0; peer < nRanks; peer++) v += ((T*)ncclGetLsaPointer(sendwin, sendoffset, peer))[o];
    for (int peer = 0; peer < nRanks; peer++) ((T*)ncclGetLsaPointer(recvwin, recvoffset, peer))[o] = v;
  }
  bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

template <typename T>
__global__ void ginAlltoAll(ncclWindow_t sendwin, size_t sendoffset, ncclWindow_t recvwin, size_t recvoffset,
                            size_t count, struct ncclDevComm devComm) {
  unsigned int sig = blockIdx.x;
  ncclGin gin{devComm, 0};
  uint64_t base = gin.readSignal(sig);
  ncclBarrierSession<ncclCoopCta> bar{ncclCoopCta(), ncclTeamTagWorld(), gin, blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire, ncclGinFenceLevel::Relaxed);
  const size_t size = count * sizeof(T);
  ncclTeam world = ncclTeamWorld(devComm), lsa = ncclTeamLsa(devComm);
  for (int r = threadIdx.x; r < devComm.nRanks; r += blockDim.x)
    gin.put(world, r, recvwin, recvoffset + devComm.rank * size, sendwin, sendoffset + r * size, size,
            ncclGin_SignalInc{sig}, ncclGin_CounterInc{0});
  T* local = (T*)ncclGetLocalPointer(sendwin, sendoffset);
  T* peer0 = (T*)ncclGetPeerPointer(recvwin, recvoffset, lsa, 0);
  if (peer0 && threadIdx.x == 0) peer0[0] = local[0];
  gin.waitSignal(ncclCoopCta(), sig, base + devComm.nRanks);
  gin.waitCounter(ncclCoopCta(), 0, 1);
  gin.flush(ncclCoopCta());
  bar.sync(ncclCoopCta(), cuda::memory_order_release, ncclGinFenceLevel::Relaxed);
}

/* The rest of GIN's calls, each of which takes the proxy path for a rank of
 * another host: a CTA-wide put with an added signal and a counter, a put of
 * a value, a bare signal, the shadow waits, resets, the rail barrier. */
__global__ void ginRemoteCalls(ncclWindow_t win, struct ncclDevComm devComm, uint64_t* out) {
  ncclGin gin{devComm, 0};
  ncclTeam world = ncclTeamWorld(devComm), rail = ncclTeamRail(devComm);
  int peer = (devComm.rank + devComm.lsaSize) % devComm.nRanks;
  gin.put(world, peer, win, 0, win, 64, 4096, ncclGin_SignalAdd{1, 3}, ncclGin_CounterInc{1}, ncclCoopCta());
  gin.putValue(world, peer, win, 8, (uint32_t)devComm.rank, ncclGin_SignalInc{0}, ncclCoopCta());
  gin.signal(world, peer, ncclGin_SignalInc{0}, ncclCoopCta());
  gin.waitCounter(ncclCoopCta(), 1, 1);
  gin.flush(ncclCoopCta());
  gin.waitSignalMeetShadow(ncclCoopCta(), 0);
  uint64_t before, delta;
  gin.waitSignalFollowShadow(ncclCoopCta(), 1, (uint64_t)3, &before, &delta);
  gin.increaseSignalShadow(0, 2);
  ncclBarrierSession<ncclCoopCta> bar{ncclCoopCta(), ncclTeamTagRail(), gin, 0};
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel, ncclGinFenceLevel::Relaxed);
  if (threadIdx.x == 0) {
    out[0] = gin.readSignal(0) + gin.readCounter(1) + before + delta + rail.nRanks;
    gin.resetSignal(0);
    gin.resetCounter(1);
  }
}

__global__ void llExchange(struct ncclDevComm devComm, float* out) {
  ncclLLA2ASession<ncclCoopCta> ll{ncclCoopCta(), devComm, ncclTeamLsa(devComm), devComm.lsaLLA2A, blockIdx.x, 32};
  for (int p = threadIdx.x; p < devComm.lsaSize; p += blockDim.x) ll.send(p, devComm.lsaRank, 1.0f * devComm.rank);
  float sum = 0;
  for (int p = threadIdx.x; p < devComm.lsaSize; p += blockDim.x) sum += ll.recv<float>(p);
  ll.endEpoch(ncclCoopCta());
  ncclSymPtr<float> sp(devComm.resourceWindow, 0);
  out[threadIdx.x] = sum + (sp + 1).localPtr()[0] * 0;
}

template __global__ void lsaAllReduce<float>(ncclWindow_t, size_t, ncclWindow_t, size_t, size_t, ncclDevComm);
template __global__ void lsaAllReduce<half>(ncclWindow_t, size_t, ncclWindow_t, size_t, size_t, ncclDevComm);
template __global__ void ginAlltoAll<int>(ncclWindow_t, size_t, ncclWindow_t, size_t, size_t, ncclDevComm);
