/*
 * anyccl -- NCCL 2.28's device API: GPU-initiated networking (GIN).
 *
 * Peers of the LSA team (the ranks of this host) are reached by pointers:
 * put() copies through the peer's mapping of the destination window, then a
 * release add on the peer's signal. Peers outside it (other hosts) through
 * the communicator's proxy: one thread writes a 64-byte descriptor beside a
 * FIFO entry and commits the entry; the proxy thread stages the source
 * through pinned host memory and sends it, the peer's proxy copies it into
 * the window and then adds the signal to a host-mapped word of which it is
 * the only writer. A signal's value is its device word (LSA adds) plus that
 * host word (remote adds); both only grow, so waits stay correct. Counters
 * likewise (a remote put's counter rises once its source was read).
 * flush() waits until the proxy has read the source of every operation
 * taken into the FIFO before it. Written for anyccl from NCCL's published
 * interface.
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

/* ---- ranks outside the LSA team: descriptors through the proxy FIFO ---- */
NCCL_DEVICE_INLINE bool anycclGinPush(ncclDevComm const& c, anycclGinDesc const& d) {
  const anycclGinProxyDev* p = c.ginProxy;
  if (p == nullptr) { /* this communicator has no proxy (one host) */
    anycclDevReport(c, ANYCCL_DEV_ERR_UNREACHABLE);
    return false;
  }
  unsigned long long* head = (unsigned long long*)__ldg((const unsigned long long*)&p->fifoHead);
  const uint64_t* tail = (const uint64_t*)__ldg((const unsigned long long*)&p->tail);
  const uint32_t* state = (const uint32_t*)__ldg((const unsigned long long*)&p->state);
  uint32_t size = __ldg(&p->fifoSize);
  /* head[1] caches the last tail a producer read: the fast path reads no host memory */
  uint64_t s = atomicAdd(head, 1ULL);
  uint64_t t0 = 0;
  for (uint32_t spins = 0; s - *(volatile const uint64_t*)(head + 1) >= size; spins++) {
    atomicMax(head + 1, (unsigned long long)*(volatile const uint64_t*)tail);
    if (s - *(volatile const uint64_t*)(head + 1) < size) break;
    if (*(volatile const uint32_t*)state) {
      anycclDevReport(c, ANYCCL_DEV_ERR_UNREACHABLE);
      return false;
    }
    if ((spins & 1023) == 1023 && anycclDevGiveUp(c, &t0)) return false;
  }
  uint32_t slot = (uint32_t)(s & (size - 1));
  anycclGinDesc* descs = (anycclGinDesc*)__ldg((const unsigned long long*)&p->descs);
  volatile uint64_t* to = (volatile uint64_t*)&descs[slot];
  const uint64_t* from = (const uint64_t*)&d;
#pragma unroll
  for (int i = 0; i < 8; i++) to[i] = from[i];
  volatile uint64_t* e = (uint64_t*)__ldg((const unsigned long long*)&p->fifoTrig) + 2 * slot;
  e[0] = s;
  __threadfence_system(); /* the descriptor before the commit */
  e[1] = ANYCCL_GIN_TRIGGER;
  return true;
}
/* The proxy's host words of this device communicator (NULL: none). */
NCCL_DEVICE_INLINE uint64_t* anycclGinHostSignals(ncclDevComm const& c) {
  return c.ginProxy ? (uint64_t*)__ldg((const unsigned long long*)&c.ginProxy->hostSignals) : nullptr;
}
NCCL_DEVICE_INLINE uint64_t* anycclGinHostCounters(ncclDevComm const& c) {
  return c.ginProxy ? (uint64_t*)__ldg((const unsigned long long*)&c.ginProxy->hostCounters) : nullptr;
}
NCCL_DEVICE_INLINE int anycclGinDevCommIndex(ncclDevComm const& c) {
  return c.ginProxy ? __ldg(&c.ginProxy->devCommIndex) : -1;
}
/* A signal or counter: the device word plus the host word (remote adds). */
NCCL_DEVICE_INLINE uint64_t anycclGinSum(uint64_t* dev, uint64_t* host) {
  uint64_t v = cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*dev).load(cuda::memory_order_acquire);
  if (host) v += cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*host).load(cuda::memory_order_acquire);
  return v;
}
NCCL_DEVICE_INLINE uint64_t anycclGinWaitSum(ncclDevComm const& c, uint64_t* dev, uint64_t* host, uint64_t least,
                                             int bits) {
  uint64_t m = bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
  uint64_t t0 = 0;
  for (uint32_t spins = 0;; spins++) {
    uint64_t v = anycclGinSum(dev, host);
    if (((v - least) & m) <= (m >> 1)) return v & m;
    if ((spins & 1023) == 1023 && anycclDevGiveUp(c, &t0)) return v & m;
  }
}
NCCL_DEVICE_INLINE int32_t anycclGinSignalOf(ncclGin_None, uint64_t* v) { return *v = 0, -1; }
NCCL_DEVICE_INLINE int32_t anycclGinSignalOf(ncclGin_SignalInc a, uint64_t* v) { return *v = 1, (int32_t)a.signal; }
NCCL_DEVICE_INLINE int32_t anycclGinSignalOf(ncclGin_SignalAdd a, uint64_t* v) {
  return *v = a.value, (int32_t)a.signal;
}
NCCL_DEVICE_INLINE int32_t anycclGinCounterOf(ncclGin_None) { return -1; }
NCCL_DEVICE_INLINE int32_t anycclGinCounterOf(ncclGin_CounterInc a) { return (int32_t)a.counter; }

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
  NCCL_DEVICE_INLINE uint64_t* hostSignal(ncclGinSignal_t s) const {
    uint64_t* h = anycclGinHostSignals(comm);
    return h ? h + s : nullptr;
  }
  NCCL_DEVICE_INLINE uint64_t* hostCounter(ncclGinCounter_t c) const {
    uint64_t* h = anycclGinHostCounters(comm);
    return h ? h + c : nullptr;
  }
  /* Add v to signal s of team member peer: by pointer inside the LSA team, else through the proxy. */
  NCCL_DEVICE_INLINE void signalAdd(ncclTeam team, int peer, ncclGinSignal_t s, uint64_t v) const {
    if ((int)s >= comm.ginSignalCount) {
      anycclDevReport(comm, ANYCCL_DEV_ERR_UNREACHABLE);
      return;
    }
    uint64_t* p = (uint64_t*)ncclGetResourceBufferPeerPointer(comm, comm.ginSignalsHandle, team, peer);
    if (p) {
      cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(p[s]).fetch_add(v, cuda::memory_order_release);
      return;
    }
    __threadfence_system(); /* this thread's earlier writes before the proxy reads anything after */
    anycclGinDesc d = {ANYCCL_GIN_SIGNAL, anycclTeamToWorld(comm.rank, team, peer), -1, anycclGinDevCommIndex(comm), 0, 0, 0,
                       v, (int32_t)s, -1, 0};
    anycclGinPush(comm, d);
  }
  NCCL_DEVICE_INLINE void remote(ncclTeam, int, ncclGin_None) const {}
  NCCL_DEVICE_INLINE void remote(ncclTeam t, int peer, ncclGin_SignalInc a) const { signalAdd(t, peer, a.signal, 1); }
  NCCL_DEVICE_INLINE void remote(ncclTeam t, int peer, ncclGin_SignalAdd a) const {
    signalAdd(t, peer, a.signal, a.value);
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
    if (dst == nullptr) { /* another host: one descriptor through the proxy (the source is read there) */
      coop.sync();
      if (coop.thread_rank() == 0) {
        uint64_t v;
        int32_t sig = anycclGinSignalOf(remoteAction, &v);
        int32_t ctr = anycclGinCounterOf(localAction);
        int32_t mem = __ldg(&dstWnd->ginMem);
        if (mem < 0 || (sig >= 0 && sig >= comm.ginSignalCount) || ctr >= comm.ginCounterCount) {
          anycclDevReport(comm, ANYCCL_DEV_ERR_UNREACHABLE);
        } else {
          __threadfence_system(); /* the group's writes of the source before the proxy's copy */
          anycclGinDesc d = {ANYCCL_GIN_PUT, anycclTeamToWorld(comm.rank, team, peer), mem, anycclGinDevCommIndex(comm),
                             dstOffset, (uint64_t)(uintptr_t)ncclGetLocalPointer(srcWnd, srcOffset), bytes, v, sig,
                             ctr, 0};
          anycclGinPush(comm, d);
        }
      }
      coop.sync();
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
      if (dst == nullptr) {
        uint64_t v, bits = 0;
        int32_t sig = anycclGinSignalOf(remoteAction, &v);
        int32_t mem = __ldg(&dstWnd->ginMem);
        memcpy(&bits, &value, sizeof(T));
        if (mem < 0 || (sig >= 0 && sig >= comm.ginSignalCount)) {
          anycclDevReport(comm, ANYCCL_DEV_ERR_UNREACHABLE);
        } else {
          anycclGinDesc d = {ANYCCL_GIN_PUT_VALUE, anycclTeamToWorld(comm.rank, team, peer), mem,
                             anycclGinDevCommIndex(comm), dstOffset, bits, sizeof(T), v, sig, -1, 0};
          anycclGinPush(comm, d);
        }
      } else {
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
  /* LSA puts complete before they return; a put to another host once the
   * proxy read its source: wait until it has for every entry taken so far. */
  template <typename Coop>
  NCCL_DEVICE_INLINE void flush(Coop coop, cuda::memory_order = cuda::memory_order_acquire) const {
    coop.sync();
    const anycclGinProxyDev* p = comm.ginProxy;
    if (coop.thread_rank() == 0 && p) {
      const uint64_t* done = (const uint64_t*)__ldg((const unsigned long long*)&p->done);
      const uint32_t* state = (const uint32_t*)__ldg((const unsigned long long*)&p->state);
      uint64_t want = atomicAdd((unsigned long long*)__ldg((const unsigned long long*)&p->fifoHead), 0ULL), t0 = 0;
      for (uint32_t spins = 0; (int64_t)(*(volatile const uint64_t*)done - want) < 0; spins++) {
        if (*(volatile const uint32_t*)state) {
          anycclDevReport(comm, ANYCCL_DEV_ERR_UNREACHABLE);
          break;
        }
        if ((spins & 1023) == 1023 && anycclDevGiveUp(comm, &t0)) break;
      }
    }
    coop.sync();
  }

  NCCL_DEVICE_INLINE uint64_t readCounter(ncclGinCounter_t c, int bits = 56,
                                          cuda::memory_order ord = cuda::memory_order_acquire) const {
    uint64_t v = anycclGinSum(&counters()[c], hostCounter(c));
    return bits >= 64 ? v : v & ((uint64_t(1) << bits) - 1);
  }
  template <typename Coop>
  NCCL_DEVICE_INLINE void waitCounter(Coop coop, ncclGinCounter_t c, uint64_t least, int bits = 56,
                                      cuda::memory_order = cuda::memory_order_acquire) const {
    if (coop.thread_rank() == 0) anycclGinWaitSum(comm, &counters()[c], hostCounter(c), least, bits);
    coop.sync();
  }
  NCCL_DEVICE_INLINE uint64_t* getSignalShadowPtr(ncclGinSignal_t s) const { return &comm.ginSignalShadows[s]; }
  NCCL_DEVICE_INLINE void increaseSignalShadow(ncclGinSignal_t s, uint64_t delta) const {
    comm.ginSignalShadows[s] += delta;
  }
  NCCL_DEVICE_INLINE uint64_t readSignal(ncclGinSignal_t s, int bits = 64,
                                         cuda::memory_order = cuda::memory_order_acquire) const {
    uint64_t v = anycclGinSum(&signals()[s], hostSignal(s));
    return bits >= 64 ? v : v & ((uint64_t(1) << bits) - 1);
  }
  template <typename Coop>
  NCCL_DEVICE_INLINE void waitSignal(Coop coop, ncclGinSignal_t s, uint64_t least, int bits = 64,
                                     cuda::memory_order = cuda::memory_order_acquire) const {
    if (coop.thread_rank() == 0) anycclGinWaitSum(comm, &signals()[s], hostSignal(s), least, bits);
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
    if (coop.thread_rank() == 0) now = anycclGinWaitSum(comm, &signals()[s], hostSignal(s), old + leastDelta, bits);
    now = ncclCoopBcast(coop, now, 0);
    if (coop.thread_rank() == 0) comm.ginSignalShadows[s] = now;
    *before = (Uint)old;
    *delta = (Uint)(now - old);
    coop.sync();
  }
  /* Both parts (no operation on them may be in flight, as in NCCL). */
  NCCL_DEVICE_INLINE void resetCounter(ncclGinCounter_t c) const {
    counters()[c] = 0;
    if (uint64_t* h = hostCounter(c)) *(volatile uint64_t*)h = 0;
  }
  NCCL_DEVICE_INLINE void resetSignal(ncclGinSignal_t s) const {
    signals()[s] = 0;
    if (uint64_t* h = hostSignal(s)) *(volatile uint64_t*)h = 0;
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
      anycclGinWaitSum(net.comm, &net.signals()[s], net.hostSignal(s), (uint64_t)epoch * (team.nRanks - 1), 64);
    coop.sync();
  }
};
#endif

#endif
