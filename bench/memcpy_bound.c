/* memcpy_bound: the machine's memory bandwidth, for the bounds that
 * bench/cpu_vs_mpi.sh prints next to the collectives (docs/performance.md
 * derives them).
 *
 *   memcpy_bound [-s MiB per buffer] [-r repetitions] [-t threads,threads,...]
 *
 * For each thread count T (default 1 and 2), T threads each work on their own
 * buffers (default 64 MiB each, twice the 32 MiB message of the benchmarks
 * and larger than a typical L3) and run, after a barrier:
 *
 *   memcpy   dst = src             (glibc memcpy, what most copy paths call)
 *   copy_nt  dst = src             (16-byte loads, non-temporal stores: x86-64 SSE2)
 *   copy_loop dst = src            (a plain loop the compiler vectorises, normal stores)
 *   read     sum of src as float   (read only)
 *   write    memset(dst)           (write only)
 *   add      dst = src + src2      (float, the shape of a reduction step)
 *
 * The time of a repetition runs from the first thread's start to the last
 * thread's end (the threads start together after a barrier); the best of -r
 * repetitions is reported (a ceiling, not a typical value). Columns:
 * "moved" = bytes delivered per second (memcpy: bytes copied; add: bytes of
 * result), "traffic" = bytes read + bytes written per second (memcpy: 2x
 * moved; add: 3x). One line per kernel and thread count:
 *
 *   kernel   threads  buffer_MiB  moved_GB/s  traffic_GB/s
 *   memcpy         2          64       12.91         25.82
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __x86_64__
#include <emmintrin.h>
#endif

enum { K_MEMCPY, K_COPYNT, K_COPY, K_READ, K_WRITE, K_ADD, NK };
static const char* const kname[NK] = {"memcpy", "copy_nt", "copy_loop", "read", "write", "add"};
static const double kmoved[NK] = {1, 1, 1, 1, 1, 1};   /* bytes counted as "moved" per buffer byte */
static const double ktraffic[NK] = {2, 2, 2, 1, 1, 3}; /* bytes read + written per buffer byte */

static size_t bytes = (size_t)64 << 20;
static int reps = 5;
static int nthreads;
static pthread_barrier_t bar;
static volatile float sink;

struct worker {
  pthread_t tid;
  float *src, *src2, *dst;
  int kernel;
  double t0, t1; /* this thread's start and end of the current repetition */
};
static struct worker* W;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void runKernel(struct worker* w) {
  size_t n = bytes / sizeof(float);
  switch (w->kernel) {
    case K_MEMCPY: memcpy(w->dst, w->src, bytes); break;
    case K_COPYNT: {
#ifdef __x86_64__
      const __m128i* a = (const __m128i*)w->src;
      __m128i* d = (__m128i*)w->dst;
      for (size_t i = 0; i + 4 <= bytes / 16; i += 4) {
        __m128i x0 = _mm_load_si128(a + i), x1 = _mm_load_si128(a + i + 1);
        __m128i x2 = _mm_load_si128(a + i + 2), x3 = _mm_load_si128(a + i + 3);
        _mm_stream_si128(d + i, x0), _mm_stream_si128(d + i + 1, x1);
        _mm_stream_si128(d + i + 2, x2), _mm_stream_si128(d + i + 3, x3);
      }
      _mm_sfence();
#else
      memcpy(w->dst, w->src, bytes);
#endif
      break;
    }
    case K_COPY: {
      float* restrict d = w->dst;
      const float* restrict a = w->src;
      for (size_t i = 0; i < n; i++) d[i] = a[i];
      break;
    }
    case K_READ: {
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
      for (size_t i = 0; i + 8 <= n; i += 8) {
        s0 += w->src[i], s1 += w->src[i + 1], s2 += w->src[i + 2], s3 += w->src[i + 3];
        s4 += w->src[i + 4], s5 += w->src[i + 5], s6 += w->src[i + 6], s7 += w->src[i + 7];
      }
      sink = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
      break;
    }
    case K_WRITE: memset(w->dst, 1, bytes); break;
    case K_ADD: {
      float* restrict d = w->dst;
      const float* restrict a = w->src;
      const float* restrict b = w->src2;
      for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
      break;
    }
  }
}

static void* workerMain(void* arg) {
  struct worker* w = arg;
  /* first touch: the pages are this thread's */
  memset(w->src, 1, bytes), memset(w->src2, 2, bytes), memset(w->dst, 0, bytes);
  pthread_barrier_wait(&bar);
  for (int k = 0; k < NK; k++) {
    w->kernel = k;
    for (int r = 0; r < reps; r++) {
      pthread_barrier_wait(&bar);
      w->t0 = now();
      runKernel(w);
      w->t1 = now();
      pthread_barrier_wait(&bar); /* the main thread reads every sec here */
      pthread_barrier_wait(&bar);
    }
  }
  return NULL;
}

static void measure(int T, double best[NK]) {
  nthreads = T;
  W = calloc((size_t)T, sizeof(*W));
  pthread_barrier_init(&bar, NULL, (unsigned)T + 1);
  for (int t = 0; t < T; t++) {
    if (posix_memalign((void**)&W[t].src, 4096, bytes) || posix_memalign((void**)&W[t].src2, 4096, bytes) ||
        posix_memalign((void**)&W[t].dst, 4096, bytes)) {
      fprintf(stderr, "memcpy_bound: cannot allocate 3 x %zu bytes per thread\n", bytes);
      exit(1);
    }
    pthread_create(&W[t].tid, NULL, workerMain, &W[t]);
  }
  pthread_barrier_wait(&bar); /* touched */
  for (int k = 0; k < NK; k++) {
    best[k] = 0;
    for (int r = 0; r < reps; r++) {
      pthread_barrier_wait(&bar); /* start */
      pthread_barrier_wait(&bar); /* done */
      /* wall time from the first start to the last end: threads that did not
       * run at the same time (a loaded machine) do not add up to more */
      double t0 = W[0].t0, t1 = W[0].t1;
      for (int t = 1; t < T; t++) {
        if (W[t].t0 < t0) t0 = W[t].t0;
        if (W[t].t1 > t1) t1 = W[t].t1;
      }
      double sec = t1 - t0;
      pthread_barrier_wait(&bar);
      double gbps = (double)bytes * T / sec / 1e9;
      if (gbps > best[k]) best[k] = gbps;
    }
  }
  for (int t = 0; t < T; t++) {
    pthread_join(W[t].tid, NULL);
    free(W[t].src), free(W[t].src2), free(W[t].dst);
  }
  pthread_barrier_destroy(&bar);
  free(W);
}

int main(int argc, char** argv) {
  char threadList[256] = "1,2";
  int c;
  while ((c = getopt(argc, argv, "s:r:t:h")) != -1) {
    switch (c) {
      case 's': bytes = (size_t)(atof(optarg) * (1 << 20)) & ~(size_t)63; break;
      case 'r': reps = atoi(optarg); break;
      case 't': snprintf(threadList, sizeof(threadList), "%s", optarg); break;
      default:
        fprintf(stderr, "usage: %s [-s MiB per buffer (64)] [-r repetitions (5)] [-t threads,... (1,2)]\n", argv[0]);
        return c == 'h' ? 0 : 1;
    }
  }
  if (bytes < 4096 || reps < 1) {
    fprintf(stderr, "memcpy_bound: bad -s or -r\n");
    return 1;
  }
  printf("# memcpy_bound: %.0f MiB per buffer and thread, best of %d; moved = bytes delivered/s, "
         "traffic = bytes read + written/s (GB = 1e9 B)\n",
         bytes / 1048576.0, reps);
  printf("# %-8s %7s  %10s  %10s  %12s\n", "kernel", "threads", "buffer_MiB", "moved_GB/s", "traffic_GB/s");
  for (char* s = strtok(threadList, ","); s; s = strtok(NULL, ",")) {
    int T = atoi(s);
    if (T < 1) continue;
    double best[NK];
    measure(T, best);
    for (int k = 0; k < NK; k++)
      printf("%-10s %7d  %10.0f  %10.2f  %12.2f\n", kname[k], T, bytes / 1048576.0, best[k] * kmoved[k],
             best[k] * ktraffic[k]);
  }
  return 0;
}
