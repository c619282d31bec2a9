/* anyccl one-sided channels: a proxy service, registered memory, semaphores,
 * port channels and memory channels (the model of MSCCL++'s ProxyService,
 * PortChannel and MemoryChannel, in C).
 *
 * Host half (functions of libnccl): create a proxy service on a
 * communicator, register memory, exchange memory and semaphores with peers,
 * build channels, start/stop the proxy thread.
 *
 * Device half (inline functions below, marked ANYCCL_PORT_DEV): what a GPU
 * kernel calls, one thread per call for port channels, a group of threads
 * for memory channel copies. The same functions compile in plain C: on the
 * cpu backend, host threads stand in for device code and call them.
 *
 * A port channel call writes a 16-byte trigger into the service's FIFO; the
 * proxy thread takes it and moves the bytes (memcpy inside a host on the cpu
 * backend, cudaMemcpyAsync on GPUs, messages through the network transport
 * to another host), then bumps the peer's semaphore. All functions return an
 * ncclResult_t; device functions never block without a bound. */
#ifndef ANYCCL_PORT_H
#define ANYCCL_PORT_H

#include <stddef.h>
#include <stdint.h>
#include "nccl.h"

#if defined(__CUDACC__)
#define ANYCCL_PORT_DEV __device__ __forceinline__
#else
#define ANYCCL_PORT_DEV static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- identifiers and limits ---------------------------------------------- */
typedef int32_t anycclMemoryId;    /* a registered (local) or imported (remote) memory */
typedef int32_t anycclSemaphoreId; /* a semaphore of this service */
typedef struct anycclProxyService* anycclProxyService_t;

#define ANYCCL_PORT_MAX_PUT (1ULL << 32)   /* bytes one trigger carries; larger puts take several */
#define ANYCCL_PORT_MAX_OFFSET (1ULL << 37) /* offsets inside a memory (128 GiB) */
#define ANYCCL_PORT_MAGIC 0x504f5254u       /* "PORT": a handle made by anycclPortChannelCreate */
#define ANYCCL_MEMCHAN_MAGIC 0x4d454d43u    /* "MEMC" */

/* ---- the trigger (16 bytes) ----------------------------------------------
 * w0: [0,37) source offset, [37,64) size bits 0..26
 * w1: [0,37) destination offset, [37,43) size bits 27..32, [43,47) type,
 *     [47,63) channel id, [63] commit (set last: a half-written trigger is
 *     never taken). A custom trigger (type bit 3) carries w0 and w1's bits
 *     [0,43) and [47,63) for the handler. */
#define ANYCCL_TRIG_PUT 0x1u
#define ANYCCL_TRIG_SIGNAL 0x2u
#define ANYCCL_TRIG_FLUSH 0x4u
#define ANYCCL_TRIG_CUSTOM 0x8u
#define ANYCCL_TRIG_COMMIT (1ULL << 63)
#define ANYCCL_TRIG_OFF_MASK ((1ULL << 37) - 1)

/* Proxy -> producers, in host memory (host-mapped on GPUs). */
struct anycclPortShared {
  uint64_t tail;          /* triggers taken by the proxy */
  uint32_t tailSleepers;
  uint32_t spin;          /* polls before a host waiter yields, then sleeps */
  char pad0[48];
  uint64_t done;          /* every trigger below this one is complete */
  uint32_t doneSleepers;
  uint32_t yieldSpin;     /* host waiters yield the core while they poll */
  char pad2[48];
  uint32_t state;         /* 0: running; else the ncclResult_t every call returns (abort, dead peer) */
  uint32_t error;         /* first error of a trigger (bad handle found by the proxy); flush reports it */
  uint32_t sleeping;      /* the proxy sleeps: producers wake it (cpu backend) */
  int32_t wakeFd;         /* eventfd the proxy sleeps on */
  uint64_t owner;         /* the service (host waiters check its peers) */
  char pad3[40];
};

/* A semaphore's counter: peers add to value, the owner waits on it. */
struct anycclSemSlot {
  uint64_t value;    /* adds of peers' threads (direct signals) and of the proxy on the cpu backend */
  uint32_t sleepers;
  uint32_t pad;
  uint64_t proxied;  /* GPUs: the count of signals the peer's proxy stream wrote here (behind its copies) */
  char pad2[40];
};

struct anycclPortFifo {
  uint64_t* trig;                  /* 2 words per entry */
  uint64_t* head;                  /* reservations: producers add 1; GPUs: head[1] caches the tail,
                                      head[2] the last `done` a producer read, head[3] the `done`
                                      the proxy stream wrote (0 where it writes none) */
  struct anycclPortShared* shared; /* proxy state */
  uint32_t size;                   /* entries, a power of two */
  uint32_t pad;
  uint64_t timeoutNs;              /* bound of every wait */
};

/* Device view of a semaphore. */
struct anycclPortSemaphore {
  struct anycclSemSlot* inbound;   /* my counter; the peer adds to it */
  uint64_t* expected;              /* waits done so far (owned by this semaphore) */
  struct anycclSemSlot* outbound;  /* the peer's counter as mapped here (same host), else NULL */
  struct anycclPortShared* shared; /* the service's state (abort, dead peers) */
  uint64_t timeoutNs;
  const uint64_t* hostInbound;     /* GPUs: my host counter, raised by the peer's proxy thread (else NULL);
                                      the count is inbound->value + *hostInbound */
};

/* Port channel: copyable by value into kernels.
 * Direct path: where the destination is mapped here (a peer of this host)
 * dst is its address, and a put of at most directMax bytes (a signal, a
 * flush) is done by the calling thread itself while nothing of the service
 * is in flight through the proxy (ANYCCL_PORT_DIRECT_MAX; lower directMax of
 * a copy of the handle to send one call's puts through the proxy; 0: always
 * the proxy). dst is NULL where the destination is on another host, or where
 * the proxy signals by copies (GPUs, ANYCCL_PORT_HOST_SIGNALS=0). */
struct anycclPortChannel {
  uint32_t magic;
  uint32_t id;
  uint64_t dstSize, srcSize;
  struct anycclPortFifo fifo;
  struct anycclPortSemaphore sem;
  char* dst;                       /* the peer's memory as mapped here, or NULL */
  char* src;                       /* my memory */
  uint64_t directMax;
};

/* Memory channel (same-host peers): the threads of the caller copy through
 * peer pointers. dst: the peer's memory as mapped here; src: mine; pkt: my
 * packet buffer, where the peer's putPackets land (may be NULL). */
struct anycclMemoryChannel {
  uint32_t magic;
  uint32_t pad;
  char* dst;
  uint64_t dstSize;
  char* src;
  uint64_t srcSize;
  char* pkt;
  uint64_t pktSize;
  struct anycclPortSemaphore sem;
};

/* ---- host API (libnccl) --------------------------------------------------- */
/* A service on comm; fifoSize 0 = ANYCCL_PORT_FIFO_SIZE (a power of two). */
ncclResult_t anycclProxyServiceCreate(ncclComm_t comm, int fifoSize, anycclProxyService_t* svc);
ncclResult_t anycclProxyServiceStart(anycclProxyService_t svc);
/* Takes what is in the FIFO, finishes what is in flight, stops the thread. */
ncclResult_t anycclProxyServiceStop(anycclProxyService_t svc);
ncclResult_t anycclProxyServiceDestroy(anycclProxyService_t svc);
/* First error the proxy met (ncclSuccess if none); clear: forget it. */
ncclResult_t anycclProxyServiceGetError(anycclProxyService_t svc, int clear);
/* Custom triggers (type ANYCCL_TRIG_CUSTOM) go to fn on the proxy thread. */
typedef ncclResult_t (*anycclTriggerHandler)(void* arg, uint64_t w0, uint64_t w1);
ncclResult_t anycclProxyServiceSetHandler(anycclProxyService_t svc, anycclTriggerHandler fn, void* arg);
ncclResult_t anycclProxyServiceFifo(anycclProxyService_t svc, struct anycclPortFifo* fifo);

/* Memory: register a local buffer ("device" memory: cudaMalloc'd, on the
 * cpu backend anyccl-cpu memory, so that same-host processes can map it). */
ncclResult_t anycclRegisterMemory(anycclProxyService_t svc, void* ptr, size_t bytes, anycclMemoryId* id);
/* Send a local memory's handle to peer; the peer calls anycclMemoryRecv
 * (pairs match in call order per peer) and gets an id for it. */
ncclResult_t anycclMemorySend(anycclProxyService_t svc, anycclMemoryId local, int peer);
ncclResult_t anycclMemoryRecv(anycclProxyService_t svc, int peer, anycclMemoryId* remote);
/* Every rank gives one local memory; remote[r] is rank r's (remote[me] = local). */
ncclResult_t anycclMemoryAllGather(anycclProxyService_t svc, anycclMemoryId local, anycclMemoryId* remote);
/* Where a memory is in this process (local, or a same-host peer's mapped here); NULL if remote. */
ncclResult_t anycclMemoryPointer(anycclProxyService_t svc, anycclMemoryId id, void** ptr, size_t* bytes);

/* Semaphores: a pair, made by both ranks (in the same order per peer);
 * connects to the peer the first time. */
ncclResult_t anycclSemaphoreCreate(anycclProxyService_t svc, int peer, anycclSemaphoreId* id);
/* A host-to-device semaphore: the host signals, device code waits. */
ncclResult_t anycclHostSemaphoreCreate(anycclProxyService_t svc, anycclSemaphoreId* id);
ncclResult_t anycclHostSemaphoreSignal(anycclProxyService_t svc, anycclSemaphoreId id);
ncclResult_t anycclSemaphoreDevice(anycclProxyService_t svc, anycclSemaphoreId id, struct anycclPortSemaphore* dev);

/* Channels. */
ncclResult_t anycclPortChannelCreate(anycclProxyService_t svc, anycclSemaphoreId sem, anycclMemoryId dst,
                                     anycclMemoryId src, struct anycclPortChannel* chan);
/* pkt: a local memory where the peer's packets land, or -1. */
ncclResult_t anycclMemoryChannelCreate(anycclProxyService_t svc, anycclSemaphoreId sem, anycclMemoryId dst,
                                       anycclMemoryId src, anycclMemoryId pkt, struct anycclMemoryChannel* chan);

/* Slow paths of the device half on the host (cpu backend); not for direct use. */
ncclResult_t anycclPortHostWaitCounter(const volatile uint64_t* counter, uint32_t* sleepers, uint64_t target,
                                       struct anycclPortShared* shared, uint64_t timeoutNs, const char* what);
/* *counter += 1 (release), then wake its sleepers. */
void anycclPortHostSignal(uint64_t* counter, uint32_t* sleepers);
void anycclPortHostKick(struct anycclPortShared* shared);
ncclResult_t anycclPortBadArgument(const char* fn, const char* what, uint64_t value, uint64_t limit);
ncclResult_t anycclPortHostWaitLine(const volatile uint64_t* line, uint32_t flag, struct anycclPortShared* shared,
                                    uint64_t timeoutNs);

/* ---- device half ------------------------------------------------------------ */
#if defined(__CUDA_ARCH__)
#define ANYCCL_PORT_BAD(fn, what, v, lim) \
  (printf("anyccl: %s: %s %llu out of range (limit %llu)\n", fn, what, (unsigned long long)(v), \
          (unsigned long long)(lim)), ncclInvalidArgument)
ANYCCL_PORT_DEV uint64_t anycclPortNowNs(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
ANYCCL_PORT_DEV uint64_t anycclPortLoad(const volatile uint64_t* p) { return *p; }
#else
#define ANYCCL_PORT_BAD(fn, what, v, lim) ((void)anycclPortBadArgument(fn, what, v, lim), ncclInvalidArgument)
ANYCCL_PORT_DEV uint64_t anycclPortLoad(const volatile uint64_t* p) {
  return __atomic_load_n((const uint64_t*)p, __ATOMIC_ACQUIRE);
}
#endif

/* GPUs: a fence at system scope (acquire and release). After a poll saw a
 * signal (a peer GPU's release add, or a proxy thread's store made once the
 * copies before it completed), the reads that follow see what the signal
 * covers; before a direct flush returns, this thread's stores are performed. */
ANYCCL_PORT_DEV void anycclPortAcquire(void) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 700
  asm volatile("fence.acq_rel.sys;" ::: "memory");
#else
  __threadfence_system();
#endif
#endif
}

/* Wait until *counter (+ *counter2 + *extra: GPUs only, NULL on the cpu
 * backend) >= target (bounded, abort-aware). */
ANYCCL_PORT_DEV uint64_t anycclPortSum(const volatile uint64_t* counter, const volatile uint64_t* counter2,
                                       const volatile uint64_t* extra) {
  return anycclPortLoad(counter) + (counter2 ? anycclPortLoad(counter2) : 0) + (extra ? anycclPortLoad(extra) : 0);
}
ANYCCL_PORT_DEV ncclResult_t anycclPortWaitSum(const volatile uint64_t* counter, const volatile uint64_t* counter2,
                                               const volatile uint64_t* extra, uint32_t* sleepers, uint64_t target,
                                               struct anycclPortShared* shared, uint64_t timeoutNs, const char* what) {
#if defined(__CUDA_ARCH__)
  (void)sleepers;
  /* counter: device memory, where peer GPUs add (memory channels, direct
   * port signals); counter2: device memory, where a peer's proxy stream
   * writes its count behind its copies; extra: host memory, where proxy
   * threads store. All only grow, so a stale extra never lets a wait end
   * early: it is read every 4th poll (a read of host memory takes about
   * 1 us, of the counters a few hundred ns). */
  uint64_t host = extra ? anycclPortLoad(extra) : 0, start = 0;
  for (uint32_t spins = 1;
       (int64_t)(anycclPortLoad(counter) + (counter2 ? anycclPortLoad(counter2) : 0) + host - target) < 0; spins++) {
    if (extra && spins % 4 == 0) host = anycclPortLoad(extra);
    if (spins % 16) continue; /* the state is host memory: not every poll */
    if (start == 0) start = anycclPortNowNs();
    uint32_t st = *(volatile uint32_t*)&shared->state;
    if (st != 0) return (ncclResult_t)st;
    if (timeoutNs && anycclPortNowNs() - start > timeoutNs) {
      printf("anyccl: %s timed out after %llu ms\n", what, (unsigned long long)(timeoutNs / 1000000));
      atomicCAS((unsigned int*)&shared->error, 0u, (unsigned int)ncclSystemError);
      return ncclSystemError;
    }
  }
  anycclPortAcquire();
  return ncclSuccess;
#else
  (void)counter2, (void)extra;
  if ((int64_t)(anycclPortLoad(counter) - target) >= 0) return ncclSuccess;
  return anycclPortHostWaitCounter(counter, sleepers, target, shared, timeoutNs, what);
#endif
}
ANYCCL_PORT_DEV ncclResult_t anycclPortWaitCounter(const volatile uint64_t* counter, uint32_t* sleepers,
                                                   uint64_t target, struct anycclPortShared* shared,
                                                   uint64_t timeoutNs, const char* what) {
  return anycclPortWaitSum(counter, NULL, NULL, sleepers, target, shared, timeoutNs, what);
}

/* Reserve a FIFO entry, wait (bounded) while the FIFO is full, write the
 * trigger and commit it. *seq: the trigger's number. */
ANYCCL_PORT_DEV ncclResult_t anycclPortPush(const struct anycclPortFifo* f, uint64_t w0, uint64_t w1,
                                            uint64_t* seq) {
  struct anycclPortShared* sh = f->shared;
#if defined(__CUDA_ARCH__)
  /* the fast path reads no host memory: head[1] keeps the last tail a
   * producer read (the state is checked when the FIFO looks full, and by
   * every wait) */
  uint64_t s = atomicAdd((unsigned long long*)f->head, 1ULL), tail = *(volatile uint64_t*)(f->head + 1);
  if (s - tail >= f->size) {
    if (*(volatile uint32_t*)&sh->state) return (ncclResult_t)sh->state;
    tail = anycclPortLoad(&sh->tail);
    atomicMax((unsigned long long*)(f->head + 1), (unsigned long long)tail);
  }
#else
  uint32_t st = __atomic_load_n(&sh->state, __ATOMIC_ACQUIRE);
  if (st) return (ncclResult_t)st;
  uint64_t s = __atomic_fetch_add(f->head, 1, __ATOMIC_RELAXED), tail = anycclPortLoad(&sh->tail);
#endif
  if (s - tail >= f->size) {
    ncclResult_t r = anycclPortWaitCounter(&sh->tail, &sh->tailSleepers, s - f->size + 1, sh, f->timeoutNs,
                                           "port channel: waiting for room in the proxy FIFO");
    if (r != ncclSuccess) return r;
  }
  uint64_t* e = f->trig + 2 * (s & (f->size - 1));
#if defined(__CUDA_ARCH__)
  *(volatile uint64_t*)e = w0;
  /* the commit is a release store at system scope: the trigger's first
   * word and this thread's earlier stores (the data a put copies) before it */
#if __CUDA_ARCH__ >= 700
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(e + 1), "l"(w1 | ANYCCL_TRIG_COMMIT) : "memory");
#else
  __threadfence_system();
  *(volatile uint64_t*)(e + 1) = w1 | ANYCCL_TRIG_COMMIT;
#endif
#else
  __atomic_store_n(e, w0, __ATOMIC_RELAXED);
  __atomic_store_n(e + 1, w1 | ANYCCL_TRIG_COMMIT, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&sh->sleeping, __ATOMIC_SEQ_CST)) anycclPortHostKick(sh);
#endif
  if (seq) *seq = s;
  return ncclSuccess;
}

ANYCCL_PORT_DEV void anycclPortEncode(uint32_t type, uint32_t chan, uint64_t dstOff, uint64_t srcOff, uint64_t bytes,
                                      uint64_t* w0, uint64_t* w1) {
  *w0 = (srcOff & ANYCCL_TRIG_OFF_MASK) | ((bytes & ((1ULL << 27) - 1)) << 37);
  *w1 = (dstOff & ANYCCL_TRIG_OFF_MASK) | ((bytes >> 27) << 37) | ((uint64_t)(type & 0xf) << 43) |
        ((uint64_t)(chan & 0xffff) << 47);
}

/* Checks of a port call; ncclSuccess when it may go. */
ANYCCL_PORT_DEV ncclResult_t anycclPortCheck(const struct anycclPortChannel* ch, const char* fn, uint64_t dstOff,
                                             uint64_t srcOff, uint64_t bytes) {
  if (ch == NULL || ch->magic != ANYCCL_PORT_MAGIC) return ANYCCL_PORT_BAD(fn, "channel handle (not made by anycclPortChannelCreate) magic", ch ? ch->magic : 0, 0);
  if (dstOff > ch->dstSize || bytes > ch->dstSize - dstOff)
    return ANYCCL_PORT_BAD(fn, "dstOff + bytes (past the destination memory)", dstOff + bytes, ch->dstSize);
  if (srcOff > ch->srcSize || bytes > ch->srcSize - srcOff)
    return ANYCCL_PORT_BAD(fn, "srcOff + bytes (past the source memory)", srcOff + bytes, ch->srcSize);
  if (dstOff >= ANYCCL_PORT_MAX_OFFSET || srcOff >= ANYCCL_PORT_MAX_OFFSET)
    return ANYCCL_PORT_BAD(fn, "offset", dstOff > srcOff ? dstOff : srcOff, ANYCCL_PORT_MAX_OFFSET);
  return ncclSuccess;
}

/* ---- the direct path (see struct anycclPortChannel) ----------------------------
 * Why the order holds:
 * 1. The caller goes direct only while the service is idle: the `done` the
 *    proxy published covers every trigger reserved so far (done >= head).
 *    Every earlier put and signal of this thread through the proxy has then
 *    completed (copies landed, signal made), so a direct put or signal
 *    cannot overtake one; `done` is read with acquire (GPUs: a system fence
 *    after the read of host memory), so the proxy's work happens before the
 *    direct stores. Otherwise the call goes through the FIFO behind them.
 * 2. A direct signal is a release add to the peer's semaphore word (cpu:
 *    a seq_cst atomic add; GPUs: red.release.sys on the peer's device
 *    counter): this thread's earlier stores (direct puts) are visible to a
 *    waiter that saw it, as waits and polls acquire after the poll.
 * 3. A proxied call after direct ones: the push fences (system scope)
 *    before it commits the trigger, and the proxy reads the commit with
 *    acquire before it copies or signals, so the direct stores come first.
 * 4. Counting: the proxy never overwrites what a direct signal adds. On
 *    the cpu backend both add 1 to the same word. On GPUs the proxy stores
 *    its own count of signals into the peer's host counter, direct signals
 *    add to the peer's device counter, and a wait sums the two: each signal
 *    counts once and the sum only grows. (dst is NULL where the proxy would
 *    copy values into the device counter: ANYCCL_PORT_HOST_SIGNALS=0.)
 * As through the proxy alone, calls of one thread (or ordered by the
 * caller) are ordered; concurrent callers of a service are not. */

/* 1 if every trigger reserved on the service is complete. */
ANYCCL_PORT_DEV int anycclPortIdle(const struct anycclPortFifo* f) {
#if defined(__CUDA_ARCH__)
  uint64_t h = *(volatile uint64_t*)f->head, cached;
  /* head[2]: the last done a producer read (device memory: no host read
   * while only direct calls run) */
#if __CUDA_ARCH__ >= 700
  asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(cached) : "l"(f->head + 2) : "memory");
#else
  cached = *(volatile uint64_t*)(f->head + 2);
  __threadfence();
#endif
  if ((int64_t)(cached - h) >= 0) return 1;
  /* head[3]: the done the proxy stream writes behind its copies (same-host
   * services); device memory, read before the host's word */
  uint64_t d = *(volatile uint64_t*)(f->head + 3);
  if ((int64_t)(d - h) < 0) d = anycclPortLoad(&f->shared->done);
  anycclPortAcquire(); /* the proxy's copies and stores before done, then ours (and the cache's readers') */
  atomicMax((unsigned long long*)(f->head + 2), (unsigned long long)d);
  return (int64_t)(d - h) >= 0;
#else
  uint64_t h = __atomic_load_n(f->head, __ATOMIC_ACQUIRE);
  return (int64_t)(__atomic_load_n(&f->shared->done, __ATOMIC_ACQUIRE) - h) >= 0;
#endif
}

/* The calling thread copies bytes (GPUs: 16-byte words, 16 loads in flight). */
ANYCCL_PORT_DEV void anycclPortCopyThread(char* dst, const char* src, uint64_t bytes) {
#if defined(__CUDA_ARCH__)
  uint64_t i = 0;
  if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
    const uint4* s = (const uint4*)src;
    uint4* d = (uint4*)dst;
    uint64_t n = bytes / 16;
    for (; i + 16 <= n; i += 16) {
      uint4 v[16];
#pragma unroll
      for (int k = 0; k < 16; k++) v[k] = s[i + k];
#pragma unroll
      for (int k = 0; k < 16; k++) d[i + k] = v[k];
    }
    for (; i < n; i++) d[i] = s[i];
    i *= 16;
  }
  for (; i < bytes; i++) dst[i] = src[i];
#else
  __builtin_memcpy(dst, src, bytes);
#endif
}

/* Add 1 to the peer's semaphore word, after this thread's earlier stores. */
ANYCCL_PORT_DEV void anycclPortSignalPeer(const struct anycclPortSemaphore* s) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 700
  asm volatile("red.release.sys.add.u64 [%0], %1;" ::"l"(&s->outbound->value), "l"(1ULL) : "memory");
#else
  __threadfence_system();
  atomicAdd_system((unsigned long long*)&s->outbound->value, 1ULL);
#endif
#else
  anycclPortHostSignal(&s->outbound->value, &s->outbound->sleepers);
#endif
}

/* The first error of a trigger the proxy dropped (flush reports it). */
ANYCCL_PORT_DEV ncclResult_t anycclPortTriggerError(struct anycclPortShared* sh) {
#if defined(__CUDA_ARCH__)
  return (ncclResult_t)*(volatile uint32_t*)&sh->error;
#else
  return (ncclResult_t)__atomic_load_n(&sh->error, __ATOMIC_ACQUIRE);
#endif
}

/* A call the caller may do itself: 1 (and *r its result) if done. */
ANYCCL_PORT_DEV int anycclPortTryDirect(const struct anycclPortChannel* ch, uint32_t type, uint64_t dstOff,
                                        uint64_t srcOff, uint64_t bytes, ncclResult_t* r) {
  if (ch->dst == NULL || ch->directMax == 0 || ((type & ANYCCL_TRIG_PUT) && bytes > ch->directMax)) return 0;
#if !defined(__CUDA_ARCH__)
  uint32_t st = __atomic_load_n(&ch->fifo.shared->state, __ATOMIC_ACQUIRE);
  if (st) return *r = (ncclResult_t)st, 1;
#endif
  if (!anycclPortIdle(&ch->fifo)) return 0;
  if (type & ANYCCL_TRIG_PUT) anycclPortCopyThread(ch->dst + dstOff, ch->src + srcOff, bytes);
  if (type & ANYCCL_TRIG_SIGNAL) anycclPortSignalPeer(&ch->sem);
  *r = ncclSuccess;
  if (type & ANYCCL_TRIG_FLUSH) { /* the direct stores are complete (GPUs: performed at system scope) */
    anycclPortAcquire();
    *r = anycclPortTriggerError(ch->fifo.shared);
  }
  return 1;
}

/* put / signal / flush in one call; a put over 4 GiB takes several triggers. */
ANYCCL_PORT_DEV ncclResult_t anycclPortOp(const struct anycclPortChannel* ch, uint32_t type, uint64_t dstOff,
                                          uint64_t srcOff, uint64_t bytes, const char* fn) {
  ncclResult_t r = anycclPortCheck(ch, fn, dstOff, srcOff, (type & ANYCCL_TRIG_PUT) ? bytes : 0);
  if (r != ncclSuccess) return r;
  if (anycclPortTryDirect(ch, type, dstOff, srcOff, bytes, &r)) return r;
  uint64_t w0, w1, seq = 0;
  if (type & ANYCCL_TRIG_PUT) {
    while (bytes > ANYCCL_PORT_MAX_PUT) {
      anycclPortEncode(ANYCCL_TRIG_PUT, ch->id, dstOff, srcOff, ANYCCL_PORT_MAX_PUT, &w0, &w1);
      if ((r = anycclPortPush(&ch->fifo, w0, w1, NULL)) != ncclSuccess) return r;
      dstOff += ANYCCL_PORT_MAX_PUT, srcOff += ANYCCL_PORT_MAX_PUT, bytes -= ANYCCL_PORT_MAX_PUT;
    }
  }
  anycclPortEncode(type, ch->id, dstOff, srcOff, bytes, &w0, &w1);
  if ((r = anycclPortPush(&ch->fifo, w0, w1, &seq)) != ncclSuccess) return r;
  if (type & ANYCCL_TRIG_FLUSH) {
    struct anycclPortShared* sh = ch->fifo.shared;
    r = anycclPortWaitCounter(&sh->done, &sh->doneSleepers, seq + 1, sh, ch->fifo.timeoutNs, "port channel: flush");
    if (r != ncclSuccess) return r;
    return anycclPortTriggerError(sh);
  }
  return ncclSuccess;
}

/* Copy [srcOff, srcOff+bytes) of my memory to [dstOff, ...) of the peer's. */
ANYCCL_PORT_DEV ncclResult_t anycclPortPut(const struct anycclPortChannel* ch, uint64_t dstOff, uint64_t srcOff,
                                           uint64_t bytes) {
  return anycclPortOp(ch, ANYCCL_TRIG_PUT, dstOff, srcOff, bytes, "anycclPortPut");
}
/* The peer's wait returns once every earlier put of this channel has landed. */
ANYCCL_PORT_DEV ncclResult_t anycclPortSignal(const struct anycclPortChannel* ch) {
  return anycclPortOp(ch, ANYCCL_TRIG_SIGNAL, 0, 0, 0, "anycclPortSignal");
}
ANYCCL_PORT_DEV ncclResult_t anycclPortPutWithSignal(const struct anycclPortChannel* ch, uint64_t dstOff,
                                                     uint64_t srcOff, uint64_t bytes) {
  return anycclPortOp(ch, ANYCCL_TRIG_PUT | ANYCCL_TRIG_SIGNAL, dstOff, srcOff, bytes, "anycclPortPutWithSignal");
}
ANYCCL_PORT_DEV ncclResult_t anycclPortPutWithSignalAndFlush(const struct anycclPortChannel* ch, uint64_t dstOff,
                                                             uint64_t srcOff, uint64_t bytes) {
  return anycclPortOp(ch, ANYCCL_TRIG_PUT | ANYCCL_TRIG_SIGNAL | ANYCCL_TRIG_FLUSH, dstOff, srcOff, bytes,
                      "anycclPortPutWithSignalAndFlush");
}
/* Returns once every earlier operation of the service is complete (the
 * source memory may be reused). */
ANYCCL_PORT_DEV ncclResult_t anycclPortFlush(const struct anycclPortChannel* ch) {
  return anycclPortOp(ch, ANYCCL_TRIG_FLUSH, 0, 0, 0, "anycclPortFlush");
}
/* A custom trigger for the service's handler (see anycclProxyServiceSetHandler). */
ANYCCL_PORT_DEV ncclResult_t anycclPortPushCustom(const struct anycclPortFifo* f, uint64_t w0, uint64_t w1) {
  return anycclPortPush(f, w0, (w1 & ~(0xfULL << 43) & ~ANYCCL_TRIG_COMMIT) | ((uint64_t)ANYCCL_TRIG_CUSTOM << 43),
                        NULL);
}

/* Semaphores. The proxied word counts only on GPUs (the cpu backend's
 * proxy adds to value). */
#if defined(__CUDA_ARCH__)
#define ANYCCL_PORT_PROXIED(s) (&(s)->inbound->proxied)
#else
#define ANYCCL_PORT_PROXIED(s) ((const volatile uint64_t*)NULL)
#endif
ANYCCL_PORT_DEV ncclResult_t anycclSemaphoreWait(const struct anycclPortSemaphore* s) {
  uint64_t want = *s->expected + 1;
  ncclResult_t r = anycclPortWaitSum(&s->inbound->value, ANYCCL_PORT_PROXIED(s), s->hostInbound, &s->inbound->sleepers,
                                     want, s->shared, s->timeoutNs, "semaphore wait");
  if (r == ncclSuccess) *s->expected = want;
  return r;
}
/* 1 (and the signal consumed) if a signal is there, else 0. */
ANYCCL_PORT_DEV int anycclSemaphorePoll(const struct anycclPortSemaphore* s) {
  if ((int64_t)(anycclPortSum(&s->inbound->value, ANYCCL_PORT_PROXIED(s), s->hostInbound) - (*s->expected + 1)) < 0)
    return 0;
  anycclPortAcquire();
  *s->expected += 1;
  return 1;
}
ANYCCL_PORT_DEV ncclResult_t anycclPortWait(const struct anycclPortChannel* ch) {
  if (ch == NULL || ch->magic != ANYCCL_PORT_MAGIC) return ANYCCL_PORT_BAD("anycclPortWait", "channel handle magic", ch ? ch->magic : 0, 0);
  return anycclSemaphoreWait(&ch->sem);
}
ANYCCL_PORT_DEV int anycclPortPoll(const struct anycclPortChannel* ch) {
  if (ch == NULL || ch->magic != ANYCCL_PORT_MAGIC) return (void)ANYCCL_PORT_BAD("anycclPortPoll", "channel handle magic", ch ? ch->magic : 0, 0), 0;
  return anycclSemaphorePoll(&ch->sem);
}

/* ---- memory channel ------------------------------------------------------------ */
ANYCCL_PORT_DEV ncclResult_t anycclMemChanCheck(const struct anycclMemoryChannel* ch, const char* fn, uint64_t dstOff,
                                                uint64_t dstSize, uint64_t srcOff, uint64_t srcSize, uint64_t bytes) {
  if (ch == NULL || ch->magic != ANYCCL_MEMCHAN_MAGIC) return ANYCCL_PORT_BAD(fn, "channel handle magic", ch ? ch->magic : 0, 0);
  if (dstOff > dstSize || bytes > dstSize - dstOff) return ANYCCL_PORT_BAD(fn, "destination end", dstOff + bytes, dstSize);
  if (srcOff > srcSize || bytes > srcSize - srcOff) return ANYCCL_PORT_BAD(fn, "source end", srcOff + bytes, srcSize);
  return ncclSuccess;
}

/* Thread tid of nthreads copies its share (16-byte units when aligned). */
ANYCCL_PORT_DEV void anycclMemChanCopy(char* dst, const char* src, uint64_t bytes, int tid, int nthreads) {
#if defined(__CUDA_ARCH__)
  if ((((uintptr_t)dst | (uintptr_t)src | bytes) & 15) == 0) {
    uint4* d = (uint4*)dst;
    const uint4* s = (const uint4*)src;
    for (uint64_t i = tid; i < bytes / 16; i += nthreads) d[i] = s[i];
  } else {
    for (uint64_t i = tid; i < bytes; i += nthreads) dst[i] = src[i];
  }
#else
  uint64_t part = (bytes + nthreads - 1) / nthreads;
  part = (part + 63) & ~63ULL;
  uint64_t lo = (uint64_t)tid * part;
  if (lo >= bytes) return;
  uint64_t n = bytes - lo < part ? bytes - lo : part;
  __builtin_memcpy(dst + lo, src + lo, n);
#endif
}

/* Copy my [srcOff, +bytes) to the peer's [dstOff, +bytes). */
ANYCCL_PORT_DEV ncclResult_t anycclMemChanPut(const struct anycclMemoryChannel* ch, uint64_t dstOff, uint64_t srcOff,
                                              uint64_t bytes, int tid, int nthreads) {
  ncclResult_t r = anycclMemChanCheck(ch, "anycclMemChanPut", dstOff, ch ? ch->dstSize : 0, srcOff, ch ? ch->srcSize : 0, bytes);
  if (r != ncclSuccess) return r;
  anycclMemChanCopy(ch->dst + dstOff, ch->src + srcOff, bytes, tid, nthreads);
  return ncclSuccess;
}
/* Copy the peer's [srcOff, +bytes) (of its dst memory) to my [dstOff, +bytes). */
ANYCCL_PORT_DEV ncclResult_t anycclMemChanGet(const struct anycclMemoryChannel* ch, uint64_t dstOff, uint64_t srcOff,
                                              uint64_t bytes, int tid, int nthreads) {
  ncclResult_t r = anycclMemChanCheck(ch, "anycclMemChanGet", dstOff, ch ? ch->srcSize : 0, srcOff, ch ? ch->dstSize : 0, bytes);
  if (r != ncclSuccess) return r;
  anycclMemChanCopy(ch->src + dstOff, ch->dst + srcOff, bytes, tid, nthreads);
  return ncclSuccess;
}
/* After this thread's copies: the peer's wait returns. One thread calls it,
 * after the group's copies are done (a barrier of the group before). */
ANYCCL_PORT_DEV ncclResult_t anycclMemChanSignal(const struct anycclMemoryChannel* ch) {
  if (ch == NULL || ch->magic != ANYCCL_MEMCHAN_MAGIC) return ANYCCL_PORT_BAD("anycclMemChanSignal", "channel handle magic", ch ? ch->magic : 0, 0);
  anycclPortSignalPeer(&ch->sem);
  return ncclSuccess;
}
ANYCCL_PORT_DEV ncclResult_t anycclMemChanWait(const struct anycclMemoryChannel* ch) {
  if (ch == NULL || ch->magic != ANYCCL_MEMCHAN_MAGIC) return ANYCCL_PORT_BAD("anycclMemChanWait", "channel handle magic", ch ? ch->magic : 0, 0);
  return anycclSemaphoreWait(&ch->sem);
}
ANYCCL_PORT_DEV int anycclMemChanPoll(const struct anycclMemoryChannel* ch) {
  if (ch == NULL || ch->magic != ANYCCL_MEMCHAN_MAGIC) return (void)ANYCCL_PORT_BAD("anycclMemChanPoll", "channel handle magic", ch ? ch->magic : 0, 0), 0;
  return anycclSemaphorePoll(&ch->sem);
}

/* LL packets: 8-byte lines {4 data bytes, 4 flag bytes} written in one
 * store, so the reader needs no fence: a line is valid when its flag is the
 * flag of this round (never 0). putPackets writes bytes (a multiple of 4) of
 * my memory from srcOff as lines at byte dstOff of the peer's memory
 * (dstOff a multiple of 8; 2x the bytes of room). */
ANYCCL_PORT_DEV ncclResult_t anycclMemChanPutPackets(const struct anycclMemoryChannel* ch, uint64_t dstOff,
                                                     uint64_t srcOff, uint64_t bytes, uint32_t flag, int tid,
                                                     int nthreads) {
  ncclResult_t r = anycclMemChanCheck(ch, "anycclMemChanPutPackets", dstOff, ch ? ch->dstSize : 0, srcOff, ch ? ch->srcSize : 0, bytes);
  if (r == ncclSuccess && (dstOff > ch->dstSize || 2 * bytes > ch->dstSize - dstOff))
    r = ANYCCL_PORT_BAD("anycclMemChanPutPackets", "end of the packet area (2 x bytes)", dstOff + 2 * bytes, ch->dstSize);
  if (r == ncclSuccess && (flag == 0 || (dstOff & 7) || (srcOff & 3) || (bytes & 3)))
    r = ANYCCL_PORT_BAD("anycclMemChanPutPackets", "flag (0) or alignment (dstOff%8, srcOff%4, bytes%4)", flag, 0);
  if (r != ncclSuccess) return r;
  uint64_t* lines = (uint64_t*)(ch->dst + dstOff);
  const uint32_t* words = (const uint32_t*)(ch->src + srcOff);
  for (uint64_t i = tid; i < bytes / 4; i += nthreads) {
    uint64_t v = (uint64_t)words[i] | ((uint64_t)flag << 32);
#if defined(__CUDA_ARCH__)
    *(volatile uint64_t*)&lines[i] = v;
#else
    __atomic_store_n(&lines[i], v, __ATOMIC_RELEASE);
#endif
  }
  return ncclSuccess;
}
/* Wait for the lines at byte pktOff of my packet buffer (flag), and write
 * their data (bytes) to my memory at dstOff. */
ANYCCL_PORT_DEV ncclResult_t anycclMemChanUnpackPackets(const struct anycclMemoryChannel* ch, uint64_t dstOff,
                                                        uint64_t pktOff, uint64_t bytes, uint32_t flag, int tid,
                                                        int nthreads) {
  ncclResult_t r = anycclMemChanCheck(ch, "anycclMemChanUnpackPackets", dstOff, ch ? ch->srcSize : 0, 0, ~0ULL, bytes);
  if (r == ncclSuccess && (ch->pkt == NULL || pktOff > ch->pktSize || 2 * bytes > ch->pktSize - pktOff))
    r = ANYCCL_PORT_BAD("anycclMemChanUnpackPackets", "end of the packet buffer (2 x bytes; or no packet buffer)",
                        pktOff + 2 * bytes, ch->pktSize);
  if (r == ncclSuccess && (flag == 0 || (pktOff & 7) || (dstOff & 3) || (bytes & 3)))
    r = ANYCCL_PORT_BAD("anycclMemChanUnpackPackets", "flag (0) or alignment (pktOff%8, dstOff%4, bytes%4)", flag, 0);
  if (r != ncclSuccess) return r;
  const volatile uint64_t* lines = (const volatile uint64_t*)(ch->pkt + pktOff);
  uint32_t* words = (uint32_t*)(ch->src + dstOff);
  for (uint64_t i = tid; i < bytes / 4; i += nthreads) {
    uint64_t v = anycclPortLoad(&lines[i]);
    if ((uint32_t)(v >> 32) != flag) {
#if defined(__CUDA_ARCH__)
      uint64_t start = anycclPortNowNs();
      while ((uint32_t)((v = lines[i]) >> 32) != flag) {
        if (*(volatile uint32_t*)&ch->sem.shared->state) return (ncclResult_t)ch->sem.shared->state;
        if (ch->sem.timeoutNs && anycclPortNowNs() - start > ch->sem.timeoutNs) return ncclSystemError;
      }
#else
      r = anycclPortHostWaitLine(&lines[i], flag, ch->sem.shared, ch->sem.timeoutNs);
      if (r != ncclSuccess) return r;
      v = anycclPortLoad(&lines[i]);
#endif
    }
    words[i] = (uint32_t)v;
  }
  return ncclSuccess;
}

#ifdef __cplusplus
}
#endif

#endif
