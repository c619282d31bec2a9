// Does the way peers' memory is mapped change a load/store all-reduce kernel's time?
// One process drives n GPUs. The same one-shot all-reduce kernel (a flag barrier among the GPUs,
// 16-byte loads from every GPU's input, sums, 16-byte stores into every GPU's output, a second
// barrier; the grid-stride layout of nccl-tests' -D 2 kernel) runs over two mappings:
//   malloc: cudaMalloc'd buffers, peers reached through cudaDeviceEnablePeerAccess (anyccl's windows
//           in one process);
//   cumem:  cuMemCreate'd buffers, every GPU's allocation mapped into one virtual range per GPU at a
//           fixed stride (NCCL's symmetric windows).
// The pointers travel in the kernel's parameters, so only the mapping differs. Time per call, us.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o lsamap lsamap.cu -lcuda && ./lsamap [ngpus]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include "check.h"
#define MAXG 8
#define BLOCKS 16
#define THREADS 512
#define UNROLL 8

struct Ptrs { float4* in[MAXG]; float4* out[MAXG]; unsigned* flags[MAXG]; };

__device__ __forceinline__ void stRel(unsigned* p, unsigned v) { asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ unsigned ldAcq(const unsigned* p) { unsigned v; asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }

// flags of GPU g: [BLOCKS][n] words; block b of GPU r writes epoch into flags[q][b*n + r] of every q
__device__ void barrier(const Ptrs& p, int rank, int n, unsigned epoch) {
  __syncthreads();
  if (threadIdx.x < n) stRel(p.flags[threadIdx.x] + blockIdx.x * n + rank, epoch);
  if (threadIdx.x < n) { const unsigned* f = p.flags[rank] + blockIdx.x * n + threadIdx.x; while ((int)(ldAcq(f) - epoch) < 0) {} }
  __syncthreads();
}

__global__ void __launch_bounds__(THREADS, 1) allReduce(const __grid_constant__ Ptrs p, int rank, int n, size_t count4, unsigned epoch) {
  barrier(p, rank, n, 2 * epoch + 1);
  const size_t gtid = threadIdx.x + (size_t)blockDim.x * (rank + blockIdx.x * n);
  const size_t nthr = (size_t)blockDim.x * gridDim.x * n;
  const size_t warp = gtid / 32, lane = gtid % 32;
  for (size_t base = warp * 32 * UNROLL + lane; base < count4; base += nthr * UNROLL) {
    float4 v[UNROLL];
#pragma unroll
    for (int i = 0; i < UNROLL; i++) v[i] = make_float4(0, 0, 0, 0);
    for (int q = 0; q < n; q++) {
#pragma unroll
      for (int i = 0; i < UNROLL; i++) {
        size_t o = base + i * 32;
        if (o < count4) { float4 x = p.in[q][o]; v[i].x += x.x; v[i].y += x.y; v[i].z += x.z; v[i].w += x.w; }
      }
    }
    for (int q = 0; q < n; q++) {
#pragma unroll
      for (int i = 0; i < UNROLL; i++) { size_t o = base + i * 32; if (o < count4) p.out[q][o] = v[i]; }
    }
  }
  barrier(p, rank, n, 2 * epoch + 2);
}

static int n;
static Ptrs ptrs[MAXG]; // the pointers GPU g uses
static cudaStream_t st[MAXG];

static float timeIt(size_t bytes, int iters, unsigned* epoch) {
  size_t count4 = (bytes + 15) / 16;
  cudaEvent_t e0[MAXG], e1[MAXG];
  for (int g = 0; g < n; g++) { CK(cudaSetDevice(g)); CK(cudaEventCreate(&e0[g])); CK(cudaEventCreate(&e1[g])); }
  for (int it = -10; it < iters; it++) {
    if (it == 0) for (int g = 0; g < n; g++) { CK(cudaSetDevice(g)); CK(cudaEventRecord(e0[g], st[g])); }
    (*epoch)++;
    for (int g = 0; g < n; g++) { CK(cudaSetDevice(g)); allReduce<<<BLOCKS, THREADS, 0, st[g]>>>(ptrs[g], g, n, count4, *epoch); }
  }
  float worst = 0;
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(g)); CK(cudaEventRecord(e1[g], st[g])); CK(cudaEventSynchronize(e1[g]));
    float ms; CK(cudaEventElapsedTime(&ms, e0[g], e1[g]));
    if (ms > worst) worst = ms;
    CK(cudaEventDestroy(e0[g])); CK(cudaEventDestroy(e1[g]));
  }
  return worst * 1000.f / iters;
}

static bool check(size_t bytes) { // output of every GPU = n * (1 + 2 + ... ) pattern sum
  size_t cnt = bytes / 4;
  float* h = (float*)malloc(bytes);
  bool ok = true;
  for (int g = 0; g < n && ok; g++) {
    CK(cudaSetDevice(g)); CK(cudaMemcpy(h, ptrs[g].out[g], bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < cnt; i++) {
      float want = 0; for (int q = 0; q < n; q++) want += (float)((i + q) % 7);
      if (h[i] != want) { printf("mismatch gpu %d elt %zu: %g want %g\n", g, i, h[i], want); ok = false; break; }
    }
  }
  free(h);
  return ok;
}

static void fill(size_t maxBytes) {
  float* h = (float*)malloc(maxBytes);
  for (int g = 0; g < n; g++) {
    for (size_t i = 0; i < maxBytes / 4; i++) h[i] = (float)((i + g) % 7);
    CK(cudaSetDevice(g)); CK(cudaMemcpy(ptrs[g].in[g], h, maxBytes, cudaMemcpyHostToDevice));
  }
  free(h);
}

int main(int argc, char** argv) {
  CK(cudaGetDeviceCount(&n));
  if (argc > 1) n = atoi(argv[1]);
  if (n < 2 || n > MAXG) { printf("need 2-%d GPUs\n", MAXG); return 1; }
  const size_t maxBytes = 8 << 20, flagBytes = 64 << 10;
  const size_t sizes[] = {16, 4096, 65536, 262144, 1 << 20, 2 << 20, 8 << 20};
  const int nsz = sizeof(sizes) / sizeof(sizes[0]);
  float res[2][16];
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(g)); CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
    for (int q = 0; q < n; q++) if (q != g) { cudaError_t pe = cudaDeviceEnablePeerAccess(q, 0); if (pe != cudaErrorPeerAccessAlreadyEnabled) CK(pe); }
  }
  unsigned epoch = 0;
  // malloc mapping
  {
    char* buf[MAXG];
    for (int g = 0; g < n; g++) { CK(cudaSetDevice(g)); CK(cudaMalloc(&buf[g], 2 * maxBytes + flagBytes)); CK(cudaMemset(buf[g], 0, 2 * maxBytes + flagBytes)); }
    for (int g = 0; g < n; g++) for (int q = 0; q < n; q++) {
      ptrs[g].in[q] = (float4*)buf[q]; ptrs[g].out[q] = (float4*)(buf[q] + maxBytes); ptrs[g].flags[q] = (unsigned*)(buf[q] + 2 * maxBytes);
    }
    fill(maxBytes);
    for (int s = 0; s < nsz; s++) { res[0][s] = timeIt(sizes[s], 200, &epoch); if (sizes[s] >= 4096 && !check(sizes[s])) return 1; }
    for (int g = 0; g < n; g++) { CK(cudaSetDevice(g)); CK(cudaDeviceSynchronize()); CK(cudaFree(buf[g])); }
  }
  epoch = 0;
  // cuMem flat mapping: GPU g sees GPU q's allocation at base[g] + q * stride
  {
    CUmemGenericAllocationHandle h[MAXG];
    CUdeviceptr base[MAXG];
    size_t gran = 0, stride;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    DK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    stride = (2 * maxBytes + flagBytes + gran - 1) / gran * gran;
    for (int g = 0; g < n; g++) { prop.location.id = g; CK(cudaSetDevice(g)); DK(cuMemCreate(&h[g], stride, &prop, 0)); }
    for (int g = 0; g < n; g++) {
      CK(cudaSetDevice(g));
      DK(cuMemAddressReserve(&base[g], stride * n, gran, 0, 0));
      for (int q = 0; q < n; q++) DK(cuMemMap(base[g] + q * stride, stride, 0, h[q], 0));
      CUmemAccessDesc acc; memset(&acc, 0, sizeof(acc));
      acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE; acc.location.id = g; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      DK(cuMemSetAccess(base[g], stride * n, &acc, 1));
      CK(cudaMemset((void*)(base[g] + g * stride), 0, 2 * maxBytes + flagBytes));
    }
    for (int g = 0; g < n; g++) for (int q = 0; q < n; q++) {
      char* b = (char*)(base[g] + q * stride);
      ptrs[g].in[q] = (float4*)b; ptrs[g].out[q] = (float4*)(b + maxBytes); ptrs[g].flags[q] = (unsigned*)(b + 2 * maxBytes);
    }
    fill(maxBytes);
    for (int s = 0; s < nsz; s++) { res[1][s] = timeIt(sizes[s], 200, &epoch); if (sizes[s] >= 4096 && !check(sizes[s])) return 1; }
    for (int g = 0; g < n; g++) { CK(cudaSetDevice(g)); CK(cudaDeviceSynchronize()); }
  }
  printf("lsamap %d GPUs, %d blocks x %d threads, us per call (max over GPUs, 200 calls)\n", n, BLOCKS, THREADS);
  printf("%10s %10s %10s %8s\n", "bytes", "malloc", "cumem", "ratio");
  for (int s = 0; s < nsz; s++) printf("%10zu %10.2f %10.2f %8.3f\n", sizes[s], res[0][s], res[1][s], res[0][s] / res[1][s]);
  return 0;
}
