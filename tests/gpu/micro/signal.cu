// Ping-pong between two GPUs through host proxy threads (what a port channel's
// signal does): GPU a's one-thread kernel posts a trigger word in host-mapped
// memory; proxy thread a sees it and raises GPU b's flag; GPU b answers the
// same way. Time per one-way hop, for three ways of raising the flag:
//   copy       cudaMemcpyAsync of the pinned value into the peer GPU's flag
//              (device memory), then cudaEventRecord (the port proxy today)
//   copy-noev  the same without the event
//   hoststore  a CPU store into a host-mapped flag the peer kernel polls
//   nvcc -O2 -arch=sm_90 -std=c++17 -o signal signal.cu -lpthread && ./signal
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <cuda_runtime.h>
#include "check.h"

__global__ void pingpong(volatile unsigned long long* trig, volatile unsigned long long* flag, int n, int first) {
  for (int i = 1; i <= n; i++) {
    if (!first || i > 1) while (*flag < (unsigned long long)(first ? i - 1 : i)) {}
    *trig = i;
    __threadfence_system();
  }
  if (first) while (*flag < (unsigned long long)n) {}
}

struct Side {
  int dev;
  unsigned long long *trigH, *trigD;   // host-mapped trigger
  unsigned long long *flagDev;         // flag in device memory
  unsigned long long *flagH, *flagHD;  // host-mapped flag
  unsigned long long* val;             // pinned values
  cudaStream_t st;
  cudaEvent_t ev[64];
};

int main() {
  const int N = 2000;
  Side s[2];
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    cudaDeviceEnablePeerAccess(1 - d, 0);
    cudaGetLastError();
    s[d].dev = d;
    CK(cudaHostAlloc(&s[d].trigH, 8, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostGetDevicePointer(&s[d].trigD, s[d].trigH, 0));
    CK(cudaHostAlloc(&s[d].flagH, 8, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostGetDevicePointer(&s[d].flagHD, s[d].flagH, 0));
    CK(cudaMalloc(&s[d].flagDev, 8));
    CK(cudaHostAlloc(&s[d].val, 64 * 8, cudaHostAllocPortable));
    CK(cudaStreamCreateWithFlags(&s[d].st, cudaStreamNonBlocking));
    for (int i = 0; i < 64; i++) CK(cudaEventCreateWithFlags(&s[d].ev[i], cudaEventDisableTiming));
  }
  const char* names[3] = {"copy+event", "copy", "hoststore"};
  for (int mode = 0; mode < 3; mode++) {
    for (int rep = 0; rep < 3; rep++) {
      for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        *s[d].trigH = 0;
        *s[d].flagH = 0;
        CK(cudaMemset(s[d].flagDev, 0, 8));
        CK(cudaDeviceSynchronize());
      }
      std::atomic<int> go{0};
      auto proxy = [&](int d) {
        CK(cudaSetDevice(d));
        Side& me = s[d];
        Side& peer = s[1 - d];
        unsigned long long seen = 0;
        while (!go.load()) {}
        while (seen < (unsigned long long)N) {
          unsigned long long t = *(volatile unsigned long long*)me.trigH;
          if (t == seen) continue;
          seen = t;
          if (mode == 2) {
            *(volatile unsigned long long*)peer.flagH = seen;
          } else {
            unsigned long long* v = &me.val[seen % 64];
            *v = seen;
            CK(cudaMemcpyAsync(peer.flagDev, v, 8, cudaMemcpyHostToDevice, me.st));
            if (mode == 0) CK(cudaEventRecord(me.ev[seen % 64], me.st));
          }
        }
        CK(cudaStreamSynchronize(me.st));
      };
      for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        unsigned long long* f = mode == 2 ? s[d].flagHD : s[d].flagDev;
        pingpong<<<1, 1>>>(s[d].trigD, f, N, d == 0);
        CK(cudaGetLastError());
      }
      std::thread t0(proxy, 0), t1(proxy, 1);
      auto a = std::chrono::steady_clock::now();
      go = 1;
      t0.join();
      t1.join();
      for (int d = 0; d < 2; d++) { CK(cudaSetDevice(d)); CK(cudaDeviceSynchronize()); }
      auto b = std::chrono::steady_clock::now();
      double us = std::chrono::duration<double, std::micro>(b - a).count();
      printf("%-12s rep %d: %.2f us per one-way hop (%d round trips)\n", names[mode], rep, us / (2.0 * N), N);
    }
  }
  return 0;
}
