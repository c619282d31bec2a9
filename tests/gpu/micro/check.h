// The micro-benchmarks' checks: a failed call prints where and why, and the program exits 1.
//   CK: a CUDA runtime call; DK: a CUDA driver call (include cuda.h); NK: an NCCL call (nccl.h).
#ifndef ANYCCL_MICRO_CHECK_H
#define ANYCCL_MICRO_CHECK_H
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));         \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)
#define DK(x)                                                                   \
  do {                                                                          \
    CUresult r_ = (x);                                                          \
    if (r_ != CUDA_SUCCESS) {                                                   \
      const char* s_ = "?";                                                     \
      cuGetErrorString(r_, &s_);                                                \
      printf("%s:%d %s\n", __FILE__, __LINE__, s_);                             \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)
#define NK(x)                                                                   \
  do {                                                                          \
    ncclResult_t n_ = (x);                                                      \
    if (n_ != ncclSuccess) {                                                    \
      printf("%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(n_));         \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)
#endif
