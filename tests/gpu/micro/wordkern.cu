// The cost of a kernel that reads and writes back one word of device memory (a device-API
// barrier session's count: read at the start, stored at the end), by how the memory was
// allocated: cudaMalloc; cuMemCreate mapped for this GPU only; cuMemCreate mapped for every
// GPU (as anyccl's ncclMemAlloc and resource buffers are); the same memory through a second
// mapping (a flat view, as the device API's windows are read); then all of it again after
// cudaDeviceEnablePeerAccess from GPU 0 to GPU 1 (anyccl enables it between the GPUs of a
// process; NCCL's cuMem path does not). No NCCL; GPU 0 runs the kernels.
// Each cell: a CUDA graph of 100 kernels (16 blocks of 512 threads), the median of 7 launches,
// in us a kernel.
//   nvcc -O3 -arch=sm_90 wordkern.cu -lcuda -o wordkern && ./wordkern
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include "check.h"

#define KERNELS 100

// mode 0: empty; 1: every thread loads the word (weak), thread 0 stores it + 1;
// 2: the same with .gpu-strong accesses
__global__ void word(unsigned* w, int mode) {
  if (mode == 0) return;
  unsigned* p = w + blockIdx.x;
  unsigned v;
  if (mode == 1) v = *(volatile unsigned*)p;
  else asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p));
  if (threadIdx.x == 0) {
    if (mode == 1) *(volatile unsigned*)p = v + 1;
    else asm volatile("st.relaxed.gpu.u32 [%0], %1;" ::"l"(p), "r"(v + 1));
  }
}

static float timeIt(unsigned* w, int mode, cudaStream_t st) {
  cudaGraph_t gr;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < KERNELS; k++) word<<<16, 512, 0, st>>>(w, mode);
  CK(cudaStreamEndCapture(st, &gr));
  CK(cudaGraphInstantiate(&ge, gr, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float t[8];
  for (int rep = 0; rep < 8; rep++) {
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaEventElapsedTime(&t[rep], e0, e1));
  }
  std::sort(t + 1, t + 8);
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(gr));
  return t[4] * 1e3f / KERNELS;
}

int main() {
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const size_t size = 2 << 20;
  unsigned* bufs[4];
  const char* names[4] = {"cudaMalloc", "cuMem, this GPU", "cuMem, all GPUs", "cuMem, 2nd map"};
  CK(cudaMalloc(&bufs[0], size));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemAccessDesc acc[8] = {};
  for (int d = 0; d < 8; d++) {
    acc[d].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc[d].location.id = d;
    acc[d].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  for (int b = 1; b <= 2; b++) {
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    DK(cuMemCreate(&h, size, &prop, 0));
    DK(cuMemAddressReserve(&va, size, size, 0, 0));
    DK(cuMemMap(va, size, 0, h, 0));
    DK(cuMemSetAccess(va, size, acc, b == 1 ? 1 : std::min(n, 8)));
    bufs[b] = (unsigned*)va;
    if (b == 2) { // a second mapping of the same memory, 4 GiB-aligned
      CUdeviceptr va2;
      DK(cuMemAddressReserve(&va2, 1ull << 32, 1ull << 32, 0, 0));
      DK(cuMemMap(va2, size, 0, h, 0));
      DK(cuMemSetAccess(va2, size, acc, 1));
      bufs[3] = (unsigned*)va2;
    }
  }
  for (int b = 0; b < 4; b++) CK(cudaMemset(bufs[b], 0, 4096));
  printf("wordkern: us a kernel (graphs of %d, 16 x 512 threads)\n%-18s %8s %8s %8s\n", KERNELS, "memory",
         "empty", "weak", "strong");
  for (int peer = 0; peer < (n > 1 ? 2 : 1); peer++) {
    if (peer) {
      CK(cudaDeviceEnablePeerAccess(1, 0));
      printf("(peer access to GPU 1 enabled)\n");
    }
    for (int rep = 0; rep < 2; rep++)
      for (int b = 0; b < 4; b++)
        printf("%-18s %8.3f %8.3f %8.3f\n", names[b], timeIt(bufs[b], 0, st), timeIt(bufs[b], 1, st),
               timeIt(bufs[b], 2, st));
  }
  return 0;
}
