/*
 * anyccl -- NCCL 2.28's device API: cooperative groups of threads.
 * A Coop is the set of threads that enter a session call together:
 * thread_rank(), size() and sync(). Written for anyccl from NCCL's
 * published interface.
 */
#ifndef ANYCCL_NCCL_DEVICE_COOP_H
#define ANYCCL_NCCL_DEVICE_COOP_H

#include "utility.h"

#if defined(__CUDACC__)
/* An aligned power-of-two set of lanes of one warp. */
template <int nThreadsPow2>
struct ncclCoopTile {
  static_assert(nThreadsPow2 > 0 && nThreadsPow2 <= 32 && (nThreadsPow2 & (nThreadsPow2 - 1)) == 0,
                "ncclCoopTile: a power of two up to 32 threads");
  NCCL_DEVICE_INLINE int thread_rank() const { return nccl::utility::lane() % nThreadsPow2; }
  NCCL_DEVICE_INLINE constexpr int size() const { return nThreadsPow2; }
  NCCL_DEVICE_INLINE constexpr int num_threads() const { return nThreadsPow2; }
  NCCL_DEVICE_INLINE uint32_t laneMask() const {
    return (0xffffffffu >> (32 - nThreadsPow2)) << (nccl::utility::lane() & -nThreadsPow2);
  }
  NCCL_DEVICE_INLINE void sync() {
    if (nThreadsPow2 > 1) __syncwarp(laneMask());
  }
};
typedef ncclCoopTile<1> ncclCoopThread;
typedef ncclCoopTile<32> ncclCoopWarp;

/* Some lanes of this warp. */
struct ncclCoopLanes {
  uint32_t lmask;
  NCCL_DEVICE_INLINE constexpr ncclCoopLanes(uint32_t m = 0xffffffffu) : lmask(m) {}
  NCCL_DEVICE_INLINE int thread_rank() const { return __popc(lmask & nccl::utility::lanemask_lt()); }
  NCCL_DEVICE_INLINE int size() const { return __popc(lmask); }
  NCCL_DEVICE_INLINE int num_threads() const { return __popc(lmask); }
  NCCL_DEVICE_INLINE void sync() { __syncwarp(lmask); }
};

/* Warps warp0 .. warp0+nWarps-1 of the block; id picks the named barrier (1+id). */
struct ncclCoopWarpSpan {
  uint32_t warp0 : 8, nWarps : 8, id : 8;
  NCCL_DEVICE_INLINE constexpr ncclCoopWarpSpan(int w0, int n, int i) : warp0(w0), nWarps(n), id(i) {}
  NCCL_DEVICE_INLINE int thread_rank() const { return threadIdx.x - 32 * warp0; }
  NCCL_DEVICE_INLINE int size() const { return 32 * nWarps; }
  NCCL_DEVICE_INLINE int num_threads() const { return 32 * nWarps; }
  NCCL_DEVICE_INLINE void sync() { asm volatile("bar.sync %0, %1;" ::"r"(1 + id), "r"(32 * nWarps) : "memory"); }
};

/* The whole thread block (1-D). */
struct ncclCoopCta {
  NCCL_DEVICE_INLINE int thread_rank() const { return threadIdx.x; }
  NCCL_DEVICE_INLINE int size() const { return blockDim.x; }
  NCCL_DEVICE_INLINE int num_threads() const { return blockDim.x; }
  NCCL_DEVICE_INLINE void sync() { __syncthreads(); }
};

template <int n>
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopTile<n> c) { return c.laneMask(); }
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopLanes c) { return c.lmask; }
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopWarpSpan) { return 0xffffffffu; }
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopCta) { return 0xffffffffu; }

template <int n>
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopTile<n>) { return n == 1; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopLanes) { return false; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopWarpSpan) { return false; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopCta) { return false; }

template <int n>
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopTile<n>) { return true; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopLanes) { return true; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopWarpSpan) { return false; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopCta) { return false; }

NCCL_DEVICE_INLINE ncclCoopLanes ncclCoopCoalesced() { return ncclCoopLanes{__activemask()}; }
template <typename Coop>
NCCL_DEVICE_INLINE ncclCoopTile<32> ncclCoopCoalesced(Coop) { return ncclCoopTile<32>(); }
NCCL_DEVICE_INLINE ncclCoopLanes ncclCoopCoalesced(ncclCoopLanes c) { return c; }
template <int n>
NCCL_DEVICE_INLINE ncclCoopTile<n> ncclCoopCoalesced(ncclCoopTile<n> c) { return c; }

/* Broadcast `value` from the member `root` to every member of the coop. */
template <int n, typename T>
NCCL_DEVICE_INLINE T ncclCoopBcast(ncclCoopTile<n> c, T value, int root, bool entrySync = true) {
  constexpr int words = (sizeof(T) + 3) / 4;
  union { uint32_t u[words]; T v; } x;
  x.v = value;
#pragma unroll
  for (int i = 0; i < words; i++) x.u[i] = __shfl_sync(c.laneMask(), x.u[i], root, n);
  return x.v;
}
template <typename T>
NCCL_DEVICE_INLINE T ncclCoopBcast(ncclCoopLanes c, T value, int root, bool entrySync = true) {
  uint32_t m = c.lmask;
  int src = __fns(m, 0, 1 + root);
  constexpr int words = (sizeof(T) + 3) / 4;
  union { uint32_t u[words]; T v; } x;
  x.v = value;
#pragma unroll
  for (int i = 0; i < words; i++) x.u[i] = __shfl_sync(m, x.u[i], src);
  return x.v;
}
template <typename Coop, typename T>
NCCL_DEVICE_INLINE T anycclCoopBcastShared(Coop c, T value, int root, bool entrySync, ulong2* stash) {
  static_assert(sizeof(T) <= sizeof(ulong2), "ncclCoopBcast: at most 16 bytes");
  if (entrySync) c.sync();
  if (c.thread_rank() == root) *(T*)stash = value;
  c.sync();
  return *(T*)stash;
}
template <typename T>
NCCL_DEVICE_INLINE T ncclCoopBcast(ncclCoopWarpSpan c, T value, int root, bool entrySync = true) {
  __shared__ ulong2 stash[16];
  return anycclCoopBcastShared(c, value, root, entrySync, &stash[c.id & 15]);
}
template <typename T>
NCCL_DEVICE_INLINE T ncclCoopBcast(ncclCoopCta c, T value, int root, bool entrySync = true) {
  __shared__ ulong2 stash;
  return anycclCoopBcastShared(c, value, root, entrySync, &stash);
}
#endif

#endif
