// faithful codegen check: exec.cu's own redLoop / copyBytes per block vs a lean loop (no step protocol)
#include "../../../src/cuda/exec.cuh"
#include <cstdio>
#include <cstdlib>
#include "check.h"
template <int MODE>
__global__ void __launch_bounds__(ACU_THREADS, 1) kr(const char* a, const char* b, char* d, size_t per, size_t chunk, int type) {
  const char* A = a + per * blockIdx.x; const char* Bp = b + per * blockIdx.x; char* D = d + per * blockIdx.x;
  for (size_t off = 0; off < per; off += chunk) {
    if (MODE == 0) {
      RedArgs r; r.n = chunk / 4; r.in0 = A + off; r.in1 = Bp + off; r.out0 = D + off; r.out1 = nullptr; r.slot0 = true;
      r.pm0 = r.pm1 = r.pd = false; r.scalar = 0; r.divisor = 0;
      if (type == 0) r.n = chunk; else if (type == 9) r.n = chunk / 2;
      byType<RedK>(type, 0, r);
    } else if (MODE == 1) {
      copyBytes(chunk, A + off, true, D + off, nullptr);
    } else if (MODE == 3) {
      opVecs<7, 0, 4, false>((const uint4*)(A + off), (const uint4*)(Bp + off), (uint4*)(D + off), nullptr, chunk / 16);
    } else if (MODE == 4) {
      opVecs<7, 0, 8, false>((const uint4*)(A + off), (const uint4*)(Bp + off), (uint4*)(D + off), nullptr, chunk / 16);
    } else {
      const uint4* v0 = (const uint4*)(A + off); const uint4* v1 = (const uint4*)(Bp + off); uint4* w = (uint4*)(D + off);
      uint32_t nv = chunk / 16;
      for (uint32_t i = threadIdx.x; i < nv; i += blockDim.x * 4) {
        uint4 x[4], y[4];
#pragma unroll
        for (int u = 0; u < 4; u++) { uint32_t j = i + u * blockDim.x; if (j < nv) { x[u] = __ldcg(v0 + j); y[u] = v1[j]; } }
#pragma unroll
        for (int u = 0; u < 4; u++) { uint32_t j = i + u * blockDim.x; if (j < nv) { uint4 z; packedSum<7>(x[u], y[u], z); w[j] = z; } }
      }
    }
    __syncthreads();
  }
}
template <int MODE> float run(const char* a, const char* b, char* d, size_t bytes, int blocks, size_t chunk, int type) {
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  size_t per = bytes / blocks / chunk * chunk;
  kr<MODE><<<blocks, ACU_THREADS>>>(a, b, d, per, chunk, type);
  CK(cudaEventRecord(e0));
  int it = 4;
  for (int w = 0; w < it; w++) kr<MODE><<<blocks, ACU_THREADS>>>(a, b, d, per, chunk, type);
  CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaGetLastError());
  float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
  return (float)(per * blocks * (double)it / (ms * 1e-3) / 1e9);
}
int main() {
  size_t bytes = (size_t)256 << 20;
  char *a, *b, *dr;
  CK(cudaSetDevice(1)); CK(cudaMalloc(&dr, bytes)); CK(cudaDeviceEnablePeerAccess(0, 0));
  CK(cudaSetDevice(0)); CK(cudaDeviceEnablePeerAccess(1, 0));
  CK(cudaMalloc(&a, bytes)); CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 0, bytes)); CK(cudaMemset(b, 0, bytes));
  int bl[] = {1, 8, 32};
  size_t ch[] = {128 << 10, 512 << 10};
  printf("%-6s %-6s %9s %9s %9s %9s %9s %9s %9s\n", "blocks", "chunk", "redF", "redI8", "redBF", "copy", "lean", "sumU4", "sumU8");
  for (int bi = 0; bi < 3; bi++) for (int c = 0; c < 2; c++) {
    int B = bl[bi];
    printf("%-6d %-6zu %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", B, ch[c] >> 10, run<0>(a, b, dr, bytes, B, ch[c], 7), run<0>(a, b, dr, bytes, B, ch[c], 0),
           run<0>(a, b, dr, bytes, B, ch[c], 9), run<1>(a, b, dr, bytes, B, ch[c], 7), run<2>(a, b, dr, bytes, B, ch[c], 7),
           run<3>(a, b, dr, bytes, B, ch[c], 7), run<4>(a, b, dr, bytes, B, ch[c], 7));
  }
  return 0;
}
