// per-block NVLink write/read throughput: how fast can B blocks of T threads move data GPU0 -> GPU1?
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include "check.h"
template <int U, int MODE>
__global__ void __launch_bounds__(512, 1) k(const uint4* __restrict__ a, const uint4* __restrict__ b, uint4* __restrict__ d, size_t nv) {
  size_t per = nv / gridDim.x;
  const uint4* A = a + per * blockIdx.x; const uint4* Bp = b + per * blockIdx.x; uint4* D = d + per * blockIdx.x;
  for (size_t i = threadIdx.x; i < per; i += (size_t)blockDim.x * U) {
    uint4 x[U], y[U];
#pragma unroll
    for (int u = 0; u < U; u++) { size_t j = i + (size_t)u * blockDim.x; if (j < per) { x[u] = __ldcg(A + j); if (MODE == 1) y[u] = Bp[j]; } }
#pragma unroll
    for (int u = 0; u < U; u++) { size_t j = i + (size_t)u * blockDim.x; if (j < per) {
      uint4 z = x[u];
      if (MODE == 1) { float* zf = (float*)&z; const float* yf = (const float*)&y[u]; zf[0] += yf[0]; zf[1] += yf[1]; zf[2] += yf[2]; zf[3] += yf[3]; }
      D[j] = z; } }
  }
}
template <int U, int MODE> float run(const uint4* a, const uint4* b, uint4* d, size_t nv, int blocks, int threads) {
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  for (int w = 0; w < 2; w++) k<U, MODE><<<blocks, threads>>>(a, b, d, nv);
  CK(cudaEventRecord(e0));
  int it = 5;
  for (int w = 0; w < it; w++) k<U, MODE><<<blocks, threads>>>(a, b, d, nv);
  CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
  float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
  return (float)(nv * 16.0 * it / (ms * 1e-3) / 1e9);
}
int main(int argc, char** argv) {
  size_t bytes = (size_t)256 << 20; size_t nv = bytes / 16;
  uint4 *a, *b, *dl, *dr, *ar;
  CK(cudaSetDevice(1)); CK(cudaMalloc(&dr, bytes)); CK(cudaMalloc(&ar, bytes)); CK(cudaDeviceEnablePeerAccess(0, 0));
  CK(cudaSetDevice(0)); CK(cudaDeviceEnablePeerAccess(1, 0));
  CK(cudaMalloc(&a, bytes)); CK(cudaMalloc(&b, bytes)); CK(cudaMalloc(&dl, bytes));
  CK(cudaMemset(a, 1, bytes)); CK(cudaMemset(b, 1, bytes));
  int bl[] = {1, 2, 4, 8, 16, 32, 64, 128};
  printf("%-6s %9s %9s %9s %9s %9s %9s %9s\n", "blocks", "wrU4", "wrU8", "redU4", "redU8", "rdU4", "localU4", "wr256t");
  for (int bi = 0; bi < 8; bi++) {
    int B = bl[bi];
    printf("%-6d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", B,
      run<4, 0>(a, b, dr, nv, B, 512), run<8, 0>(a, b, dr, nv, B, 512),
      run<4, 1>(a, b, dr, nv, B, 512), run<8, 1>(a, b, dr, nv, B, 512),
      run<4, 0>(ar, b, dl, nv, B, 512), run<4, 0>(a, b, dl, nv, B, 512), run<4, 0>(a, b, dr, nv, B, 256));
  }
  return 0;
}
