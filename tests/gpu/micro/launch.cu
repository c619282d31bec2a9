// Host cost of kernel launches on N GPUs from one thread (round robin, as a
// group of N communicators launches today) against one thread per GPU, for
// kernel parameter sizes of 16 B to 32 KB; plus the per-launch side calls
// (event record, capture query). Prints us per launch (serial) and us per
// round of N launches (serial and threaded).
//   nvcc -O2 -arch=sm_90 -o launch launch.cu -lpthread && ./launch [N]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <cuda_runtime.h>
#include "check.h"
template <int B> struct P { unsigned char b[B]; };
template <int B> __global__ void k(P<B> p) { if (p.b[threadIdx.x % B] == 123 && threadIdx.x == 9999) printf("x"); }
static double now() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
static int N;
static cudaStream_t st[16];
static cudaEvent_t ev[16];
template <int B> static void launch(int d, int extras) {
  static thread_local P<B> p;
  k<B><<<32, 512, 0, st[d]>>>(p);
  if (extras) {
    cudaStreamCaptureStatus cs;
    cudaStreamIsCapturing(st[d], &cs);
    cudaEventRecord(ev[d], st[d]);
  }
}
template <int B> static double serial(int rounds, int extras) {
  double t0 = 0;
  for (int r = -50; r < rounds; r++) {
    if (r == 0) t0 = now();
    for (int d = 0; d < N; d++) { CK(cudaSetDevice(d)); launch<B>(d, extras); }
    if (r % 64 == 63) for (int d = 0; d < N; d++) { cudaSetDevice(d); cudaStreamSynchronize(st[d]); }
  }
  double t = (now() - t0) / rounds;
  for (int d = 0; d < N; d++) { cudaSetDevice(d); CK(cudaStreamSynchronize(st[d])); }
  return t;
}
// one thread per GPU; rounds start together (a spinning barrier), as a group's would
template <int B> static double threaded(int rounds, int extras) {
  std::atomic<int> go{-51}, done{0};
  std::vector<std::thread> th;
  for (int d = 1; d < N; d++)
    th.emplace_back([&, d] {
      CK(cudaSetDevice(d));
      for (int r = -50; r < rounds; r++) {
        while (go.load(std::memory_order_acquire) < r) {}
        launch<B>(d, extras);
        if (r % 64 == 63) cudaStreamSynchronize(st[d]);
        done.fetch_add(1, std::memory_order_acq_rel);
      }
    });
  CK(cudaSetDevice(0));
  double t0 = 0;
  for (int r = -50; r < rounds; r++) {
    if (r == 0) t0 = now();
    done.store(0, std::memory_order_relaxed);
    go.store(r, std::memory_order_release);
    launch<B>(0, extras);
    if (r % 64 == 63) cudaStreamSynchronize(st[0]);
    while (done.load(std::memory_order_acquire) < N - 1) {}
  }
  double t = (now() - t0) / rounds;
  for (auto& x : th) x.join();
  for (int d = 0; d < N; d++) { cudaSetDevice(d); CK(cudaStreamSynchronize(st[d])); }
  return t;
}
template <int B> static void row(int rounds) {
  double s0 = serial<B>(rounds, 0), s1 = serial<B>(rounds, 1), t0 = threaded<B>(rounds, 0), t1 = threaded<B>(rounds, 1);
  printf("launch params %6d B  serial %6.2f us/round (%5.2f/launch), +event %6.2f   threads %6.2f, +event %6.2f\n", B, s0,
         s0 / N, s1, t0, t1);
}
int main(int argc, char** argv) {
  int n;
  CK(cudaGetDeviceCount(&n));
  N = argc > 1 ? atoi(argv[1]) : n;
  if (N > n) N = n;
  for (int d = 0; d < N; d++) {
    CK(cudaSetDevice(d));
    CK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ev[d], cudaEventDisableTiming));
  }
  printf("%d GPUs\n", N);
  int rounds = 2000;
  row<16>(rounds);
  row<1024>(rounds);
  row<4000>(rounds);
  row<32000>(rounds);
  return 0;
}
