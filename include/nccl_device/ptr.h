/*
 * anyccl -- NCCL 2.28's device API: symmetric pointers (a window and an
 * offset, the same on every rank). Written for anyccl from NCCL's
 * published interface.
 */
#ifndef ANYCCL_NCCL_DEVICE_PTR_H
#define ANYCCL_NCCL_DEVICE_PTR_H

#include "core.h"

#ifdef __cplusplus
template <typename T>
struct ncclSymPtr {
  using ElementType = T;
  ncclWindow_t window;
  size_t offset;

  NCCL_HOST_DEVICE_INLINE constexpr ncclSymPtr(ncclWindow_t w = nullptr, size_t off = 0) : window(w), offset(off) {}
  template <typename U>
  NCCL_HOST_DEVICE_INLINE operator ncclSymPtr<U>() const { return ncclSymPtr<U>(window, offset); }
  template <typename Int>
  NCCL_HOST_DEVICE_INLINE ncclSymPtr<T>& operator+=(Int d) {
    offset += (long long)d * (long long)sizeof(T);
    return *this;
  }
  template <typename Int>
  NCCL_HOST_DEVICE_INLINE ncclSymPtr<T>& operator-=(Int d) {
    offset -= (long long)d * (long long)sizeof(T);
    return *this;
  }
#if defined(__CUDACC__)
  NCCL_DEVICE_INLINE T* localPtr() const { return (T*)ncclGetLocalPointer(window, offset); }
  NCCL_DEVICE_INLINE T* lsaPtr(int peer) const { return (T*)ncclGetLsaPointer(window, offset, peer); }
  NCCL_DEVICE_INLINE T* peerPtr(int peer) const { return (T*)ncclGetPeerPointer(window, offset, peer); }
  NCCL_DEVICE_INLINE T* peerPtr(ncclTeam team, int peer) const {
    return (T*)ncclGetPeerPointer(window, offset, team, peer);
  }
  NCCL_DEVICE_INLINE T* multimemPtr(ncclMultimemHandle mm) const {
    return (T*)ncclGetMultimemPointer(window, offset, mm);
  }
  NCCL_DEVICE_INLINE T* lsaMultimemPtr(ncclDevComm const& c) const {
    return (T*)ncclGetLsaMultimemPointer(window, offset, c);
  }
#endif
};
template <typename T, typename Int>
NCCL_HOST_DEVICE_INLINE ncclSymPtr<T> operator+(ncclSymPtr<T> p, Int d) { return p += d; }
template <typename T, typename Int>
NCCL_HOST_DEVICE_INLINE ncclSymPtr<T> operator-(ncclSymPtr<T> p, Int d) { return p -= d; }
template <typename T>
NCCL_HOST_DEVICE_INLINE ptrdiff_t operator-(ncclSymPtr<T> a, ncclSymPtr<T> b) {
  return ((ptrdiff_t)a.offset - (ptrdiff_t)b.offset) / (ptrdiff_t)sizeof(T);
}
template <typename T>
NCCL_HOST_DEVICE_INLINE bool operator==(ncclSymPtr<T> a, ncclSymPtr<T> b) {
  return a.window == b.window && a.offset == b.offset;
}
template <typename T>
NCCL_HOST_DEVICE_INLINE bool operator!=(ncclSymPtr<T> a, ncclSymPtr<T> b) { return !(a == b); }

#if defined(__CUDACC__)
NCCL_DEVICE_INLINE ncclSymPtr<char> ncclGetResourceBuffer(ncclDevComm const& c, ncclDevResourceHandle h) {
  return ncclSymPtr<char>(c.resourceWindow, ncclGetResourceBufferOffset(h));
}
#endif
#endif

#endif
