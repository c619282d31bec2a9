/* Helpers shared by the anyccl-cpu tests: checks that name the failing line
 * and exit non-zero, and a few timing utilities. */
#ifndef CPURT_TEST_H
#define CPURT_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda_runtime.h>

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

/* The call must return `want`. */
#define EXPECT(want, call)                                                   \
  do {                                                                       \
    cudaError_t got_ = (call);                                               \
    if (got_ != (want)) {                                                    \
      fprintf(stderr, "%s:%d: %s returned %s (%d), expected %s\n", __FILE__, \
              __LINE__, #call, cudaGetErrorName(got_), (int)got_, #want);    \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

#define CUDACHECK(call) EXPECT(cudaSuccess, call)

static inline double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

#endif
