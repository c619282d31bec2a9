/*
 * anyccl -- NCCL 2.28's device API: communicators, teams, windows.
 *
 * Written for anyccl from NCCL's published interface (names, prototypes,
 * the public members of the structures); the layouts behind the public
 * members and every inline function are anyccl's own. The types and the
 * host functions are plain C (the library is C); sessions, cooperative
 * groups and device functions need CUDA C++ (__CUDACC__).
 *
 * A window (ncclWindow_t) is a pointer to device memory holding the
 * window's base on every rank of this rank's LSA team (the ranks of its
 * host), and the same addresses as one range: the library maps the peers'
 * allocations (ncclMemAlloc memory, the same offset on every rank) side by
 * side, so that ncclGetLsaPointer is arithmetic on two loop-invariant
 * loads, as NCCL's is.
 */
#ifndef ANYCCL_NCCL_DEVICE_CORE_H
#define ANYCCL_NCCL_DEVICE_CORE_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

/* Only anyccl's headers define this: a program can check which
 * nccl_device.h it got. */
#define ANYCCL_NCCL_DEVICE_API 22809

#include "utility.h"
#include "coop.h"

/* Ranks of one LSA team (one host) a window can hold. */
#define ANYCCL_DEV_MAX_LSA 64
#define NCCL_GIN_MAX_CONTEXTS 4

typedef uint32_t ncclDevResourceHandle;
typedef ncclDevResourceHandle ncclDevResourceHandle_t;
typedef uint32_t ncclGinSignal_t;
typedef uint32_t ncclGinCounter_t;

typedef struct ncclTeam {
  int nRanks, rank, stride;
} ncclTeam_t;

#ifdef __cplusplus
struct ncclTeamTagWorld {};
struct ncclTeamTagLsa {};
struct ncclTeamTagRail {};
#endif

typedef struct ncclMultimemHandle {
  void* mcBasePtr; /* always NULL: anyccl creates no multicast objects */
} ncclMultimemHandle_t;

typedef struct ncclLsaBarrierHandle {
  ncclDevResourceHandle_t bufHandle;
  int nBarriers;
} ncclLsaBarrierHandle_t;
/* An LSA barrier's resource buffer holds the peers' inboxes (nBarriers x n
 * words), then this rank's epochs from the next 128-byte line on: the word
 * index of epoch[0] (lsa_barrier.h). */
NCCL_HOST_DEVICE_INLINE uint32_t anycclLsaEpochWord(int nBarriers, int n) {
  return ((uint32_t)nBarriers * (uint32_t)n + 31u) & ~31u;
}

typedef struct ncclGinBarrierHandle {
  ncclGinSignal_t signal0;
  ncclDevResourceHandle_t bufHandle;
} ncclGinBarrierHandle_t;

typedef struct ncclLLA2AHandle {
  ncclDevResourceHandle_t bufHandle;
  uint32_t nSlots;
} ncclLLA2AHandle_t;

/* The device side of a window (device memory, read-only once made). */
struct ncclWindow_vidmem {
  char* lsaBase[ANYCCL_DEV_MAX_LSA];  /* the window on each LSA peer, mapped here (first: the address of
                                         peer p's entry is the handle plus 8 p) */
  char* localBase;                    /* == lsaBase[lsaRank] */
  size_t size;
  int lsaRank, lsaSize, worldRank, winFlags;
  void* winHost;                      /* the library's record */
  int ginMem;                         /* its memory in the communicator's GIN proxy (the same id on every
                                         rank), -1: none (GIN puts into it reach LSA peers only) */
  uint32_t lsaStride4G;               /* LSA peer p's window at lsaFlat + p * lsaStride4G * 4 GiB (the */
  char* lsaFlat;                      /* peers' ncclMemAlloc allocations mapped side by side, here) */
};

/* A GIN operation for a rank outside the LSA team (another host), written
 * by device code into the proxy's descriptor array beside its FIFO entry
 * (src/backend/cuda_gin.c takes it). 64 bytes. */
enum { ANYCCL_GIN_PUT = 1, ANYCCL_GIN_PUT_VALUE = 2, ANYCCL_GIN_SIGNAL = 3 };
struct anycclGinDesc {
  uint32_t op;
  int32_t peer;      /* world rank */
  int32_t dstMem;    /* PUT*: the destination window's ginMem */
  int32_t devComm;   /* the device communicator's number (its signals and counters) */
  uint64_t dstOff;
  uint64_t src;      /* PUT: the source address (this GPU); PUT_VALUE: the value's bytes */
  uint64_t bytes;
  uint64_t sigValue; /* added to the peer's signal */
  int32_t signal;    /* -1: none */
  int32_t counter;   /* mine, raised once the source was read; -1: none */
  uint64_t pad;
};
/* The FIFO trigger's second word for a GIN descriptor (a custom trigger, committed). */
#define ANYCCL_GIN_TRIGGER ((0x8ULL << 43) | (1ULL << 63))

typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclTeamRequirements ncclTeamRequirements_t;

struct ncclDevCommRequirements {
  ncclDevResourceRequirements_t* resourceRequirementsList;
  ncclTeamRequirements_t* teamRequirementsList;

  bool lsaMultimem; /* multicast on the LSA team: unsupported (ncclDevCommCreate says so) */

  int barrierCount;        /* world barriers (ncclBarrierSession): LSA barrier + rail GIN barrier */
  int lsaBarrierCount;
  int railGinBarrierCount;

  int lsaLLA2ABlockCount, lsaLLA2ASlotCount;

  bool ginForceEnable;
  int ginContextCount; /* a hint */
  int ginSignalCount;  /* ids 0.. */
  int ginCounterCount; /* ids 0.. */
};

struct ncclDevResourceRequirements {
  ncclDevResourceRequirements_t* next;
  size_t bufferSize, bufferAlign;
  ncclDevResourceHandle_t* outBufferHandle; /* set by ncclDevCommCreate when non-NULL */
  int ginSignalCount;
  int ginCounterCount;
  ncclGinSignal_t* outGinSignalStart;
  ncclGinCounter_t* outGinCounterStart;
};

struct ncclTeamRequirements {
  ncclTeamRequirements_t* next;
  ncclTeam_t team;
  bool multimem;
  ncclMultimemHandle_t* outMultimemHandle;
};

/* Filled by ncclDevCommCreate; passed to kernels by value. */
struct ncclDevComm {
  int rank, nRanks;
  uint32_t nRanks_rcp32;
  int lsaRank, lsaSize;
  uint32_t lsaSize_rcp32;

  ncclWindow_t resourceWindow; /* the communicator's own resource buffer (barriers, signals, ...) */

  ncclMultimemHandle_t lsaMultimem;
  ncclLsaBarrierHandle_t lsaBarrier;
  ncclGinBarrierHandle_t railGinBarrier;
  ncclLLA2AHandle_t lsaLLA2A;

  uint8_t ginContextCount;
  uint32_t ginSignalBase; /* always 0: ids index the signal array directly */
  int ginSignalCount;     /* all signals (the user's, then the resource requirements') */
  uint32_t ginCounterBase;
  int ginCounterCount;
  uint64_t* ginSignalShadows; /* local memory, ginSignalCount */

  /* anyccl's own */
  ncclDevResourceHandle_t ginSignalsHandle;  /* uint64_t[ginSignalCount] in the resource buffer */
  ncclDevResourceHandle_t ginCountersHandle; /* uint64_t[ginCounterCount] */
  /* host-mapped: ncclCommAbort sets abortFlag[0], every device wait watches
   * it; a device wait that gave up reports in abortFlag[1] (the error word) */
  volatile uint32_t* abortFlag;
  uint64_t timeoutNs; /* bound of every device wait (ANYCCL_DEV_TIMEOUT) */
  /* The resource window's bases, inline: barriers and signals find their
   * words from the kernel's parameters alone (a load of the window first
   * would hold up every barrier's stores by a memory round trip). */
  char* resourceLocal;
  char* resourceFlat;         /* LSA peer p's resource buffer at resourceFlat + p * resourceStride4G * 4 GiB */
  uint32_t resourceStride4G;
  /* GIN to ranks outside the LSA team (other hosts), through the
   * communicator's proxy (src/backend/cuda_gin.c); NULL: none. One pointer,
   * so that the structure stays small for programs built against NVIDIA's
   * layout that call ncclDevCommCreate (PyTorch). */
  const struct anycclGinProxyDev* ginProxy;
};

/* A device communicator's view of the GIN proxy (device memory, read-only
 * once made; the pointers are device views). Remote signal adds and the
 * counters of remote puts land in host words that only the proxy thread
 * raises: a signal's value is the device word (LSA adds) plus the host word. */
struct anycclGinProxyDev {
  uint64_t* fifoTrig;               /* 2 words per entry, host-mapped */
  unsigned long long* fifoHead;     /* [0] reservations, [1] the tail last read (device memory) */
  struct anycclGinDesc* descs;      /* one per entry, host-mapped */
  const uint64_t* tail;             /* entries the proxy took */
  const uint64_t* done;             /* every entry below it is complete (its source read) */
  const uint32_t* state;            /* nonzero: the proxy failed */
  uint64_t* hostSignals;            /* [ginSignalCount], or NULL */
  uint64_t* hostCounters;           /* [ginCounterCount], or NULL */
  uint32_t fifoSize;
  int devCommIndex;
};
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;

/* ---- host API (libnccl) ------------------------------------------------ */
NCCL_EXTERN_C ncclTeam_t ncclTeamWorld(ncclComm_t comm);
NCCL_EXTERN_C ncclTeam_t ncclTeamLsa(ncclComm_t comm);
NCCL_EXTERN_C ncclTeam_t ncclTeamRail(ncclComm_t comm);
NCCL_EXTERN_C int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
NCCL_EXTERN_C int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);
NCCL_EXTERN_C ncclTeam_t pncclTeamWorld(ncclComm_t comm);
NCCL_EXTERN_C ncclTeam_t pncclTeamLsa(ncclComm_t comm);
NCCL_EXTERN_C ncclTeam_t pncclTeamRail(ncclComm_t comm);
NCCL_EXTERN_C int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
NCCL_EXTERN_C int pncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);

NCCL_EXTERN_C ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                                           ncclLsaBarrierHandle_t* outHandle,
                                                           ncclDevResourceRequirements_t* outReq);
NCCL_EXTERN_C ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                                           ncclGinBarrierHandle_t* outHandle,
                                                           ncclDevResourceRequirements_t* outReq);
NCCL_EXTERN_C int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
NCCL_EXTERN_C ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
                                                      ncclDevResourceRequirements_t* outReq);
NCCL_EXTERN_C ncclResult_t pncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                                            ncclLsaBarrierHandle_t* outHandle,
                                                            ncclDevResourceRequirements_t* outReq);
NCCL_EXTERN_C ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                                            ncclGinBarrierHandle_t* outHandle,
                                                            ncclDevResourceRequirements_t* outReq);
NCCL_EXTERN_C int pncclLLA2ACalcSlots(int maxElts, int maxEltSize);
NCCL_EXTERN_C ncclResult_t pncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
                                                       ncclDevResourceRequirements_t* outReq);

/* ---- teams (host and device) ------------------------------------------- */
/* The world rank of member `peer` of team t, seen from a rank that is member
 * t.rank of t and world rank `self`. */
NCCL_HOST_DEVICE_INLINE int anycclTeamToWorld(int self, ncclTeam_t t, int peer) {
  return self + (peer - t.rank) * t.stride;
}

/* Is member bPeer of team b a member of team a (both teams hold this rank)? */
NCCL_HOST_DEVICE_INLINE bool ncclTeamRankIsMember(ncclTeam_t a, ncclTeam_t b, int bPeer) {
  int d = (bPeer - b.rank) * b.stride; /* world distance from this rank */
  if (a.stride == 0 || d % a.stride != 0) return false;
  int r = a.rank + d / a.stride;
  return r >= 0 && r < a.nRanks;
}
NCCL_HOST_DEVICE_INLINE int ncclTeamRankToTeam(ncclTeam_t a, ncclTeam_t b, int bPeer) {
  int d = (bPeer - b.rank) * b.stride;
  if (a.stride == 0 || d % a.stride != 0) return -1;
  int r = a.rank + d / a.stride;
  return r >= 0 && r < a.nRanks ? r : -1;
}
NCCL_HOST_DEVICE_INLINE ncclTeam_t ncclTeamInnerFactor(ncclTeam_t parent, int innerSize) {
  ncclTeam_t t;
  t.nRanks = innerSize;
  t.rank = parent.rank % innerSize;
  t.stride = parent.stride;
  return t;
}
NCCL_HOST_DEVICE_INLINE ncclTeam_t ncclTeamOuterFactor(ncclTeam_t parent, int innerSize) {
  ncclTeam_t t;
  t.nRanks = parent.nRanks / innerSize;
  t.rank = parent.rank / innerSize;
  t.stride = parent.stride * innerSize;
  return t;
}
/* The index'th member of parent that is not in subset (subset within parent). */
NCCL_HOST_DEVICE_INLINE int ncclTeamRankInDifference(ncclTeam_t parent, ncclTeam_t subset, int index) {
  for (int r = 0; r < parent.nRanks; r++) {
    if (ncclTeamRankIsMember(subset, parent, r)) continue;
    if (index-- == 0) return r;
  }
  return -1;
}
NCCL_HOST_DEVICE_INLINE size_t ncclGetResourceBufferOffset(ncclDevResourceHandle_t h) { return (size_t)h * 128; }

#ifdef __cplusplus
NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamWorld(ncclDevComm const& c) { return ncclTeam{c.nRanks, c.rank, 1}; }
NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamLsa(ncclDevComm const& c) { return ncclTeam{c.lsaSize, c.lsaRank, 1}; }
NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamRail(ncclDevComm const& c) {
  return ncclTeam{c.nRanks / c.lsaSize, c.rank / c.lsaSize, c.lsaSize};
}
NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamWorld(ncclDevComm const& c, ncclTeamTagWorld) { return ncclTeamWorld(c); }
NCCL_HOST_DEVICE_INLINE int ncclTeamRankToWorld(ncclDevComm const& c, ncclTeam t, int rank) {
  return anycclTeamToWorld(c.rank, t, rank);
}
NCCL_HOST_DEVICE_INLINE int ncclTeamRankToLsa(ncclDevComm const& c, ncclTeam t, int rank) {
  int lsa = anycclTeamToWorld(c.rank, t, rank) - (c.rank - c.lsaRank);
  return lsa >= 0 && lsa < c.lsaSize ? lsa : -1;
}
#endif

/* codes in abortFlag[1] (the cuda backend's error word; ncclCommGetAsyncError) */
enum { ANYCCL_DEV_ERR_TIMEOUT = 16, ANYCCL_DEV_ERR_UNREACHABLE = 17 };

/* ---- windows and pointers (device) --------------------------------------- */
#if defined(__CUDACC__)
/* A window's record does not change while a kernel can use it, so its
 * loads are pure functions of the address (no volatile, no memory clobber:
 * the compiler hoists them out of the program's loops) and ordinary cached
 * loads rather than read-only-path ones, which ptxas schedules with a
 * longer latency (tests/gpu/sass_loops.py). */
NCCL_DEVICE_INLINE unsigned long long anycclWinWord(const void* p) {
  unsigned long long v;
  asm("ld.global.ca.u64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}
NCCL_DEVICE_INLINE void* ncclGetLocalPointer(ncclWindow_t w, size_t offset) {
  return (char*)__ldg((const unsigned long long*)&w->localBase) + offset;
}
/* peer: a member of this rank's LSA team. Arithmetic only: the peers'
 * allocations are mapped side by side. */
/* Slot `peer` of a flat mapping (slots 4 GiB apart): only the high word
 * depends on the peer. The add is opaque to the compiler, which then keeps
 * more of a thread's guarded peer loads in flight in nccl-tests' vectorised
 * kernel (8-load loop: critical path 3 loads against 4 with a plain 64-bit
 * add). */
NCCL_DEVICE_INLINE void* anycclFlatSlot(unsigned long long flat, unsigned stride4G, int peer) {
  unsigned long long p;
  asm("{.reg .u32 lo, hi;\n\t"
      "mov.b64 {lo, hi}, %1;\n\t"
      "add.u32 hi, hi, %2;\n\t"
      "mov.b64 %0, {lo, hi};}"
      : "=l"(p)
      : "l"(flat), "r"((unsigned)peer * stride4G));
  return (void*)p;
}
NCCL_DEVICE_INLINE void* ncclGetLsaPointer(ncclWindow_t w, size_t offset, int peer) {
  unsigned stride4G;
  asm("ld.global.ca.u32 %0, [%1];" : "=r"(stride4G) : "l"(&w->lsaStride4G));
  return anycclFlatSlot(anycclWinWord(&w->lsaFlat) + offset, stride4G, peer);
}
/* peer: a world rank; NULL when it is not reachable by load/store. */
NCCL_DEVICE_INLINE void* ncclGetPeerPointer(ncclWindow_t w, size_t offset, int peer) {
  int lsaRank = __ldg(&w->lsaRank), lsaSize = __ldg(&w->lsaSize), world = __ldg(&w->worldRank);
  int lsa = peer - (world - lsaRank);
  return lsa >= 0 && lsa < lsaSize ? ncclGetLsaPointer(w, offset, lsa) : nullptr;
}
NCCL_DEVICE_INLINE void* ncclGetPeerPointer(ncclWindow_t w, size_t offset, ncclTeam tm, int peer) {
  return ncclGetPeerPointer(w, offset, anycclTeamToWorld(__ldg(&w->worldRank), tm, peer));
}
/* Multicast (NVLink SHARP) is not supported: these return NULL, and
 * ncclDevCommCreate refuses lsaMultimem. */
NCCL_DEVICE_INLINE void* ncclGetMultimemPointer(ncclWindow_t, size_t, ncclMultimemHandle) { return nullptr; }
NCCL_DEVICE_INLINE void* ncclGetLsaMultimemPointer(ncclWindow_t, size_t, ncclDevComm const&) { return nullptr; }

NCCL_DEVICE_INLINE void* ncclGetResourceBufferLocalPointer(ncclDevComm const& c, ncclDevResourceHandle h) {
  return c.resourceLocal + ncclGetResourceBufferOffset(h);
}
NCCL_DEVICE_INLINE void* ncclGetResourceBufferLsaPointer(ncclDevComm const& c, ncclDevResourceHandle h, int peer) {
  return anycclFlatSlot((unsigned long long)c.resourceFlat + ncclGetResourceBufferOffset(h), c.resourceStride4G, peer);
}
NCCL_DEVICE_INLINE void* ncclGetResourceBufferPeerPointer(ncclDevComm const& c, ncclDevResourceHandle h, ncclTeam t,
                                                          int peer) {
  int lsa = anycclTeamToWorld(c.rank, t, peer) - (c.rank - c.lsaRank);
  return lsa >= 0 && lsa < c.lsaSize ? ncclGetResourceBufferLsaPointer(c, h, lsa) : nullptr;
}
NCCL_DEVICE_INLINE void* ncclGetResourceBufferMultimemPointer(ncclDevComm const&, ncclDevResourceHandle,
                                                              ncclMultimemHandle) {
  return nullptr;
}
NCCL_DEVICE_INLINE void* ncclGetResourceBufferLsaMultimemPointer(ncclDevComm const&, ncclDevResourceHandle) {
  return nullptr;
}

/* ---- bounded device waits ----------------------------------------------- */

NCCL_DEVICE_INLINE uint64_t anycclDevNow() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
NCCL_DEVICE_INLINE void anycclDevReport(ncclDevComm const& c, uint32_t err) {
  if (c.abortFlag) atomicCAS((unsigned int*)c.abortFlag + 1, 0u, err);
}
/* The cold half of every bounded wait, out of line so that the loops that
 * spin stay small: called every 1024 polls with the time the wait began (0
 * on the first call); returns it, or 0 when the wait must stop (abort, an
 * earlier failure, or timeoutNs passed: a timeout is reported). */
inline __device__ __noinline__ uint64_t anycclDevWaitCheck(volatile uint32_t* flag, uint64_t timeoutNs, uint64_t t0) {
  if (flag && (flag[0] || flag[1])) return 0;
  uint64_t now = anycclDevNow() | 1; /* never 0 */
  if (t0 == 0) return now;
  if (timeoutNs && now - t0 > timeoutNs) {
    if (flag) atomicCAS((unsigned int*)flag + 1, 0u, (unsigned int)ANYCCL_DEV_ERR_TIMEOUT);
    return 0;
  }
  return t0;
}
/* Called now and then by a spinning thread: true when it must stop waiting
 * (*t0: 0 before the first call). */
NCCL_DEVICE_INLINE bool anycclDevGiveUp(ncclDevComm const& c, uint64_t* t0) {
  *t0 = anycclDevWaitCheck(c.abortFlag, c.timeoutNs, *t0);
  return *t0 == 0;
}
/* Wait until `least` is rolling-less-or-equal to *p (bits wide). */
template <typename T>
NCCL_DEVICE_INLINE T anycclDevWaitAtLeast(ncclDevComm const& c, T* p, T least, int bits = 8 * sizeof(T),
                                          cuda::memory_order order = cuda::memory_order_acquire) {
  cuda::atomic_ref<T, cuda::thread_scope_system> ref(*p);
  T m = bits >= (int)(8 * sizeof(T)) ? T(-1) : (T(1) << bits) - 1;
  uint64_t t0 = 0;
#pragma unroll 1
  for (uint32_t spins = 0;; spins++) {
    T v = ref.load(order);
    if ((T)((v - least) & m) <= (m >> 1)) return v & m;
    if ((spins & 1023) == 1023 && anycclDevGiveUp(c, &t0)) return v & m;
  }
}
#endif /* __CUDACC__ */

#endif
