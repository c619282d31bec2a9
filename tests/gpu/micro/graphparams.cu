// Device time per kernel for back-to-back launches of a short kernel whose parameters are 16 B to 32 KB:
// plain stream launches against the same launches captured into a CUDA graph and replayed.
//   nvcc -O2 -arch=sm_90 -std=c++17 -o graphparams graphparams.cu && ./graphparams
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include "check.h"
template <int B> struct P { unsigned char b[B]; };
template <int B> __global__ void k(const __grid_constant__ P<B> p, int* out) {
  // a short kernel that reads its parameters (as ours does) and spins ~2 us
  long long t0 = clock64();
  int s = 0;
  for (int i = threadIdx.x; i < B; i += blockDim.x) s += p.b[i];
  while (clock64() - t0 < 4000) {}
  if (s == 12345) out[0] = s;
}
template <int B> void row(int blocks, cudaStream_t st, int* out) {
  static P<B> p;
  const int N = 20;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  for (int w = 0; w < 5; w++) k<B><<<blocks, 512, 0, st>>>(p, out);
  CK(cudaEventRecord(e0, st));
  for (int i = 0; i < N; i++) k<B><<<blocks, 512, 0, st>>>(p, out);
  CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
  float msS; CK(cudaEventElapsedTime(&msS, e0, e1));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < N; i++) k<B><<<blocks, 512, 0, st>>>(p, out);
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, st)); CK(cudaStreamSynchronize(st));
  CK(cudaEventRecord(e0, st));
  for (int r = 0; r < 5; r++) CK(cudaGraphLaunch(ge, st));
  CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
  float msG; CK(cudaEventElapsedTime(&msG, e0, e1));
  printf("params %6d B, %3d blocks: stream %6.2f us/kernel, graph %6.2f us/kernel\n", B, blocks, msS * 1e3 / N, msG * 1e3 / (5 * N));
  CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
}
int main() {
  cudaStream_t st; int* out;
  CK(cudaSetDevice(0)); CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)); CK(cudaMalloc(&out, 4));
  for (int blocks : {1, 32, 128}) {
    row<16>(blocks, st, out); row<1024>(blocks, st, out); row<4000>(blocks, st, out); row<8000>(blocks, st, out); row<32000>(blocks, st, out);
  }
  return 0;
}
