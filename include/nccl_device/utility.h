/*
 * anyccl -- NCCL 2.28's device API: qualifiers and small helpers.
 * Written for anyccl; names follow NCCL's published headers.
 */
#ifndef ANYCCL_NCCL_DEVICE_UTILITY_H
#define ANYCCL_NCCL_DEVICE_UTILITY_H

#include <stdint.h>

#if defined(__CUDACC__)
#define NCCL_DEVICE_INLINE __device__ __forceinline__
#define NCCL_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#include <cuda/atomic>
#elif defined(__cplusplus)
#ifndef __host__
#define __host__
#endif
#define NCCL_DEVICE_INLINE inline
#define NCCL_HOST_DEVICE_INLINE inline
#else
#ifndef __host__
#define __host__
#endif
#define NCCL_DEVICE_INLINE static inline
#define NCCL_HOST_DEVICE_INLINE static inline
#endif

#ifdef __cplusplus
#define NCCL_EXTERN_C extern "C"
#else
#define NCCL_EXTERN_C
#endif

#ifdef __cplusplus
namespace nccl {
namespace utility {
template <typename T>
T&& declval() noexcept;
/* Is a <= b, in a rolling (wrapping) order of `nBits` bits? */
template <typename Uint>
NCCL_HOST_DEVICE_INLINE bool rollingLessEq(Uint a, Uint b, int nBits = 8 * sizeof(Uint)) {
  Uint m = Uint(-1) >> (8 * sizeof(Uint) - nBits);
  return ((b - a) & m) <= (m >> 1);
}
template <typename X, typename Y>
NCCL_HOST_DEVICE_INLINE constexpr X divUp(X x, Y y) { return (x + y - 1) / y; }
template <typename X, typename Y>
NCCL_HOST_DEVICE_INLINE constexpr X roundUp(X x, Y y) { return (x + y - 1) / y * y; }
NCCL_HOST_DEVICE_INLINE constexpr uint32_t idivRcp32(uint32_t x) {
  return uint32_t(-1) / x + ((x & (x - 1)) == 0);
}
#if defined(__CUDACC__)
NCCL_DEVICE_INLINE cuda::memory_order acquireOrderOf(cuda::memory_order o) {
  return o == cuda::memory_order_release ? cuda::memory_order_relaxed
         : o == cuda::memory_order_acq_rel ? cuda::memory_order_acquire : o;
}
NCCL_DEVICE_INLINE cuda::memory_order releaseOrderOf(cuda::memory_order o) {
  return o == cuda::memory_order_acquire ? cuda::memory_order_relaxed
         : o == cuda::memory_order_acq_rel ? cuda::memory_order_release : o;
}
NCCL_DEVICE_INLINE int lane() {
  int r;
  asm("mov.u32 %0, %%laneid;" : "=r"(r));
  return r;
}
NCCL_DEVICE_INLINE uint32_t lanemask_lt() {
  uint32_t r;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(r));
  return r;
}
#endif
}  // namespace utility
}  // namespace nccl
#endif

#endif
