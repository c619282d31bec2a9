// The time of NCCL 2.28's LSA barrier alone (ncclLsaBarrierSession::sync, the barrier nccl-tests'
// -D 1 and -D 2 all_reduce kernels open and close with), one block per GPU, one process driving n
// GPUs. Build it once against each library's headers and run it against that library, on the same
// host in the same call, to compare the device APIs underneath:
//   nvcc -O3 -arch=sm_90 -std=c++17 -I<nccl.h and nccl_device.h> lsabar.cu -L<lib> -lnccl -o lsabar
//   LD_LIBRARY_PATH=<lib> ./lsabar [ngpus] [iterations]
// Prints, per memory order, the time per barrier in us (a kernel of `iterations` barriers, timed
// with CUDA events on GPU 0; the median of 5 launches).
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));         \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)
#define NK(x)                                                                   \
  do {                                                                          \
    ncclResult_t r_ = (x);                                                      \
    if (r_ != ncclSuccess) {                                                    \
      printf("%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r_));         \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)
#define MAXG 8

// order 0: relaxed; 1: acquire then release, as nccl-tests' kernels use them
__global__ void bars(ncclDevComm dc, int iters, int order) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x};
  for (int i = 0; i < iters; i++) {
    if (order) {
      bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
      bar.sync(ncclCoopCta(), cuda::memory_order_release);
    } else {
      bar.sync(ncclCoopCta(), cuda::memory_order_relaxed);
      bar.sync(ncclCoopCta(), cuda::memory_order_relaxed);
    }
  }
}

int main(int argc, char** argv) {
  int n = 0, iters = argc > 2 ? atoi(argv[2]) : 2000;
  CK(cudaGetDeviceCount(&n));
  if (argc > 1) n = std::min(n, atoi(argv[1]));
  if (n < 2 || n > MAXG || iters < 1) {
    printf("lsabar: 2-%d GPUs and at least 1 iteration\n", MAXG);
    return 2;
  }
  ncclComm_t comms[MAXG];
  ncclDevComm dev[MAXG];
  cudaStream_t st[MAXG];
  NK(ncclCommInitAll(comms, n, nullptr));
  ncclDevCommRequirements reqs = {};
  reqs.lsaBarrierCount = 1;
  NK(ncclGroupStart());
  for (int g = 0; g < n; g++) NK(ncclDevCommCreate(comms[g], &reqs, &dev[g]));
  NK(ncclGroupEnd());
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(g));
    CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
  }
  cudaEvent_t e0, e1;
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int order = 0; order < 2; order++) {
    float t[6];
    for (int rep = 0; rep < 6; rep++) { // the first is a warm-up
      CK(cudaSetDevice(0));
      CK(cudaEventRecord(e0, st[0]));
      for (int g = 0; g < n; g++) {
        CK(cudaSetDevice(g));
        bars<<<1, 512, 0, st[g]>>>(dev[g], iters, order);
        CK(cudaGetLastError());
      }
      CK(cudaSetDevice(0));
      CK(cudaEventRecord(e1, st[0]));
      for (int g = 0; g < n; g++) CK(cudaStreamSynchronize(st[g]));
      CK(cudaEventElapsedTime(&t[rep], e0, e1));
    }
    std::sort(t + 1, t + 6);
    printf("lsabar: %d GPUs, %s: %.3f us a barrier (median of 5 kernels of %d)\n", n,
           order ? "acquire/release" : "relaxed", t[3] * 1e3 / (2.0 * iters), 2 * iters);
  }
  for (int g = 0; g < n; g++) NK(ncclDevCommDestroy(comms[g], &dev[g]));
  for (int g = 0; g < n; g++) NK(ncclCommDestroy(comms[g]));
  return 0;
}
