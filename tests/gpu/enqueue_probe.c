/* enqueue_probe: where the time of a small collective goes on GPUs.
 *
 *   enqueue_probe <ngpus> <bytes> <iters> <g|t|r>
 *
 * g: one thread drives every GPU (ncclGroupStart/End around the n calls, as
 *    nccl-tests -g n does); t: one thread per GPU (nccl-tests -t n).
 * Prints, per iteration (one all-reduce on every GPU):
 *   host  = time the enqueue calls took (no synchronisation inside the loop)
 *   total = time until every stream finished
 * When total is close to host, the loop is bound by the host path; when it is
 * larger, by the GPUs. Links against whichever libnccl.so.2 the loader finds
 * (NCCL or anyccl), so both are measured by the same binary.
 * r: no collective; the host cost of the runtime calls an enqueue makes
 *    (cudaEventRecord, cudaStreamIsCapturing, cudaSetDevice, cudaGetDevice). */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "nccl.h"

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)
#define NK(x)                                                                  \
  do {                                                                         \
    ncclResult_t r_ = (x);                                                     \
    if (r_ != ncclSuccess) {                                                   \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

struct gpu {
  int dev;
  ncclComm_t comm;
  cudaStream_t stream;
  float *buf;
  size_t count;
  int iters;
  double host, total;
  pthread_barrier_t* bar;
};

static void* perThread(void* arg) {
  struct gpu* g = arg;
  CK(cudaSetDevice(g->dev));
  for (int rep = 0; rep < 2; rep++) { /* first pass warms up */
    pthread_barrier_wait(g->bar);
    double t0 = now();
    for (int i = 0; i < g->iters; i++)
      NK(ncclAllReduce(g->buf, g->buf, g->count, ncclFloat, ncclSum, g->comm, g->stream));
    double t1 = now();
    CK(cudaStreamSynchronize(g->stream));
    double t2 = now();
    pthread_barrier_wait(g->bar);
    g->host = (t1 - t0) / g->iters;
    g->total = (t2 - t0) / g->iters;
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s <ngpus> <bytes> <iters> <g|t>\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[1]);
  size_t bytes = strtoull(argv[2], NULL, 0);
  int iters = atoi(argv[3]);
  int threads = argv[4][0] == 't';
  if (argv[4][0] == 'r') {
    cudaStream_t st;
    cudaEvent_t ev;
    CK(cudaSetDevice(0));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    enum cudaStreamCaptureStatus cs;
    int dev = 0;
    double t0 = now();
    for (int i = 0; i < iters; i++) CK(cudaEventRecord(ev, st));
    double t1 = now();
    for (int i = 0; i < iters; i++) CK(cudaStreamIsCapturing(st, &cs));
    double t2 = now();
    for (int i = 0; i < iters; i++) CK(cudaSetDevice(i & (n > 1)));
    double t3 = now();
    for (int i = 0; i < iters; i++) CK(cudaGetDevice(&dev));
    double t4 = now();
    CK(cudaStreamSynchronize(st));
    printf("probe runtime us/call: eventRecord=%.3f streamIsCapturing=%.3f setDevice(%s)=%.3f getDevice=%.3f\n",
           (t1 - t0) / iters * 1e6, (t2 - t1) / iters * 1e6, n > 1 ? "0/1" : "0", (t3 - t2) / iters * 1e6,
           (t4 - t3) / iters * 1e6);
    return 0;
  }
  if (n < 1 || n > 64 || iters < 1) return 2;
  struct gpu* g = calloc(n, sizeof(*g));
  ncclComm_t* comms = calloc(n, sizeof(*comms));
  int* devs = calloc(n, sizeof(int));
  for (int i = 0; i < n; i++) devs[i] = i;
  NK(ncclCommInitAll(comms, n, devs));
  size_t count = bytes / sizeof(float) ? bytes / sizeof(float) : 1;
  for (int i = 0; i < n; i++) {
    g[i].dev = i;
    g[i].comm = comms[i];
    g[i].count = count;
    g[i].iters = iters;
    CK(cudaSetDevice(i));
    CK(cudaStreamCreateWithFlags(&g[i].stream, cudaStreamNonBlocking));
    CK(cudaMalloc((void**)&g[i].buf, count * sizeof(float)));
    CK(cudaMemset(g[i].buf, 0, count * sizeof(float)));
  }
  double host = 0, total = 0;
  if (threads) {
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, n);
    pthread_t* th = calloc(n, sizeof(*th));
    for (int i = 0; i < n; i++) {
      g[i].bar = &bar;
      pthread_create(&th[i], NULL, perThread, &g[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++) {
      if (g[i].host > host) host = g[i].host;
      if (g[i].total > total) total = g[i].total;
    }
    free(th);
  } else {
    for (int rep = 0; rep < 2; rep++) {
      double t0 = now();
      for (int it = 0; it < iters; it++) {
        NK(ncclGroupStart());
        for (int i = 0; i < n; i++)
          NK(ncclAllReduce(g[i].buf, g[i].buf, count, ncclFloat, ncclSum, g[i].comm, g[i].stream));
        NK(ncclGroupEnd());
      }
      double t1 = now();
      for (int i = 0; i < n; i++) {
        CK(cudaSetDevice(i));
        CK(cudaStreamSynchronize(g[i].stream));
      }
      double t2 = now();
      host = (t1 - t0) / iters;
      total = (t2 - t0) / iters;
    }
  }
  int version = 0;
  ncclGetVersion(&version);
  printf("probe n=%d bytes=%zu iters=%d mode=%s version=%d host_us=%.2f total_us=%.2f\n", n, count * sizeof(float),
         iters, threads ? "threads" : "group", version, host * 1e6, total * 1e6);
  for (int i = 0; i < n; i++) {
    cudaSetDevice(i);
    cudaFree(g[i].buf);
    cudaStreamDestroy(g[i].stream);
    ncclCommDestroy(comms[i]);
  }
  free(g);
  free(comms);
  free(devs);
  return 0;
}
