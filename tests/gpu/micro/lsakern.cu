// Where the time of a device-API all-reduce kernel goes: the shape of nccl-tests' -D 1 kernel
// (an LSA barrier, every rank sums its share from each peer's window and stores it into each
// peer's window, a barrier), in parts, built once against each library's headers and run on that
// library on the same host, to compare what lies under the program's own code. Columns, us a
// kernel:
//   launch   an empty kernel with the same parameters
//   session  the barrier session made and dropped (its count read and written back), no sync
//   sync     the session and one barrier
//   barrier  the session and its two barriers
//   data     the loads and stores only (no barrier: the GPUs run unsynchronised)
//   all      both (the whole kernel)
//   loop     us a barrier in one kernel of 1000 acquire/release pairs (the barrier alone, no
//            kernel boundary)
//   word     no device API: every thread loads one word (.relaxed.gpu), thread 0 stores it + 1,
//            in memory of cudaMalloc's (tests/gpu/micro/wordkern.cu's kernel, here with the
//            library's communicators and threads alive)
//   wordw    the same in the rank's send buffer (ncclMemAlloc's memory, registered as a window)
//   wordr    the same in the device communicator's resource buffer (where the barriers' words live;
//            the word stored back unchanged: the first words of the barrier buffer)
//   sess     the session made and dropped in a kernel of its own (against `session`: the code
//            around it in the all-modes kernel)
// Each cell: a CUDA graph of `kernels` kernels a GPU, one process driving n GPUs, timed with
// events on GPU 0, the median of 7 launches.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I<nccl.h and nccl_device.h> lsakern.cu -L<lib> -lnccl -o lsakern
//   LD_LIBRARY_PATH=<lib> ./lsakern [ngpus] [blocks] [barriers] [kernels]
// barriers: how many LSA barriers the device communicator holds (default: blocks; CTA b uses
// barrier b), to move the barriers' words within the resource buffer. kernels: a graph's
// kernels (default 20: the GPUs' graphs start apart by the host's launch calls, a skew that a
// longer graph spreads thinner). LSAKERN_PEER=1: enable peer access between every pair of the
// GPUs before the communicators exist (anyccl does it at init, NCCL's cuMem path does not).
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include "check.h"

#define MAXG 8
#define LOOP 1000

__global__ void part(ncclWindow_t sendwin, ncclWindow_t recvwin, size_t count, int mode, ncclDevComm dc) {
  if (mode == 0) return;
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x};
  if (mode & 1) bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
  if (mode & 2) {
    const int rank = dc.rank, nRanks = dc.nRanks;
    const int tid = threadIdx.x + blockDim.x * (rank + blockIdx.x * nRanks);
    const int nthreads = blockDim.x * gridDim.x * nRanks;
    for (size_t o = tid; o < count; o += nthreads) {
      float v = 0;
      for (int p = 0; p < nRanks; p++) v += ((float*)ncclGetLsaPointer(sendwin, 0, p))[o];
      for (int p = 0; p < nRanks; p++) ((float*)ncclGetLsaPointer(recvwin, 0, p))[o] = v;
    }
  }
  if (mode & 1) bar.sync(ncclCoopCta(), cuda::memory_order_release);
  if (mode & 8) bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
  if (mode & 16)
    for (int i = 0; i < LOOP; i++) {
      bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
      bar.sync(ncclCoopCta(), cuda::memory_order_release);
    }
}

__global__ void word(unsigned* w) {
  unsigned* p = w + blockIdx.x;
  unsigned v;
  asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p));
  if (threadIdx.x == 0) asm volatile("st.relaxed.gpu.u32 [%0], %1;" ::"l"(p), "r"(v + 1));
}

__global__ void wordres(ncclDevComm dc) {
  unsigned* p = (unsigned*)ncclGetResourceBufferLocalPointer(dc, dc.lsaBarrier.bufHandle) + blockIdx.x;
  unsigned v;
  asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p));
  if (threadIdx.x == 0) asm volatile("st.relaxed.gpu.u32 [%0], %1;" ::"l"(p), "r"(v));
}

__global__ void sess(ncclDevComm dc) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x};
}

static int threadCount() { // this process's threads (the libraries' helpers included)
  int k = 0;
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  for (struct dirent* e; (e = readdir(d)) != nullptr;) k += e->d_name[0] != '.';
  closedir(d);
  return k;
}

int main(int argc, char** argv) {
  int n = 0, blocks = argc > 2 ? atoi(argv[2]) : 16, nbar = argc > 3 ? atoi(argv[3]) : blocks;
  const int KERNELS = argc > 4 ? atoi(argv[4]) : 20;
  CK(cudaGetDeviceCount(&n));
  if (argc > 1) n = std::min(n, atoi(argv[1]));
  if (n < 2 || n > MAXG || blocks < 1 || blocks > 128 || nbar < blocks || KERNELS < 1) {
    printf("lsakern: 2-%d GPUs, 1-128 blocks, at least as many barriers, at least 1 kernel\n", MAXG);
    return 2;
  }
  const char* peerEnv = getenv("LSAKERN_PEER");
  if (peerEnv && atoi(peerEnv))
    for (int g = 0; g < n; g++) {
      CK(cudaSetDevice(g));
      for (int h = 0; h < n; h++) {
        if (h == g) continue;
        cudaError_t e = cudaDeviceEnablePeerAccess(h, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
        else CK(e);
      }
    }
  const size_t bytes = 1 << 21;
  ncclComm_t comms[MAXG];
  ncclDevComm dev[MAXG];
  cudaStream_t st[MAXG];
  void *sb[MAXG], *rb[MAXG], *wb[MAXG];
  ncclWindow_t sw[MAXG], rw[MAXG];
  NK(ncclCommInitAll(comms, n, nullptr));
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(g));
    NK(ncclMemAlloc(&sb[g], bytes));
    NK(ncclMemAlloc(&rb[g], bytes));
    CK(cudaMemset(sb[g], 0, bytes));
    CK(cudaMalloc(&wb[g], 4096));
    CK(cudaMemset(wb[g], 0, 4096));
    CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
  }
  NK(ncclGroupStart());
  for (int g = 0; g < n; g++) {
    NK(ncclCommWindowRegister(comms[g], sb[g], bytes, &sw[g], NCCL_WIN_COLL_SYMMETRIC));
    NK(ncclCommWindowRegister(comms[g], rb[g], bytes, &rw[g], NCCL_WIN_COLL_SYMMETRIC));
  }
  NK(ncclGroupEnd());
  ncclDevCommRequirements reqs = {};
  reqs.lsaBarrierCount = nbar;
  NK(ncclGroupStart());
  for (int g = 0; g < n; g++) NK(ncclDevCommCreate(comms[g], &reqs, &dev[g]));
  NK(ncclGroupEnd());
  cudaEvent_t e0, e1;
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const size_t counts[] = {2, 8192, 32768};
  printf("lsakern: %d GPUs, %d blocks, %d barriers, peer access %s, %d threads, us a kernel (median of 7 graphs "
         "of %d)\n", n, blocks, nbar, peerEnv && atoi(peerEnv) ? "enabled first" : "as the library leaves it",
         threadCount(), KERNELS);
  printf("%8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "bytes", "launch", "session", "sync", "barrier", "data",
         "all", "loop", "word", "wordw", "wordr", "sess");
  const int modes[] = {0, 4, 8, 1, 2, 3, 16, 100, 101, 102, 103}; // the columns (100-102: word kernels, 103: sess)
  const int NCOL = (int)(sizeof(modes) / sizeof(modes[0]));
  for (size_t count : counts) {
    float us[sizeof(modes) / sizeof(modes[0])];
    for (int col = 0; col < NCOL; col++) {
      const int mode = modes[col];
      cudaGraphExec_t ge[MAXG];
      for (int g = 0; g < n; g++) {
        CK(cudaSetDevice(g));
        cudaGraph_t gr;
        CK(cudaStreamBeginCapture(st[g], cudaStreamCaptureModeThreadLocal));
        for (int k = 0; k < KERNELS; k++)
          if (mode == 103) sess<<<blocks, 512, 0, st[g]>>>(dev[g]);
          else if (mode == 102) wordres<<<blocks, 512, 0, st[g]>>>(dev[g]);
          else if (mode >= 100) word<<<blocks, 512, 0, st[g]>>>((unsigned*)(mode == 100 ? wb[g] : sb[g]));
          else part<<<blocks, 512, 0, st[g]>>>(sw[g], rw[g], count, mode, dev[g]);
        CK(cudaStreamEndCapture(st[g], &gr));
        CK(cudaGraphInstantiate(&ge[g], gr, 0));
        CK(cudaGraphDestroy(gr));
      }
      float t[8];
      for (int rep = 0; rep < 8; rep++) { // the first is a warm-up
        CK(cudaSetDevice(0));
        CK(cudaEventRecord(e0, st[0]));
        for (int g = 0; g < n; g++) {
          CK(cudaSetDevice(g));
          CK(cudaGraphLaunch(ge[g], st[g]));
        }
        CK(cudaSetDevice(0));
        CK(cudaEventRecord(e1, st[0]));
        for (int g = 0; g < n; g++) CK(cudaStreamSynchronize(st[g]));
        CK(cudaEventElapsedTime(&t[rep], e0, e1));
      }
      std::sort(t + 1, t + 8);
      us[col] = t[4] * 1e3f / KERNELS / (mode == 16 ? 2 * LOOP : 1);
      for (int g = 0; g < n; g++) CK(cudaGraphExecDestroy(ge[g]));
    }
    printf("%8zu", count * sizeof(float));
    for (int col = 0; col < NCOL; col++) printf(" %8.3f", us[col]);
    printf("\n");
  }
  for (int g = 0; g < n; g++) NK(ncclDevCommDestroy(comms[g], &dev[g]));
  NK(ncclGroupStart());
  for (int g = 0; g < n; g++) {
    NK(ncclCommWindowDeregister(comms[g], sw[g]));
    NK(ncclCommWindowDeregister(comms[g], rw[g]));
  }
  NK(ncclGroupEnd());
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(g));
    NK(ncclMemFree(sb[g]));
    NK(ncclMemFree(rb[g]));
    CK(cudaFree(wb[g]));
  }
  for (int g = 0; g < n; g++) NK(ncclCommDestroy(comms[g]));
  return 0;
}
