/* Bidirectional puts through a port channel: MSCCL++'s tutorial 04
 * (bidir_port_channel) in C on anyccl.
 *
 * Two ranks, each with a buffer of 2 x N bytes; rank r owns the half
 * [r*N, (r+1)*N) and puts it to the same place in the peer's buffer with
 * putWithSignal, then waits for the peer's put. The proxy thread of each
 * rank moves the bytes (memcpy inside a host on the cpu backend, the copy
 * engine on GPUs, the network between hosts); puts of at most
 * ANYCCL_PORT_DIRECT_MAX bytes to a peer of the same host, and the signals,
 * are done by the calling thread itself while the proxy has nothing in
 * flight. The data is checked.
 *
 *   bidir_port_channel [-m threads|procs|hosts] [-i ITERS] [-s MAXBYTES] [-b SIZE,...]
 *     threads: two devices of one process, a thread each (default)
 *     procs:   two processes on this host (IPC of device memory)
 *     hosts:   two processes on two virtual hosts (NCCL_HOSTID: sockets)
 *     -b:      these sizes instead of 1 KB, 1 MB, 128 MB (ascending)
 *
 * Builds with a C compiler against anyccl-cpu (the rank's thread plays the
 * GPU thread), or with nvcc (-x cu) against the CUDA runtime: the same round
 * runs in a one-thread kernel. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "anyccl_port.h"

#define CK(x)                                                                                         \
  do {                                                                                                \
    ncclResult_t r_ = (x);                                                                            \
    if (r_ != ncclSuccess) {                                                                          \
      fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #x, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      exit(1);                                                                                        \
    }                                                                                                 \
  } while (0)
#define CUCK(x)                                                                                       \
  do {                                                                                                \
    cudaError_t e_ = (x);                                                                             \
    if (e_ != cudaSuccess) {                                                                          \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #x, cudaGetErrorString(e_));                 \
      exit(1);                                                                                        \
    }                                                                                                 \
  } while (0)

#define MAXSIZES 16
static size_t kSizes[MAXSIZES] = {1024, 1 << 20, 128 << 20};
static int gNumSizes = 3;            /* -b: another list */
static int gIters = 0;               /* 0: by size */
static size_t gMaxBytes = 128 << 20; /* -s: sizes up to this */
static int nSizes(void) {
  int k = 0;
  while (k < gNumSizes && kSizes[k] <= gMaxBytes) k++;
  return k;
}
/* -b 1024,4096,...: ascending sizes (also given to the rank processes) */
static int parseSizes(const char* list) {
  int n = 0;
  for (const char* p = list; *p && n < MAXSIZES;) {
    char* end;
    unsigned long long v = strtoull(p, &end, 0);
    if (end == p || v == 0 || v > (1ull << 32) || (n > 0 && v <= kSizes[n - 1])) return -1;
    kSizes[n++] = (size_t)v;
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != 0) return -1;
  }
  if (n == 0) return -1;
  gNumSizes = n;
  setenv("BIDIR_SIZES", list, 1);
  return 0;
}

static double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- the device side: one thread per call, as in MSCCL++ ---------------------- */
#if defined(__CUDACC__)
#define ROUND_FN __device__
#else
#define ROUND_FN static
#endif

/* iters rounds: handshake (signal, wait), then my half to the peer with
 * putWithSignal and wait for the peer's. Returns an ncclResult_t. */
ROUND_FN int bidirRounds(struct anycclPortChannel ch, int rank, uint64_t bytes, int iters) {
  uint64_t off = (uint64_t)rank * bytes;
  for (int i = 0; i < iters; i++) {
    int r;
    if ((r = anycclPortSignal(&ch)) != ncclSuccess) return r;
    if ((r = anycclPortWait(&ch)) != ncclSuccess) return r;
    if ((r = anycclPortPutWithSignal(&ch, off, off, bytes)) != ncclSuccess) return r;
    if ((r = anycclPortWait(&ch)) != ncclSuccess) return r;
  }
  return anycclPortFlush(&ch);
}

/* A barrier of the pair through the channel's semaphores. */
ROUND_FN int pairBarrierDev(struct anycclPortChannel ch) {
  int r = anycclPortSignal(&ch);
  return r != ncclSuccess ? r : anycclPortWait(&ch);
}

/* Run the rounds (iters > 0) or a barrier (iters == 0) as "device" code. */
#if defined(__CUDACC__)
__global__ void bidirKernel(struct anycclPortChannel ch, int rank, uint64_t bytes, int iters, int* result) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    *result = iters > 0 ? bidirRounds(ch, rank, bytes, iters) : pairBarrierDev(ch);
}
static ncclResult_t runRounds(struct anycclPortChannel* ch, int rank, uint64_t bytes, int iters) {
  /* the rank's result word, allocated once (not in the timed rounds): pinned
   * host memory the kernel stores into (a managed word would migrate on
   * every launch and read, tens of microseconds each way) */
  static __thread int* res;
  int h = ncclUnhandledCudaError;
  if (res == NULL && cudaHostAlloc((void**)&res, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
    return ncclUnhandledCudaError;
  bidirKernel<<<1, 1>>>(*ch, rank, bytes, iters, res);
  if (cudaDeviceSynchronize() == cudaSuccess) h = *res;
  return (ncclResult_t)h;
}
#else
static ncclResult_t runRounds(struct anycclPortChannel* ch, int rank, uint64_t bytes, int iters) {
  return (ncclResult_t)(iters > 0 ? bidirRounds(*ch, rank, bytes, iters) : pairBarrierDev(*ch));
}
#endif

/* ---- the host side ---------------------------------------------------------- */
/* The reference copy, what the two proxies do during the puts: on the cpu
 * backend a memcpy (device memory is host memory); on GPUs a copy-engine copy
 * of N bytes into the peer's GPU (cudaMemcpyAsync, peer access or CUDA IPC),
 * or a local device copy between virtual hosts (no peer path there). */
static int gHosts; /* -m hosts */
struct refPath {
  char* dst; /* where this rank's reference copy lands */
#if defined(__CUDACC__)
  cudaStream_t stream;
  int opened; /* dst came from cudaIpcOpenMemHandle */
#endif
};
#if defined(__CUDACC__)
struct refInfo { cudaIpcMemHandle_t h; uint64_t ptr; int pid, dev; };
/* Each rank's landing buffer, all-gathered through the communicator. */
static void refSetup(struct refPath* p, ncclComm_t comm, int rank, int dev, char* landing) {
  p->dst = landing;
  p->opened = 0;
  CUCK(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking));
  if (gHosts) return;
  struct refInfo mine, all[2], *dMine, *dAll;
  memset(&mine, 0, sizeof(mine));
  CUCK(cudaIpcGetMemHandle(&mine.h, landing));
  mine.ptr = (uint64_t)(uintptr_t)landing;
  mine.pid = (int)getpid();
  mine.dev = dev;
  CUCK(cudaMalloc((void**)&dMine, sizeof(mine)));
  CUCK(cudaMalloc((void**)&dAll, sizeof(all)));
  CUCK(cudaMemcpy(dMine, &mine, sizeof(mine), cudaMemcpyHostToDevice));
  CK(ncclAllGather(dMine, dAll, sizeof(mine), ncclChar, comm, p->stream));
  CUCK(cudaStreamSynchronize(p->stream));
  CUCK(cudaMemcpy(all, dAll, sizeof(all), cudaMemcpyDeviceToHost));
  CUCK(cudaFree(dMine));
  CUCK(cudaFree(dAll));
  const struct refInfo* peer = &all[1 - rank];
  if (peer->pid == mine.pid) {
    cudaError_t e = cudaDeviceEnablePeerAccess(peer->dev, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CUCK(e);
    (void)cudaGetLastError();
    p->dst = (char*)(uintptr_t)peer->ptr;
  } else {
    CUCK(cudaIpcOpenMemHandle((void**)&p->dst, peer->h, cudaIpcMemLazyEnablePeerAccess));
    p->opened = 1;
  }
}
static void refTeardown(struct refPath* p, int rank) {
  if (p->opened) CUCK(cudaIpcCloseMemHandle(p->dst));
  CUCK(cudaStreamDestroy(p->stream));
}
static void refCopy(int rank, struct refPath* p, const char* src, size_t n) {
  CUCK(cudaMemcpyAsync(p->dst, src, n, cudaMemcpyDefault, p->stream));
  CUCK(cudaStreamSynchronize(p->stream));
}
static const char* refName(void) { return gHosts ? "local device copy" : "copy engine into the peer"; }
#else
static void refSetup(struct refPath* p, ncclComm_t comm, int rank, int dev, char* landing) {
  (void)comm, (void)rank, (void)dev;
  p->dst = landing;
}
static void refTeardown(struct refPath* p, int rank) { (void)p, (void)rank; }
static void refCopy(int rank, struct refPath* p, const char* src, size_t n) {
  (void)rank;
  memcpy(p->dst, src, n);
}
static const char* refName(void) { return "memcpy"; }
#endif

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}
static double median(double* v, int n) {
  qsort(v, n, sizeof(*v), cmpDouble);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int itersFor(size_t bytes) {
  if (gIters > 0) return gIters;
  return bytes <= (1 << 20) ? 200 : 10;
}

static void pairBarrier(struct anycclPortChannel* ch, int rank) { CK(runRounds(ch, rank, 0, 0)); }

static void fill(char* host, size_t n, int rank, int round) {
  for (size_t i = 0; i < n; i += 4) {
    uint32_t v = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 7919 + round);
    memcpy(host + i, &v, n - i < 4 ? n - i : 4);
  }
}

static int runRank(ncclComm_t comm, int rank, int dev) {
  size_t maxBytes = kSizes[nSizes() - 1];
  char *buf, *mA, *mB, *host = (char*)malloc(2 * maxBytes), *want = (char*)malloc(maxBytes);
  if (!host || !want) return 1;
  CUCK(cudaSetDevice(dev));
  CUCK(cudaMalloc((void**)&buf, 2 * maxBytes));
  CUCK(cudaMalloc((void**)&mA, maxBytes));
  CUCK(cudaMalloc((void**)&mB, maxBytes));
  CUCK(cudaMemset(mA, 1, maxBytes));
  CUCK(cudaMemset(mB, 2, maxBytes));
  anycclProxyService_t svc;
  CK(anycclProxyServiceCreate(comm, 0, &svc));
  int peer = 1 - rank;
  anycclMemoryId local, remote;
  anycclSemaphoreId sem;
  CK(anycclRegisterMemory(svc, buf, 2 * maxBytes, &local));
  CK(anycclMemorySend(svc, local, peer));
  CK(anycclMemoryRecv(svc, peer, &remote));
  CK(anycclSemaphoreCreate(svc, peer, &sem));
  struct anycclPortChannel ch;
  CK(anycclPortChannelCreate(svc, sem, remote, local, &ch));
  CK(anycclProxyServiceStart(svc));
  struct refPath ref;
  refSetup(&ref, comm, rank, dev, mB);
  if (rank == 0) printf("GPU %d: Preparing for tests ...\n", dev);
  int failed = 0;
  for (int k = 0; k < nSizes(); k++) {
    size_t n = kSizes[k];
    int iters = itersFor(n);
    fill(host, n, rank, k);
    CUCK(cudaMemcpy(buf + rank * n, host, n, cudaMemcpyHostToDevice));
    pairBarrier(&ch, rank);
    CK(runRounds(&ch, rank, n, 1)); /* warm-up, checked below */
    pairBarrier(&ch, rank);
    double t0 = nowMs();
    CK(runRounds(&ch, rank, n, iters));
    double ms = (nowMs() - t0) / iters;
    /* check: the peer's half arrived */
    fill(want, n, peer, k);
    CUCK(cudaMemcpy(host, buf + peer * n, n, cudaMemcpyDeviceToHost));
    if (memcmp(host, want, n) != 0) {
      fprintf(stderr, "rank %d: wrong data for %zu bytes\n", rank, n);
      failed = 1;
    }
    /* Memory bandwidth in the same run, interleaved with single put rounds
     * so that both see the same machine (others may be busy): round i is a
     * put round, then the reference copy of n bytes by both ranks at once
     * (as their proxies copy at once during the puts); medians. Then rank 0
     * alone. */
    double* tp = (double*)malloc(2 * iters * sizeof(double));
    double* tc = tp + iters;
    for (int i = 0; i < iters; i++) {
      pairBarrier(&ch, rank);
      double c0 = nowMs();
      CK(runRounds(&ch, rank, n, 1));
      tp[i] = nowMs() - c0;
      pairBarrier(&ch, rank);
      c0 = nowMs();
      refCopy(rank, &ref, mA, n);
      tc[i] = nowMs() - c0;
    }
    pairBarrier(&ch, rank);
    double alone = 0;
    if (rank == 0) {
      double c0 = nowMs();
      for (int i = 0; i < iters; i++) refCopy(rank, &ref, mA, n);
      alone = (nowMs() - c0) / iters;
    }
    pairBarrier(&ch, rank);
    if (rank == 0) {
      double mp = median(tp, iters), mc = median(tc, iters);
      printf("GPU %d: [Bidir PutWithSignal] bytes %zu, elapsed %g ms/iter, BW %g GB/s\n", dev, n, ms, n / ms / 1e6);
      /* loop/reference: the rounds above (one kernel for all of them) against
       * the reference; put/reference: single rounds (a launch and a wait
       * each) interleaved with it */
      printf("GPU %d: [reference same run] bytes %zu, interleaved medians: put %g GB/s, %s (both ranks at once) %g "
             "GB/s, put/reference %.2f; one rank alone %g GB/s; loop/reference %.2f\n",
             dev, n, n / mp / 1e6, refName(), n / mc / 1e6, mc / mp, n / alone / 1e6, mc / ms);
      fflush(stdout);
    }
    free(tp);
  }
  refTeardown(&ref, rank);
  CK(anycclProxyServiceStop(svc));
  CK(anycclProxyServiceDestroy(svc));
  CUCK(cudaFree(buf));
  CUCK(cudaFree(mA));
  CUCK(cudaFree(mB));
  free(host);
  free(want);
  return failed;
}

/* ---- ways to run two ranks -------------------------------------------------- */
struct threadArg { ncclUniqueId id; int rank; int result; };

static void* rankThread(void* p) {
  struct threadArg* a = (struct threadArg*)p;
  int rank = a->rank;
  ncclComm_t comm;
  CUCK(cudaSetDevice(rank));
  CK(ncclCommInitRank(&comm, 2, a->id, rank));
  a->result = runRank(comm, rank, rank);
  CK(ncclCommDestroy(comm));
  return NULL;
}

static void hexId(const ncclUniqueId* id, char* out) {
  for (int i = 0; i < (int)sizeof(id->internal); i++) sprintf(out + 2 * i, "%02x", (unsigned char)id->internal[i]);
}
static void unhexId(const char* s, ncclUniqueId* id) {
  for (int i = 0; i < (int)sizeof(id->internal); i++) {
    unsigned v;
    sscanf(s + 2 * i, "%2x", &v);
    id->internal[i] = (char)v;
  }
}

int main(int argc, char** argv) {
  const char* mode = "threads";
  int rank = -1;
  if (argc == 6 && strcmp(argv[1], "--child") == 0) { /* a rank process */
    rank = atoi(argv[2]);
    gIters = atoi(argv[4]);
    gMaxBytes = strtoull(argv[5], NULL, 0);
    if (getenv("BIDIR_SIZES") && parseSizes(getenv("BIDIR_SIZES")) != 0) return 2;
    ncclUniqueId id;
    unhexId(argv[3], &id);
    ncclComm_t comm;
    gHosts = getenv("NCCL_HOSTID") != NULL;
    int dev = gHosts ? 0 : rank; /* each virtual host has its own devices */
    CUCK(cudaSetDevice(dev));
    CK(ncclCommInitRank(&comm, 2, id, rank));
    int r = runRank(comm, rank, dev);
    CK(ncclCommDestroy(comm));
    return r;
  }
  int opt;
  while ((opt = getopt(argc, argv, "m:i:s:b:h")) != -1) {
    if (opt == 'm') mode = optarg;
    else if (opt == 'i') gIters = atoi(optarg);
    else if (opt == 's') gMaxBytes = strtoull(optarg, NULL, 0);
    else if (opt == 'b' && parseSizes(optarg) == 0) continue;
    else {
      if (opt == 'b') fprintf(stderr, "-b %s: ascending sizes 1 B - 4 GiB, comma-separated (at most %d)\n", optarg, MAXSIZES);
      fprintf(stderr, "usage: %s [-m threads|procs|hosts] [-i ITERS] [-s MAXBYTES] [-b SIZE,SIZE,...]\n", argv[0]);
      return opt == 'h' ? 0 : 2;
    }
  }
  ncclUniqueId id;
  CK(ncclGetUniqueId(&id));
  int fails = 0;
  if (strcmp(mode, "threads") == 0) {
    struct threadArg a[2] = {{id, 0, 1}, {id, 1, 1}};
    pthread_t t[2];
    for (int r = 0; r < 2; r++) pthread_create(&t[r], NULL, rankThread, &a[r]);
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    fails = a[0].result + a[1].result;
  } else if (strcmp(mode, "procs") == 0 || strcmp(mode, "hosts") == 0) {
    char hex[2 * sizeof(id.internal) + 1];
    hexId(&id, hex);
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
      if ((pids[r] = fork()) == 0) {
        char rs[8], host[16], is[16], ms[32];
        snprintf(rs, sizeof(rs), "%d", r);
        snprintf(is, sizeof(is), "%d", gIters);
        snprintf(ms, sizeof(ms), "%zu", gMaxBytes);
        snprintf(host, sizeof(host), "host%d", r);
        if (mode[0] == 'h') setenv("NCCL_HOSTID", host, 1);
        execl("/proc/self/exe", argv[0], "--child", rs, hex, is, ms, (char*)NULL);
        _exit(127);
      }
    }
    for (int r = 0; r < 2; r++) {
      int st;
      waitpid(pids[r], &st, 0);
      fails += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
  } else {
    fprintf(stderr, "unknown mode %s (threads, procs or hosts)\n", mode);
    return 2;
  }
  if (nSizes() == 0) {
    fprintf(stderr, "-s %zu: no size fits (the smallest is %zu)\n", gMaxBytes, kSizes[0]);
    return 2;
  }
  if (fails) {
    printf("FAILED\n");
    return 1;
  }
  printf("Succeed!\n");
  return 0;
}
