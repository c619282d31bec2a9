/* The proxy service: a FIFO of 16-byte triggers that "device" code fills
 * (any number of producers: a slot is reserved with an atomic add on head,
 * written, then committed by the top bit of its second word) and a host
 * thread that takes them in order, moves the bytes and bumps semaphores.
 *
 * Completion: `tail` counts triggers taken (their FIFO entries are free
 * again), `done` says that every trigger below it is complete. Copies inside
 * a host are done when taken (cpu) or when the proxy stream's event for
 * them completes (GPUs); puts to another host when their messages have left.
 * A flush is a trigger like the others whose producer waits for `done` to
 * pass it: the proxy never waits for a flush. */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "checks.h"
#include "cuda_exec.h"
#include "param.h"
#include "port.h"
#include "rt.h"
#include "transport.h"

static uint64_t nowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void futexWait(void* addr, uint32_t val, long ns) {
  struct timespec ts = {0, ns};
  syscall(SYS_futex, addr, FUTEX_WAIT, val, &ts, NULL, 0);
}
static void futexWake(void* addr) { syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0); }

static inline void cpuRelax(void) {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

/* ---- host halves of the device functions ------------------------------------- */

PORT_API void anycclPortHostSignal(uint64_t* counter, uint32_t* sleepers) {
  __atomic_add_fetch(counter, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(sleepers, __ATOMIC_SEQ_CST)) futexWake(counter);
}

PORT_API void anycclPortHostKick(struct anycclPortShared* sh) {
  uint64_t one = 1;
  ssize_t r = write(sh->wakeFd, &one, sizeof(one));
  (void)r;
}

PORT_API ncclResult_t anycclPortBadArgument(const char* fn, const char* what, uint64_t value, uint64_t limit) {
  WARN("%s: invalid argument: %s (%llu; limit %llu); nothing was written: check the handle and the offsets", fn,
       what, (unsigned long long)value, (unsigned long long)limit);
  return ncclInvalidArgument;
}

/* Dead same-host peers while a host waiter waits (every ANYCCL_PEER_CHECK_MS). */
static ncclResult_t checkPeers(struct anycclPortShared* sh, uint64_t* last) {
  struct anycclProxyService* s = (struct anycclProxyService*)(uintptr_t)sh->owner;
  if (s == NULL || s->comm->peerCheckMs <= 0) return ncclSuccess;
  uint64_t t = nowNs();
  if (*last == 0) *last = t;
  if (t - *last < (uint64_t)s->comm->peerCheckMs * 1000000ull) return ncclSuccess;
  *last = t;
  if (__atomic_load_n(&s->comm->abortFlag, __ATOMIC_ACQUIRE)) {
    portSetState(s, ncclInvalidUsage);
    return ncclInvalidUsage;
  }
  ncclResult_t r = anycclCheckPeers(s->comm, "port channel wait");
  if (r != ncclSuccess) portSetState(s, r);
  return r;
}

static ncclResult_t timedOut(const char* what, uint64_t timeoutNs, uint64_t have, uint64_t want) {
  WARN("%s: no progress for %.1f s (counter at %llu, waiting for %llu): the peer never signalled or died; "
       "ANYCCL_PORT_TIMEOUT (or ANYCCL_OP_TIMEOUT) sets the bound",
       what, timeoutNs / 1e9, (unsigned long long)have, (unsigned long long)want);
  return ncclSystemError;
}

/* Host waiters yield the core while they poll for this long, then sleep
 * (futex): a round trip through two proxies takes about 10-30 us. */
#define SPIN_NS 50000ull

PORT_API ncclResult_t anycclPortHostWaitCounter(const volatile uint64_t* counter, uint32_t* sleepers, uint64_t target,
                                                struct anycclPortShared* sh, uint64_t timeoutNs, const char* what) {
  uint32_t spin = sh ? sh->spin : 64;
  uint64_t start = 0, lastCheck = 0;
  for (uint32_t i = 0;; i++) {
    uint64_t v = __atomic_load_n((const uint64_t*)counter, __ATOMIC_ACQUIRE);
    if ((int64_t)(v - target) >= 0) return ncclSuccess;
    uint32_t st = sh ? __atomic_load_n(&sh->state, __ATOMIC_ACQUIRE) : 0;
    if (st) return (ncclResult_t)st;
    /* the proxy thread that makes progress may need this core: poll
     * briefly, then yield it while polling (SPIN_NS at most), then sleep */
    if (i < spin) {
      cpuRelax();
      continue;
    }
    uint64_t t = nowNs();
    if (start == 0) start = t;
    if (t - start < SPIN_NS) {
      sched_yield();
      continue;
    }
    if (timeoutNs && t - start > timeoutNs) return timedOut(what, timeoutNs, v, target);
    if (sh) {
      ncclResult_t r = checkPeers(sh, &lastCheck);
      if (r != ncclSuccess) return r;
    }
    if (sleepers) {
      __atomic_add_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
      v = __atomic_load_n((const uint64_t*)counter, __ATOMIC_SEQ_CST);
      if ((int64_t)(v - target) < 0) futexWait((void*)counter, (uint32_t)v, 2000000);
      __atomic_sub_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
    } else {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    }
  }
}

PORT_API ncclResult_t anycclPortHostWaitLine(const volatile uint64_t* line, uint32_t flag,
                                             struct anycclPortShared* sh, uint64_t timeoutNs) {
  uint64_t start = 0, lastCheck = 0;
  for (uint32_t i = 0;; i++) {
    uint64_t v = __atomic_load_n((const uint64_t*)line, __ATOMIC_ACQUIRE);
    if ((uint32_t)(v >> 32) == flag) return ncclSuccess;
    uint32_t st = __atomic_load_n(&sh->state, __ATOMIC_ACQUIRE);
    if (st) return (ncclResult_t)st;
    if (i < 1000) {
      cpuRelax();
      continue;
    }
    sched_yield();
    if ((i & 255) != 0) continue;
    uint64_t t = nowNs();
    if (start == 0) start = t;
    if (timeoutNs && t - start > timeoutNs) return timedOut("memory channel: packet wait", timeoutNs, v >> 32, flag);
    ncclResult_t r = checkPeers(sh, &lastCheck);
    if (r != ncclSuccess) return r;
  }
}

/* ---- state ------------------------------------------------------------------------ */

void portSetState(struct anycclProxyService* s, ncclResult_t err) {
  uint32_t zero = 0;
  __atomic_compare_exchange_n(&s->shared->state, &zero, (uint32_t)err, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  /* waiters re-check the state at least every 2 ms; wake the FIFO's now */
  futexWake(&s->shared->tail);
  futexWake(&s->shared->done);
}

void portSetError(struct anycclProxyService* s, ncclResult_t err) {
  uint32_t zero = 0;
  __atomic_compare_exchange_n(&s->shared->error, &zero, (uint32_t)err, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* ---- moving bytes --------------------------------------------------------------- */

/* GPUs: the oldest operation on the proxy stream completed: raise the host
 * counter it carries (in order, so each counter only grows). */
static void cudaRetire(struct anycclProxyService* s) {
  struct portInflight* f = &s->inflight[s->infHead % CUDA_INFLIGHT];
  if (f->store) __atomic_store_n(f->store, f->value, __ATOMIC_RELEASE);
  f->store = NULL;
  s->infHead++;
}

/* GPUs: room for one more tracked trigger (waits for the oldest when all
 * CUDA_INFLIGHT are in flight). Called before a trigger's copies are
 * enqueued: slot infTail's signal value must not be in use. */
static ncclResult_t cudaRoom(struct anycclProxyService* s) {
  if (s->infTail - s->infHead < CUDA_INFLIGHT) return ncclSuccess;
  struct portInflight* f = &s->inflight[s->infHead % CUDA_INFLIGHT];
  uint64_t start = nowNs();
  while (anycclRt.eventQuery(f->event) != 0) {
    if (s->timeoutNs && nowNs() - start > s->timeoutNs) {
      WARN("port proxy: a copy on the proxy stream did not finish in %.1f s", s->timeoutNs / 1e9);
      return ncclSystemError;
    }
    sched_yield();
  }
  cudaRetire(s);
  return ncclSuccess;
}

/* GPUs: remember the trigger an operation on the proxy stream belongs to. */
static ncclResult_t cudaTrack(struct anycclProxyService* s, uint64_t seq, uint64_t* store, uint64_t value) {
  struct portInflight* f = &s->inflight[s->infTail % CUDA_INFLIGHT];
  if (f->event == NULL) CUDACHECK(anycclRt.eventCreateWithFlags((cudaEvent_t*)&f->event, 2 /* disable timing */));
  CUDACHECK(anycclRt.eventRecord((cudaEvent_t)f->event, (cudaStream_t)s->stream));
  f->seq = seq;
  f->store = store;
  f->value = value;
  s->infTail++;
  return ncclSuccess;
}

static int cudaProgress(struct anycclProxyService* s, uint64_t* oldest) {
  int moved = 0;
  while (s->infHead < s->infTail && anycclRt.eventQuery((cudaEvent_t)s->inflight[s->infHead % CUDA_INFLIGHT].event) == 0) {
    cudaRetire(s);
    moved = 1;
  }
  if (s->infHead < s->infTail && s->inflight[s->infHead % CUDA_INFLIGHT].seq < *oldest)
    *oldest = s->inflight[s->infHead % CUDA_INFLIGHT].seq;
  return moved;
}

ncclResult_t portBumpSlot(struct anycclProxyService* s, struct anycclSemSlot* slot, uint64_t* sent) {
  if (!s->cuda) {
    anycclPortHostSignal(&slot->value, &slot->sleepers);
    return ncclSuccess;
  }
  /* the new value, copied after the puts before it on the same stream, from
   * this trigger's pinned slot (cudaRoom made it free; a pageable source
   * would be staged by the driver first) */
  uint64_t* v = &s->sigVals[s->infTail % CUDA_INFLIGHT];
  *v = ++*sent;
  CUDACHECK(anycclRt.memcpyAsync(&slot->value, v, sizeof(*v), (cudaStream_t)s->stream));
  return ncclSuccess;
}

/* GPUs: a put on the proxy stream, or cut into pieces over the side
 * streams: they wait for what the proxy stream holds (earlier puts to the
 * same bytes land first), and the proxy stream waits for them (the event
 * that tracks the trigger covers every piece). */
static ncclResult_t cudaPut(struct anycclProxyService* s, char* dst, const char* src, uint64_t bytes) {
  cudaStream_t main = (cudaStream_t)s->stream;
  if (s->nSide == 0 || bytes < s->splitMin) {
    CUDACHECK(anycclRt.memcpyAsync(dst, src, bytes, main));
    return ncclSuccess;
  }
  uint64_t n = (uint64_t)s->nSide + 1, piece = (bytes / n + 4095) & ~4095ull;
  CUDACHECK(anycclRt.eventRecord((cudaEvent_t)s->forkEv, main));
  for (int k = 0; k < s->nSide; k++) {
    uint64_t off = (uint64_t)(k + 1) * piece;
    if (off >= bytes) break;
    uint64_t len = bytes - off < piece ? bytes - off : piece;
    CUDACHECK(anycclRt.streamWaitEvent((cudaStream_t)s->side[k], (cudaEvent_t)s->forkEv, 0));
    CUDACHECK(anycclRt.memcpyAsync(dst + off, src + off, len, (cudaStream_t)s->side[k]));
    CUDACHECK(anycclRt.eventRecord((cudaEvent_t)s->joinEv[k], (cudaStream_t)s->side[k]));
    CUDACHECK(anycclRt.streamWaitEvent(main, (cudaEvent_t)s->joinEv[k], 0));
  }
  CUDACHECK(anycclRt.memcpyAsync(dst, src, piece < bytes ? piece : bytes, main));
  return ncclSuccess;
}

static ncclResult_t badTrigger(struct anycclProxyService* s, const char* what, uint64_t value, uint64_t limit) {
  if (!__atomic_exchange_n(&s->warned, 1, __ATOMIC_RELAXED))
    WARN("port proxy of rank %d: invalid trigger: %s (%llu; limit %llu); it was dropped, nothing written (later "
         "ones are dropped silently; flush reports ncclInvalidArgument)",
         s->rank, what, (unsigned long long)value, (unsigned long long)limit);
  portSetError(s, ncclInvalidArgument);
  return ncclSuccess;
}

ncclResult_t portTriggerDecode(const struct anycclProxyService* s, uint64_t w0, uint64_t w1, struct portTrigger* t,
                               const char** what, uint64_t* value, uint64_t* limit) {
  memset(t, 0, sizeof(*t));
  t->type = (w1 >> 43) & 0xf;
  if (t->type & ANYCCL_TRIG_CUSTOM) return ncclSuccess; /* the handler's bits */
  t->chan = (w1 >> 47) & 0xffff;
  t->bytes = (w0 >> 37) | (((w1 >> 37) & 0x3f) << 27);
  t->srcOff = w0 & ANYCCL_TRIG_OFF_MASK;
  t->dstOff = w1 & ANYCCL_TRIG_OFF_MASK;
#define TRIG_BAD(w, v, l) (*what = (w), *value = (v), *limit = (l), ncclInvalidArgument)
  if (t->type == 0) return TRIG_BAD("trigger type", t->type, 0xf);
  int nChans = __atomic_load_n(&s->nChans, __ATOMIC_ACQUIRE);
  if (t->chan >= (uint32_t)nChans) return TRIG_BAD("channel id", t->chan, (uint64_t)nChans);
  if (!(t->type & ANYCCL_TRIG_PUT)) return ncclSuccess;
  const struct portChan* c = &s->chans[t->chan];
  const struct portMem* dst = &s->mems[c->dst];
  const struct portMem* src = &s->mems[c->src];
  if (t->bytes > ANYCCL_PORT_MAX_PUT) return TRIG_BAD("put size", t->bytes, ANYCCL_PORT_MAX_PUT);
  if (t->srcOff > src->size || t->bytes > src->size - t->srcOff)
    return TRIG_BAD("put source end", t->srcOff + t->bytes, src->size);
  if (t->dstOff > dst->size || t->bytes > dst->size - t->dstOff)
    return TRIG_BAD("put destination end", t->dstOff + t->bytes, dst->size);
#undef TRIG_BAD
  return ncclSuccess;
}

static ncclResult_t handleTrigger(struct anycclProxyService* s, uint64_t w0, uint64_t w1, uint64_t seq) {
  struct portTrigger t;
  const char* what = NULL;
  uint64_t value = 0, limit = 0;
  if (portTriggerDecode(s, w0, w1, &t, &what, &value, &limit) != ncclSuccess) return badTrigger(s, what, value, limit);
  uint32_t type = t.type;
  if (type & ANYCCL_TRIG_CUSTOM) {
    if (s->handler == NULL) return badTrigger(s, "custom trigger, but the service has no handler", type, 0);
    s->curSeq = seq;
    ncclResult_t r = s->handler(s->handlerArg, w0, w1);
    if (r != ncclSuccess) portSetError(s, r);
    return ncclSuccess;
  }
  uint64_t bytes = t.bytes, srcOff = t.srcOff, dstOff = t.dstOff;
  struct portChan* c = &s->chans[t.chan];
  if (s->cuda && (type & (ANYCCL_TRIG_PUT | ANYCCL_TRIG_SIGNAL))) NCCLCHECK(cudaRoom(s));
  if (type & ANYCCL_TRIG_PUT) {
    struct portMem* dst = &s->mems[c->dst];
    struct portMem* src = &s->mems[c->src];
    if (dst->kind == MEM_NET) {
      NCCLCHECK(portNetPut(s, dst->owner, dst->ownerId, dstOff, src->ptr + srcOff, bytes, seq));
    } else if (s->cuda) {
      NCCLCHECK(cudaPut(s, dst->ptr + dstOff, src->ptr + srcOff, bytes));
    } else {
      /* one memcpy for the whole put: glibc picks its large-copy path by
       * size (measured here: 5-6.5 GB/s for 128 MB in one call, 3.3-3.9 in
       * 4 MB pieces or with our own streaming-store loop) */
      memcpy(dst->ptr + dstOff, src->ptr + srcOff, bytes);
    }
  }
  if (type & ANYCCL_TRIG_SIGNAL) {
    struct portSem* sem = &s->sems[c->sem];
    struct portConn* conn = &s->conns[sem->peer];
    if (conn->kind == CONN_NET) {
      NCCLCHECK(portNetSignal(s, sem->peer, sem->remoteSlot, seq));
    } else if (s->cuda && conn->peerHost) {
      uint64_t* at = conn->peerHost + sem->remoteSlot;
      if (!(type & ANYCCL_TRIG_PUT) && s->infTail == s->infHead) {
        /* nothing in flight: a CPU store into the peer's host counter, now */
        __atomic_store_n(at, ++sem->sent, __ATOMIC_RELEASE);
        return ncclSuccess;
      }
      /* behind copies: the proxy stream writes its own count into the
       * `proxied` word of the peer's slot (fenced after them; a wait adds
       * it); without that (the parameter, or the driver refused it once)
       * the store into the host counter waits for the copies' event */
      struct anycclSemSlot* slot = (struct anycclSemSlot*)conn->peerSlots + sem->remoteSlot;
      if (!s->streamSignals || acuStreamWriteValue64(s->stream, &slot->proxied, sem->streamSent + 1) != 0) {
        s->streamSignals = 0;
        return cudaTrack(s, seq, at, ++sem->sent);
      }
      sem->streamSent++;
    } else {
      NCCLCHECK(portBumpSlot(s, (struct anycclSemSlot*)conn->peerSlots + sem->remoteSlot, &sem->sent));
    }
  }
  if (s->cuda && (type & (ANYCCL_TRIG_PUT | ANYCCL_TRIG_SIGNAL))) {
    /* Every trigger before this one is complete once the stream gets here
     * where all of the service's work is on the stream (no network peer,
     * no handler): tell producers in device memory (head[3]), before the
     * event below lets this thread publish `done` */
    if (s->streamSignals && !__atomic_load_n(&s->anyNet, __ATOMIC_ACQUIRE) && s->handler == NULL &&
        acuStreamWriteValue64(s->stream, s->head + 3, seq + 1) != 0)
      s->streamSignals = 0;
    NCCLCHECK(cudaTrack(s, seq, NULL, 0));
  }
  return ncclSuccess;
}

/* Take the committed triggers at tail, in order. */
static int takeTriggers(struct anycclProxyService* s, ncclResult_t* err) {
  int n = 0;
  while (n < (int)s->fifoSize) {
    uint64_t* e = s->trig + 2 * (s->tail & (s->fifoSize - 1));
    uint64_t w1 = __atomic_load_n(e + 1, __ATOMIC_ACQUIRE);
    if (!(w1 & ANYCCL_TRIG_COMMIT)) break;
    uint64_t w0 = __atomic_load_n(e, __ATOMIC_RELAXED);
    *err = handleTrigger(s, w0, w1 & ~ANYCCL_TRIG_COMMIT, s->tail);
    __atomic_store_n(e, 0, __ATOMIC_RELAXED);
    __atomic_store_n(e + 1, 0, __ATOMIC_RELAXED);
    s->tail++;
    __atomic_store_n(&s->shared->tail, s->tail, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&s->shared->tailSleepers, __ATOMIC_SEQ_CST)) futexWake(&s->shared->tail);
    n++;
    if (*err != ncclSuccess) break;
  }
  return n;
}

static void publishDone(struct anycclProxyService* s, uint64_t done) {
  if (done <= __atomic_load_n(&s->shared->done, __ATOMIC_RELAXED)) return;
  __atomic_store_n(&s->shared->done, done, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&s->shared->doneSleepers, __ATOMIC_SEQ_CST)) futexWake(&s->shared->done);
}

static int fifoPending(struct anycclProxyService* s) {
  uint64_t* e = s->trig + 2 * (s->tail & (s->fifoSize - 1));
  return (__atomic_load_n(e + 1, __ATOMIC_ACQUIRE) & ANYCCL_TRIG_COMMIT) != 0;
}

static void* proxyMain(void* arg) {
  struct anycclProxyService* s = arg;
  if (s->cuda) anycclRt.setDevice(s->comm->cudaDev);
  uint64_t lastWork = nowNs(), stopSeen = 0;
  int idle = 0;
  for (;;) {
    ncclResult_t err = ncclSuccess;
    uint64_t t0 = anycclProfNow();
    int progressed = takeTriggers(s, &err) > 0;
    if (t0 && progressed) anycclProfAdd(PROF_PORT_TRIG, t0);
    uint64_t oldest = s->tail;
    if (err == ncclSuccess) {
      uint64_t t1 = anycclProfNow();
      int moved = portNetProgress(s, &oldest, &err);
      if (t1 && moved) anycclProfAdd(PROF_PORT_NET, t1);
      progressed |= moved;
    }
    if (s->cuda) {
      uint64_t t1 = anycclProfNow();
      int moved = cudaProgress(s, &oldest);
      if (t1 && moved) anycclProfAdd(PROF_PORT_CUDA, t1);
      progressed |= moved;
    }
    publishDone(s, oldest);
    if (err != ncclSuccess && __atomic_load_n(&s->shared->state, __ATOMIC_ACQUIRE) == 0) { /* said once */
      WARN("port proxy of rank %d stops: %s; the service is in error (every call returns it)", s->rank,
           ncclGetErrorString(err));
      portSetState(s, err);
    }
    if (__atomic_load_n(&s->comm->abortFlag, __ATOMIC_ACQUIRE)) portSetState(s, ncclInvalidUsage);
    int failed = __atomic_load_n(&s->shared->state, __ATOMIC_ACQUIRE) != 0;
    if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
      uint64_t t = nowNs();
      if (stopSeen == 0) stopSeen = t;
      int busy = fifoPending(s) || oldest < s->tail;
      if (failed || !busy) break;
      if (s->timeoutNs && t - stopSeen > s->timeoutNs) {
        WARN("port proxy of rank %d: work still in flight %.1f s after stop; stopping anyway", s->rank,
             s->timeoutNs / 1e9);
        break;
      }
    }
    if (failed) { /* nothing more will move: sleep until stopped */
      struct pollfd pfd = {s->efd, POLLIN, 0};
      if (poll(&pfd, 1, 10) > 0) {
        uint64_t v;
        ssize_t r = read(s->efd, &v, sizeof(v));
        (void)r;
      }
      continue;
    }
    if (progressed) {
      idle = 0;
      lastWork = nowNs();
      continue;
    }
    /* Idle: poll a while (GPUs cannot wake us: 20 ms), then sleep on the
     * eventfd that producers (cpu) and the network write. */
    if (++idle < 2000 || (s->cuda && nowNs() - lastWork < 20000000ull) || oldest < s->tail || portStageBusy(s)) {
      if (s->comm->yieldSpin || s->cuda || idle > 100) sched_yield();
      else cpuRelax();
      continue;
    }
    __atomic_store_n(&s->shared->sleeping, 1, __ATOMIC_SEQ_CST);
    if (!fifoPending(s) && !__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST)) {
      uint64_t t1 = anycclProfNow();
      struct pollfd pfd = {s->efd, POLLIN, 0};
      if (poll(&pfd, 1, s->cuda ? 1 : 100) > 0) {
        uint64_t v;
        ssize_t r = read(s->efd, &v, sizeof(v));
        (void)r;
      }
      if (t1) anycclProfAdd(PROF_PORT_SLEEP, t1);
    }
    __atomic_store_n(&s->shared->sleeping, 0, __ATOMIC_SEQ_CST);
    idle = 0;
  }
  return NULL;
}

/* ---- lifecycle --------------------------------------------------------------------- */

static ncclResult_t allocShared(struct anycclProxyService* s) {
  size_t trigBytes = (size_t)s->fifoSize * 16;
  if (s->cuda) {
    if (anycclRt.hostAllocMapped == NULL || anycclRt.memcpyAsync == NULL) {
      WARN("anycclProxyServiceCreate: this libnccl's cuda backend lacks the one-sided runtime calls (rebuild it)");
      return ncclInvalidUsage;
    }
    CUDACHECK(anycclRt.hostAllocMapped((void**)&s->shared, (void**)&s->sharedDev, sizeof(*s->shared)));
    CUDACHECK(anycclRt.hostAllocMapped((void**)&s->trig, (void**)&s->trigDev, trigBytes));
    CUDACHECK(anycclRt.malloc((void**)&s->head, 4 * sizeof(uint64_t))); /* head, cached tail, cached done, stream done */
    void* unusedDev;
    CUDACHECK(anycclRt.hostAllocMapped((void**)&s->sigVals, &unusedDev, CUDA_INFLIGHT * sizeof(uint64_t)));
    uint64_t zero[4] = {0, 0, 0, 0};
    CUDACHECK(anycclRt.memcpy(s->head, zero, sizeof(zero)));
    CUDACHECK(anycclRt.streamCreateNonBlocking((cudaStream_t*)&s->stream));
    s->streamSignals = acuStreamWriteValue64 != NULL && anycclParamInt(PARAM_PORT_STREAM_SIGNALS) != 0;
    int64_t streams = anycclParamInt(PARAM_PORT_CE_STREAMS);
    s->nSide = streams < 1 ? 0 : streams > PORT_MAX_SIDE + 1 ? PORT_MAX_SIDE : (int)streams - 1;
    int64_t splitMin = anycclParamInt(PARAM_PORT_CE_SPLIT_MIN);
    s->splitMin = splitMin < 65536 ? 65536 : (uint64_t)splitMin;
    if (s->nSide) CUDACHECK(anycclRt.eventCreateWithFlags((cudaEvent_t*)&s->forkEv, 2 /* disable timing */));
    for (int k = 0; k < s->nSide; k++) {
      CUDACHECK(anycclRt.streamCreateNonBlocking((cudaStream_t*)&s->side[k]));
      CUDACHECK(anycclRt.eventCreateWithFlags((cudaEvent_t*)&s->joinEv[k], 2));
    }
  } else {
    if (posix_memalign((void**)&s->shared, 4096, sizeof(*s->shared)) != 0 ||
        posix_memalign((void**)&s->trig, 4096, trigBytes) != 0 || posix_memalign((void**)&s->head, 64, 64) != 0) {
      WARN("anycclProxyServiceCreate: out of memory");
      return ncclSystemError;
    }
    memset(s->shared, 0, sizeof(*s->shared));
    memset(s->trig, 0, trigBytes);
    memset(s->head, 0, 64);
    s->sharedDev = s->shared;
    s->trigDev = s->trig;
  }
  return ncclSuccess;
}

/* GPUs: the host counters (port.h). Without them (ANYCCL_PORT_HOST_SIGNALS=0,
 * no memfd, no registration) peers signal by copies into the device slots. */
static void allocHostSems(struct anycclProxyService* s) {
  s->hostSemsFd = -1;
  if (anycclRt.hostRegister == NULL || !anycclParamInt(PARAM_PORT_HOST_SIGNALS)) return;
  size_t bytes = ((size_t)s->maxSems * sizeof(uint64_t) + 4095) / 4096 * 4096;
  int fd;
  void* p = anycclShmCreate("anyccl-port-semaphores", bytes, &fd);
  void* dev = NULL;
  if (p != NULL && anycclRt.hostRegister(p, bytes, &dev) == 0) {
    s->hostSems = p;
    s->hostSemsDev = dev;
    s->hostSemsFd = fd;
    s->hostSemsBytes = bytes;
    return;
  }
  INFO(NCCL_INIT | NCCL_PROXY, "port: rank %d: no host semaphore counters (%s); signals go by copy", s->rank,
       p == NULL ? "no shared memory" : "cudaHostRegister failed");
  if (p != NULL) {
    munmap(p, bytes);
    close(fd);
  }
}

void portFreeHostSems(struct anycclProxyService* s) {
  for (int q = 0; s->conns && q < s->nRanks; q++)
    if (s->conns[q].peerHostMap) munmap(s->conns[q].peerHost, s->conns[q].peerHostMap);
  if (s->hostSems) {
    anycclRt.hostUnregister(s->hostSems);
    munmap(s->hostSems, s->hostSemsBytes);
    close(s->hostSemsFd);
    s->hostSems = NULL;
  }
}

static ncclResult_t allocTables(struct anycclProxyService* s) {
  s->maxMems = (int)anycclParamInt(PARAM_PORT_MAX_MEMORIES);
  s->maxSems = (int)anycclParamInt(PARAM_PORT_MAX_SEMAPHORES);
  s->maxChans = (int)anycclParamInt(PARAM_PORT_MAX_CHANNELS);
  if (s->maxMems < 1) s->maxMems = 1;
  if (s->maxSems < 1) s->maxSems = 1;
  if (s->maxChans < 1 || s->maxChans > 65536) s->maxChans = 65536;
  ANYCCL_CALLOC(s->mems, s->maxMems);
  ANYCCL_CALLOC(s->sems, s->maxSems);
  ANYCCL_CALLOC(s->chans, s->maxChans);
  ANYCCL_CALLOC(s->conns, s->nRanks);
  ANYCCL_CALLOC(s->nMemSent, s->nRanks);
  ANYCCL_CALLOC(s->nMemRecv, s->nRanks);
  ANYCCL_CALLOC(s->nSemMade, s->nRanks);
  size_t slotBytes = (size_t)s->maxSems * sizeof(struct anycclSemSlot);
  CUDACHECK(anycclRt.malloc((void**)&s->slots, slotBytes));
  if (s->cuda) {
    void* zero = calloc(1, slotBytes);
    if (zero == NULL) return ncclSystemError;
    int e = anycclRt.memcpy(s->slots, zero, slotBytes);
    if (e == 0) e = anycclRt.malloc((void**)&s->expected, (size_t)s->maxSems * sizeof(uint64_t));
    if (e == 0) e = anycclRt.memcpy(s->expected, zero, (size_t)s->maxSems * sizeof(uint64_t));
    free(zero);
    CUDACHECK(e);
    allocHostSems(s);
  } else {
    memset(s->slots, 0, slotBytes);
    ANYCCL_CALLOC(s->expected, s->maxSems);
  }
  return ncclSuccess;
}

PORT_API ncclResult_t anycclProxyServiceCreate(ncclComm_t comm, int fifoSize, anycclProxyService_t* out) {
  NCCLCHECK(anycclCommCheck(comm, "anycclProxyServiceCreate", 1));
  if (out == NULL) return anycclPortBadArgument("anycclProxyServiceCreate", "svc (NULL)", 0, 0);
  *out = NULL;
  if (fifoSize == 0) fifoSize = (int)anycclParamInt(PARAM_PORT_FIFO_SIZE);
  if (fifoSize < 2 || fifoSize > (1 << 20) || (fifoSize & (fifoSize - 1)))
    return anycclPortBadArgument("anycclProxyServiceCreate", "fifoSize (a power of two from 2 to 1048576)",
                                 (uint64_t)fifoSize, 1 << 20);
  NCCLCHECK(anycclRtInit());
  anycclProfInit(); /* ANYCCL_PROFILE_HOST times the proxy's parts too */
  struct anycclProxyService* s;
  ANYCCL_CALLOC(s, 1);
  s->comm = comm;
  s->rank = comm->rank;
  s->nRanks = comm->nRanks;
  s->cuda = anycclRt.kind == ANYCCL_BACKEND_CUDA;
  s->fifoSize = (uint32_t)fifoSize;
  s->efd = -1;
  pthread_mutex_init(&s->lock, NULL);
  s->timeoutNs = (uint64_t)anycclTimeoutSec(PARAM_PORT_TIMEOUT) * 1000000000ull;
  int64_t chunk = anycclParamInt(PARAM_PORT_CHUNK);
  s->chunk = chunk >= 4096 ? (uint64_t)chunk : 4096;
  ncclResult_t res;
  int dev = -1;
  if (s->cuda) { /* the service's memory and stream live on the communicator's GPU */
    anycclRt.getDevice(&dev);
    if (dev != comm->cudaDev) anycclRt.setDevice(comm->cudaDev);
  }
  res = allocShared(s);
  if (res == ncclSuccess) res = allocTables(s);
  if (s->cuda && dev != comm->cudaDev && dev >= 0) anycclRt.setDevice(dev);
  if (res != ncclSuccess) goto fail;
  s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->efd < 0) {
    WARN("anycclProxyServiceCreate: eventfd failed: %s", strerror(errno));
    res = ncclSystemError;
    goto fail;
  }
  s->shared->wakeFd = s->efd;
  s->shared->spin = comm->yieldSpin ? 0 : 64; /* polls before yielding: none when ranks outnumber cores */
  s->shared->yieldSpin = comm->yieldSpin;
  s->shared->owner = (uint64_t)(uintptr_t)s;
  /* services of a communicator are numbered in creation order (the same on
   * every rank): the number keeps their bootstrap tags apart */
  s->index = __atomic_fetch_add(&comm->portServices, 1, __ATOMIC_RELAXED);
  INFO(NCCL_INIT | NCCL_PROXY, "port: rank %d proxy service %d: FIFO of %u triggers, %d memories, %d semaphores",
       s->rank, s->index, s->fifoSize, s->maxMems, s->maxSems);
  *out = s;
  return ncclSuccess;
fail:
  anycclProxyServiceDestroy(s);
  return res;
}

#define CHECK_SVC(s, fn)                                                                   \
  do {                                                                                     \
    if ((s) == NULL) return anycclPortBadArgument(fn, "svc (NULL)", 0, 0);                 \
  } while (0)

PORT_API ncclResult_t anycclProxyServiceStart(anycclProxyService_t s) {
  CHECK_SVC(s, "anycclProxyServiceStart");
  if (s->started) return ncclSuccess;
  s->stop = 0;
  if (pthread_create(&s->thread, NULL, proxyMain, s) != 0) {
    WARN("anycclProxyServiceStart: cannot start the proxy thread");
    return ncclSystemError;
  }
  s->started = 1;
  return ncclSuccess;
}

PORT_API ncclResult_t anycclProxyServiceStop(anycclProxyService_t s) {
  CHECK_SVC(s, "anycclProxyServiceStop");
  if (!s->started) return ncclSuccess;
  __atomic_store_n(&s->stop, 1, __ATOMIC_SEQ_CST);
  anycclPortHostKick(s->shared);
  pthread_join(s->thread, NULL);
  s->started = 0;
  return (ncclResult_t)__atomic_load_n(&s->shared->state, __ATOMIC_ACQUIRE);
}

PORT_API ncclResult_t anycclProxyServiceDestroy(anycclProxyService_t s) {
  if (s == NULL) return ncclSuccess;
  if (s->started) anycclProxyServiceStop(s);
  portNetClose(s);
  portFreeTables(s);
  if (s->cuda) {
    for (int i = 0; i < CUDA_INFLIGHT; i++)
      if (s->inflight[i].event) anycclRt.eventDestroy((cudaEvent_t)s->inflight[i].event);
    if (s->stream) anycclRt.streamDestroy((cudaStream_t)s->stream);
    for (int k = 0; k < PORT_MAX_SIDE; k++) {
      if (s->side[k]) anycclRt.streamDestroy((cudaStream_t)s->side[k]);
      if (s->joinEv[k]) anycclRt.eventDestroy((cudaEvent_t)s->joinEv[k]);
    }
    if (s->forkEv) anycclRt.eventDestroy((cudaEvent_t)s->forkEv);
    if (s->shared) anycclRt.freeHost(s->shared);
    if (s->trig) anycclRt.freeHost(s->trig);
    if (s->head) anycclRt.free(s->head);
    if (s->sigVals) anycclRt.freeHost(s->sigVals);
  } else {
    free(s->shared);
    free(s->trig);
    free(s->head);
  }
  if (s->efd >= 0) close(s->efd);
  pthread_mutex_destroy(&s->lock);
  free(s);
  return ncclSuccess;
}

PORT_API ncclResult_t anycclProxyServiceGetError(anycclProxyService_t s, int clear) {
  CHECK_SVC(s, "anycclProxyServiceGetError");
  uint32_t st = __atomic_load_n(&s->shared->state, __ATOMIC_ACQUIRE);
  if (st) return (ncclResult_t)st;
  uint32_t e = clear ? __atomic_exchange_n(&s->shared->error, 0, __ATOMIC_SEQ_CST)
                     : __atomic_load_n(&s->shared->error, __ATOMIC_ACQUIRE);
  if (clear) __atomic_store_n(&s->warned, 0, __ATOMIC_RELAXED);
  return (ncclResult_t)e;
}

PORT_API ncclResult_t anycclProxyServiceSetHandler(anycclProxyService_t s, anycclTriggerHandler fn, void* arg) {
  CHECK_SVC(s, "anycclProxyServiceSetHandler");
  if (s->started) {
    WARN("anycclProxyServiceSetHandler: the proxy is running; set the handler before anycclProxyServiceStart");
    return ncclInvalidUsage;
  }
  s->handler = fn;
  s->handlerArg = arg;
  return ncclSuccess;
}

PORT_API ncclResult_t anycclProxyServiceFifo(anycclProxyService_t s, struct anycclPortFifo* f) {
  CHECK_SVC(s, "anycclProxyServiceFifo");
  if (f == NULL) return anycclPortBadArgument("anycclProxyServiceFifo", "fifo (NULL)", 0, 0);
  f->trig = s->trigDev;
  f->head = s->head;
  f->shared = s->sharedDev;
  f->size = s->fifoSize;
  f->pad = 0;
  f->timeoutNs = s->timeoutNs;
  return ncclSuccess;
}
