/*
 * anyccl -- NCCL 2.28's device API: GPU-initiated networking (GIN).
 *
 * This build reaches the peers of the LSA team (the ranks of this host) by
 * pointers: put() copies through the peer's mapping of the destination
 * window, then a release add on the peer's signal; flush() has nothing left
 * in flight. A peer outside the LSA team is reported as an error
 * (ncclCommGetAsyncError) and the operation is dropped: ncclDevCommCreate
 * refuses GIN requirements on communicators that span hosts.
 * Signals and counters are uint64_t arrays in the resource buffer.
 * Written for anyccl from NCCL's published interface.
 */
#ifndef ANYCCL_NCCL_DEVICE_GIN_H
#define ANYCCL_NCCL_DEVICE_GIN_H

#include "core.h"
#include "lsa_barrier.h"

#define NCCL_GIN_BACKEND_MASK_ALL 0xffffffffu

#if defined(__CUDACC__)
enum class ncclGinFenceLevel { Relaxed };

struct ncclGinDescriptorSmem {
  uint64_t space[8];
};
struct ncclGin_None {};
struct ncclGin_SignalAdd {
  ncclGinSignal_t signal;
  uint64_t value;
};
struct ncclGin_SignalInc {
  ncclGinSignal_t signal;
};
struct ncclGin_CounterInc {
  ncclGinCounter_t counter;
};
struct ncclGin_DescriptorSmem {
  ncclGinDescriptorSmem* descriptor;
};

/* Cooperative byte copy (16-byte words when both ends allow). */
template <typename Coop>
NCCL_DEVICE_INLINE void anycclDevCopy(Coop coop, char* dst, const char* src, size_t bytes) {
  size_t t = coop.thread_rank(), n = coop.size(), head = 0;
  if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
    size_t words = bytes / 16, i = t;
    const uint4* s = (const uint4*)src;
    uint4* d = (uint4*)dst;
    for (; i + 7 * n < words; i += 8 * n) { /* 8 loads in flight: one thread alone still moves GB/s */
      uint4 v[8];
#pragma unroll
      for (int k = 0; k < 8; k++) v[k] = s[i + k * n];
#pragma unroll
      for (int k = 0; k < 8; k++) d[i + k * n] = v[k];
    }
    for (; i < words; i += n) d[i] = s[i];
    head = words * 16;
  }
  for (size_t i = head + t; i < bytes; i += n) dst[i] = src[i];
}

template <unsigned backendMask>
struct ncclGin_BackendMask {
  ncclDevComm const& comm;
  uint32_t nContexts : 8, contextId : 8, _ginBackend : 8;

  NCCL_DEVICE_INLINE ncclGin_BackendMask(ncclDevComm const& c, int contextIndex)
      : comm(c), nContexts(c.ginContextCount), contextId(contextIndex), _ginBackend(0) {}

  NCCL_DEVICE_INLINE uint64_t* signals() const {
    return (uint64_t*)ncclGetResourceBufferLocalPointer(comm, comm.ginSignalsHandle);
  }
  NCCL_DEVICE_INLINE uint64_t* counters() const {
    return (uint64_t*)ncclGetResourceBufferLocalPointer(comm, comm.ginCountersHandle);
  }
  /* The peer's copy of signal s, or NULL (reported) when it is out of reach. */
  NCCL_DEVICE_INLINE uint64_t* peerSignal(ncclTeam team, int peer, ncclGinSignal_t s) const {
    if ((int)s >= comm.ginSignalCount) {
      anycclDevReport(comm, ANYCCL_DEV_ERR_UNREACHABLE);
      return nullptr;
    }
    uint64_t* p = (uint64_t*)ncclGetResourceBufferPeerPointer(comm, comm.ginSignalsHandle, team, peer);
    if (p == nullptr) anycclDevReport(comm, ANYCCL_DEV_ERR_UNREACHABLE);
    return p ? p + s : nullptr;
  }
  NCCL_DEVICE_INLINE void remote(ncclTeam, int, ncclGin_None) const {}
  NCCL_DEVICE_INLINE void remote(ncclTeam t, int peer, ncclGin_SignalInc a) const {
    uint64_t* p = peerSignal(t, peer, a.signal);
    if (p) cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*p).fetch_add(1, cuda::memory_order_release);
  }
  NCCL_DEVICE_INLINE void remote(ncclTeam t, int peer, ncclGin_SignalAdd a) const {
    uint64_t* p = peerSignal(t, peer, a.signal);
    if (p) cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*p).fetch_add(a.value, cuda::memory_order_release);
  }
  NCCL_DEVICE_INLINE void local(ncclGin_None) const {}
  NCCL_DEVICE_INLINE void local(ncclGin_CounterInc a) const {
    if ((int)a.counter >= comm.ginCounterCount) {
      anycclDevReport(comm, ANYCCL_DEV_ERR_UNREACHABLE);
      return;
    }
    cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(counters()[a.counter]).fetch_add(1, cuda::memory_order_release);
  }

  template <typename RemoteAction = ncclGin_None, typename LocalAction = ncclGin_None,
            typename Coop = ncclCoopThread, typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void put(ncclTeam team, int peer, ncclWindow_t dstWnd, size_t dstOffset, ncclWindow_t srcWnd,
                              size_t srcOffset, size_t bytes, RemoteAction remoteAction = ncclGin_None{},
                              LocalAction localAction = ncclGin_None{}, Coop coop = ncclCoopThread{},
                              DescriptorSmem = ncclGin_None{},
                              cuda::thread_scope = cuda::thread_scope_thread,
                              cuda::thread_scope = cuda::thread_scope_device) const {
    char* dst = (char*)ncclGetPeerPointer(dstWnd, dstOffset, team, peer);
    if (dst == nullptr) {
      anycclDevReport(comm, ANYCCL_DEV_ERR_UNREACHABLE);
      return;
    }
    anycclDevCopy(coop, dst, (const char*)ncclGetLocalPointer(srcWnd, srcOffset), bytes);
    coop.sync();
    if (coop.thread_rank() == 0) {
      local(localAction);
      remote(team, peer, remoteAction);
    }
    coop.sync();
  }
  template <typename T, typename RemoteAction = ncclGin_None, typename Coop = ncclCoopThread,
            typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void putValue(ncclTeam team, int peer, ncclWindow_t dstWnd, size_t dstOffset, T value,
                                   RemoteAction remoteAction = ncclGin_None{}, Coop coop = ncclCoopThread{},
                                   DescriptorSmem = ncclGin_None{},
                                   cuda::thread_scope = cuda::thread_scope_thread,
                                   cuda::thread_scope = cuda::thread_scope_device) const {
    static_assert(sizeof(T) <= 8, "putValue: at most 8 bytes");
    coop.sync();
    if (coop.thread_rank() == 0) {
      T* dst = (T*)ncclGetPeerPointer(dstWnd, dstOffset, team, peer);
      if (dst == nullptr) anycclDevReport(comm, ANYCCL_DEV_ERR_UNREACHABLE);
      else {
        *(volatile T*)dst = value;
        remote(team, peer, remoteAction);
      }
    }
    coop.sync();
  }
  template <typename RemoteAction, typename Coop = ncclCoopThread, typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void signal(ncclTeam team, int peer, RemoteAction remoteAction, Coop coop = ncclCoopThread(),
                                 DescriptorSmem = ncclGin_None{},
                                 cuda::thread_scope = cuda::thread_scope_thread,
                                 cuda::thread_scope = cuda::thread_scope_device) const {
    coop.sync();
    if (coop.thread_rank() == 0) remote(team, peer, remoteAction);
    coop.sync();
  }
  /* Puts complete before they return here: nothing is left in flight. */
  template <typename Coop>
  NCCL_DEVICE_INLINE void flush(Coop coop, cuda::memory_order = cuda::memory_order_acquire) const {
    coop.sync();
  }

  NCCL_DEVICE_INLINE uint64_t readCounter(ncclGinCounter_t c, int bits = 56,
                                          cuda::memory_order ord = cuda::memory_order_acquire) const {
    uint64_t v = cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(counters()[c]).load(cuda::memory_order_acquire);
    return bits >= 64 ? v : v & ((uint64_t(1) << bits) - 1);
  }
  template <typename Coop>
  NCCL_DEVICE_INLINE void waitCounter(Coop coop, ncclGinCounter_t c, uint64_t least, int bits = 56,
                                      cuda::memory_order = cuda::memory_order_acquire) const {
    if (coop.thread_rank() == 0) anycclDevWaitAtLeast<uint64_t>(comm, &counters()[c], least, bits);
    coop.sync();
  }
  NCCL_DEVICE_INLINE uint64_t* getSignalShadowPtr(ncclGinSignal_t s) const { return &comm.ginSignalShadows[s]; }
  NCCL_DEVICE_INLINE void increaseSignalShadow(ncclGinSignal_t s, uint64_t delta) const {
    comm.ginSignalShadows[s] += delta;
  }
  NCCL_DEVICE_INLINE uint64_t readSignal(ncclGinSignal_t s, int bits = 64,
                                         cuda::memory_order = cuda::memory_order_acquire) const {
    uint64_t v = cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(signals()[s]).load(cuda::memory_order_acquire);
    return bits >= 64 ? v : v & ((uint64_t(1) << bits) - 1);
  }
  template <typename Coop>
  NCCL_DEVICE_INLINE void waitSignal(Coop coop, ncclGinSignal_t s, uint64_t least, int bits = 64,
                                     cuda::memory_order = cuda::memory_order_acquire) const {
    if (coop.thread_rank() == 0) anycclDevWaitAtLeast<uint64_t>(comm, &signals()[s], least, bits);
    coop.sync();
  }
  template <typename Coop>
  NCCL_DEVICE_INLINE void waitSignalMeetShadow(Coop coop, ncclGinSignal_t s, int bits = 64,
                                               cuda::memory_order ord = cuda::memory_order_acquire) const {
    waitSignal(coop, s, comm.ginSignalShadows[s], bits, ord);
  }
  template <typename Coop, typename Uint>
  NCCL_DEVICE_INLINE void waitSignalFollowShadow(Coop coop, ncclGinSignal_t s, Uint leastDelta, Uint* before,
                                                 Uint* delta, int bits = 64,
                                                 cuda::memory_order = cuda::memory_order_acquire) const {
    uint64_t old = comm.ginSignalShadows[s];
    uint64_t now = old;
    if (coop.thread_rank() == 0) now = anycclDevWaitAtLeast<uint64_t>(comm, &signals()[s], old + leastDelta, bits);
    now = ncclCoopBcast(coop, now, 0);
    if (coop.thread_rank() == 0) comm.ginSignalShadows[s] = now;
    *before = (Uint)old;
    *delta = (Uint)(now - old);
    coop.sync();
  }
  NCCL_DEVICE_INLINE void resetCounter(ncclGinCounter_t c) const { counters()[c] = 0; }
  NCCL_DEVICE_INLINE void resetSignal(ncclGinSignal_t s) const {
    signals()[s] = 0;
    comm.ginSignalShadows[s] = 0;
  }
};
using ncclGin = ncclGin_BackendMask<NCCL_GIN_BACKEND_MASK_ALL>;

/* A barrier over a team reached through GIN signals: signal handle.signal0 +
 * index on every other member, then wait for (syncs so far) x (n - 1) on my
 * own. The sync count lives in the resource buffer (uint32_t[nBarriers]). */
template <typename Coop>
struct ncclGinBarrierSession {
  Coop coop;
  ncclGin net;
  ncclTeam team;
  ncclGinBarrierHandle handle;
  int index;
  bool active;
  uint32_t epoch;

  NCCL_DEVICE_INLINE uint32_t* state() const {
    return (uint32_t*)ncclGetResourceBufferLocalPointer(net.comm, handle.bufHandle);
  }
  NCCL_DEVICE_INLINE ncclGinBarrierSession(Coop c, ncclGin g, ncclTeam t, ncclGinBarrierHandle h, uint32_t idx)
      : coop(c), net(g), team(t), handle(h), index((int)idx), active(t.nRanks > 1), epoch(0) {
    if (active) epoch = state()[index];
  }
  NCCL_DEVICE_INLINE ncclGinBarrierSession(Coop c, ncclGin g, ncclTeamTagRail, uint32_t idx)
      : ncclGinBarrierSession(c, g, ncclTeamRail(g.comm), g.comm.railGinBarrier, idx) {}
  NCCL_DEVICE_INLINE ncclGinBarrierSession(anycclAbsent, Coop c, ncclGin g)
      : coop(c), net(g), team{1, 0, 1}, handle{0, 0}, index(0), active(false), epoch(0) {}
  ncclGinBarrierSession(ncclGinBarrierSession const&) = delete;
  NCCL_DEVICE_INLINE ~ncclGinBarrierSession() {
    if (active && coop.thread_rank() == 0) state()[index] = epoch;
  }
  NCCL_DEVICE_INLINE void sync(Coop, cuda::memory_order, ncclGinFenceLevel) {
    if (!active) return;
    ncclGinSignal_t s = handle.signal0 + index;
    coop.sync();
    for (int q = coop.thread_rank(); q < team.nRanks; q += coop.size())
      if (q != team.rank) net.remote(team, q, ncclGin_SignalInc{s});
    epoch++;
    coop.sync();
    if (coop.thread_rank() == 0)
      anycclDevWaitAtLeast<uint64_t>(net.comm, &net.signals()[s], (uint64_t)epoch * (team.nRanks - 1));
    coop.sync();
  }
};
#endif

#endif
