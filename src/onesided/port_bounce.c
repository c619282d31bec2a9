/* Port channel puts to and from another host through pinned host bounce
 * buffers: the path GPUs need (the network reads and writes host memory),
 * also runnable on the cpu backend (ANYCCL_PORT_STAGE=1) so that CI covers it.
 *
 * Send: the proxy takes a free bounce buffer (a bounded pool; it waits,
 * bounded, while all are in flight), copies the source into it on its send
 * stream (D2H), records the buffer's event, and queues the message; the
 * message leaves once the event completed, and the buffer is free again once
 * the network is done with it.
 *
 * Receive: a put's header takes a free bounce buffer (or the header is held
 * until one frees), its data lands there, and the proxy copies it to the
 * registered destination on its receive stream (H2D) and records the
 * buffer's event. Every arriving message enters one queue in arrival order;
 * a signal (or a custom message) is applied when everything before it in the
 * queue completed: the copy's event first (the bytes are in place), then the
 * store of the signal (release), so a waiter that sees the signal sees the
 * bytes. Streams, events and buffers are made once, at the first network
 * connection. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "param.h"
#include "port.h"
#include "rt.h"

#define STAGE_Q 256
#define NOT_READY 600 /* cudaErrorNotReady */
#define EV_NO_TIMING 0x02

struct stageRt {
  int (*memcpyAsync)(void* dst, const void* src, size_t n, cudaStream_t stream);
  int (*streamCreate)(cudaStream_t* stream);
  int (*streamDestroy)(cudaStream_t stream);
  int (*eventQuery)(cudaEvent_t ev);
  int (*hostAlloc)(void** p, size_t n);
  int (*freeHost)(void* p);
};

struct stageEntry {
  int kind;     /* PORT_MSG_PUT, PORT_MSG_SIGNAL, PORT_MSG_CUSTOM */
  int buf;      /* PUT: its receive buffer */
  int state;    /* PUT: 0 data arriving, 1 copying out */
  int peer, slot;
  char* dst;
  uint64_t size;
  struct portMsg msg;
  uint64_t t0;  /* ANYCCL_PROFILE_HOST: when its data had arrived */
};

struct portStage {
  struct stageRt rt;
  cudaStream_t txStream, rxStream;
  uint64_t bytes; /* per buffer */
  int n;          /* buffers per direction */
  char** txBuf;
  char** rxBuf;
  cudaEvent_t* txEv;
  cudaEvent_t* rxEv;
  int* txFree;
  int* rxFree;
  int txNFree, rxNFree;
  struct stageEntry q[STAGE_Q];
  uint64_t qHead, qTail;
};

/* ---- the runtime calls: the cuda backend's table, or anyccl-cpu's CUDA API ---- */
static int (*cpuMemcpyAsync)(void*, const void*, size_t, int, cudaStream_t);
static int (*cpuStreamCreateWithFlags)(cudaStream_t*, unsigned);
static int cpuMemcpyAsyncW(void* d, const void* s, size_t n, cudaStream_t st) {
  return cpuMemcpyAsync(d, s, n, 4 /* cudaMemcpyDefault */, st);
}
static int cpuStreamCreateW(cudaStream_t* st) { return cpuStreamCreateWithFlags(st, 1 /* cudaStreamNonBlocking */); }
static int cudaHostAllocW(void** p, size_t n) {
  void* dev;
  return anycclRt.hostAllocMapped(p, &dev, n);
}

static ncclResult_t stageRtInit(struct anycclProxyService* s, struct stageRt* rt) {
  if (s->cuda) {
    rt->memcpyAsync = anycclRt.memcpyAsync;
    rt->streamCreate = anycclRt.streamCreateNonBlocking;
    rt->streamDestroy = anycclRt.streamDestroy;
    rt->eventQuery = anycclRt.eventQuery;
    rt->hostAlloc = anycclRt.hostAllocMapped ? cudaHostAllocW : NULL;
    rt->freeHost = anycclRt.freeHost;
  } else {
    *(void**)&cpuMemcpyAsync = dlsym(RTLD_DEFAULT, "cudaMemcpyAsync");
    *(void**)&cpuStreamCreateWithFlags = dlsym(RTLD_DEFAULT, "cudaStreamCreateWithFlags");
    rt->memcpyAsync = cpuMemcpyAsync ? cpuMemcpyAsyncW : NULL;
    rt->streamCreate = cpuStreamCreateWithFlags ? cpuStreamCreateW : NULL;
    *(void**)&rt->streamDestroy = dlsym(RTLD_DEFAULT, "cudaStreamDestroy");
    *(void**)&rt->eventQuery = dlsym(RTLD_DEFAULT, "cudaEventQuery");
    *(void**)&rt->hostAlloc = dlsym(RTLD_DEFAULT, "cudaMallocHost");
    *(void**)&rt->freeHost = dlsym(RTLD_DEFAULT, "cudaFreeHost");
  }
  if (!rt->memcpyAsync || !rt->streamCreate || !rt->streamDestroy || !rt->eventQuery || !rt->hostAlloc ||
      !rt->freeHost || !anycclRt.eventCreateWithFlags || !anycclRt.eventRecord || !anycclRt.eventDestroy) {
    WARN("port: rank %d: the %s runtime lacks the calls that stage puts through host memory (cudaMemcpyAsync, "
         "cudaEventQuery, cudaMallocHost); port channels to other hosts need them on GPUs", s->rank, anycclRt.name);
    return ncclSystemError;
  }
  return ncclSuccess;
}

int portStageWanted(const struct anycclProxyService* s) {
  return s->cuda || anycclParamInt(PARAM_PORT_STAGE) > 0;
}

#define RTCHECK(call, what)                                                                                  \
  do {                                                                                                       \
    int e_ = (call);                                                                                         \
    if (e_ != 0) {                                                                                           \
      WARN("port: rank %d: %s failed: %s (%d)", s->rank, what, anycclRt.getErrorString(e_), e_);             \
      return ncclUnhandledCudaError;                                                                         \
    }                                                                                                        \
  } while (0)

static void stageFree(struct portStage* st);

ncclResult_t portStageInit(struct anycclProxyService* s) {
  if (s->stage) return ncclSuccess;
  struct portStage* st;
  ANYCCL_CALLOC(st, 1);
  ncclResult_t r = stageRtInit(s, &st->rt);
  int64_t bytes = anycclParamInt(PARAM_PORT_BOUNCE_BYTES), n = anycclParamInt(PARAM_PORT_BOUNCE_BUFFERS);
  st->bytes = (uint64_t)(bytes < 4096 ? 4096 : bytes > (1 << 30) ? (1 << 30) : bytes);
  st->n = (int)(n < 1 ? 1 : n > 1024 ? 1024 : n);
  if (r != ncclSuccess) {
    free(st);
    return r;
  }
  int dev = -1;
  if (s->cuda) {
    anycclRt.getDevice(&dev);
    if (dev != s->comm->cudaDev) anycclRt.setDevice(s->comm->cudaDev);
  }
  r = ncclSystemError;
  st->txBuf = calloc(st->n, sizeof(char*));
  st->rxBuf = calloc(st->n, sizeof(char*));
  st->txEv = calloc(st->n, sizeof(cudaEvent_t));
  st->rxEv = calloc(st->n, sizeof(cudaEvent_t));
  st->txFree = calloc(st->n, sizeof(int));
  st->rxFree = calloc(st->n, sizeof(int));
  if (!st->txBuf || !st->rxBuf || !st->txEv || !st->rxEv || !st->txFree || !st->rxFree) goto out;
  r = ncclUnhandledCudaError;
  if (st->rt.streamCreate(&st->txStream) != 0 || st->rt.streamCreate(&st->rxStream) != 0) goto out;
  for (int i = 0; i < st->n; i++) {
    if (st->rt.hostAlloc((void**)&st->txBuf[i], st->bytes) != 0 || st->rt.hostAlloc((void**)&st->rxBuf[i], st->bytes) != 0 ||
        anycclRt.eventCreateWithFlags(&st->txEv[i], EV_NO_TIMING) != 0 ||
        anycclRt.eventCreateWithFlags(&st->rxEv[i], EV_NO_TIMING) != 0)
      goto out;
    st->txFree[st->txNFree++] = i;
    st->rxFree[st->rxNFree++] = i;
  }
  r = ncclSuccess;
  INFO(NCCL_INIT | NCCL_PROXY, "port: rank %d stages puts to other hosts through %d + %d bounce buffers of %llu bytes",
       s->rank, st->n, st->n, (unsigned long long)st->bytes);
out:
  if (r != ncclSuccess) {
    WARN("port: rank %d: no bounce buffers for puts to other hosts (%d x 2 of %llu bytes of pinned host memory, "
         "ANYCCL_PORT_BOUNCE_BUFFERS, ANYCCL_PORT_BOUNCE_BYTES)", s->rank, st->n, (unsigned long long)st->bytes);
    stageFree(st);
  } else {
    __atomic_store_n(&s->stage, st, __ATOMIC_RELEASE); /* complete before the proxy thread can see it */
  }
  if (s->cuda && dev >= 0 && dev != s->comm->cudaDev) anycclRt.setDevice(dev);
  return r;
}

static void stageFree(struct portStage* st) {
  if (st->txStream) anycclRt.streamSynchronize(st->txStream);
  if (st->rxStream) anycclRt.streamSynchronize(st->rxStream);
  for (int i = 0; i < st->n; i++) {
    if (st->txBuf && st->txBuf[i]) st->rt.freeHost(st->txBuf[i]);
    if (st->rxBuf && st->rxBuf[i]) st->rt.freeHost(st->rxBuf[i]);
    if (st->txEv && st->txEv[i]) anycclRt.eventDestroy(st->txEv[i]);
    if (st->rxEv && st->rxEv[i]) anycclRt.eventDestroy(st->rxEv[i]);
  }
  if (st->txStream) st->rt.streamDestroy(st->txStream);
  if (st->rxStream) st->rt.streamDestroy(st->rxStream);
  free(st->txBuf);
  free(st->rxBuf);
  free(st->txEv);
  free(st->rxEv);
  free(st->txFree);
  free(st->rxFree);
  free(st);
}

void portStageFree(struct anycclProxyService* s) {
  if (s->stage) stageFree(s->stage);
  s->stage = NULL;
}

/* ---- send -------------------------------------------------------------------- */

/* A free send buffer; while none is, move messages (bounded, abort-aware). */
static ncclResult_t txAcquire(struct anycclProxyService* s, uint64_t seq, int* b) {
  struct portStage* st = s->stage;
  double start = 0;
  for (uint64_t spins = 0; st->txNFree == 0; spins++) {
    ncclResult_t err = ncclSuccess;
    uint64_t oldest = seq;
    if (portNetProgress(s, &oldest, &err)) continue;
    if (err != ncclSuccess) return err;
    if (__atomic_load_n(&s->comm->abortFlag, __ATOMIC_ACQUIRE)) return ncclInvalidUsage;
    if ((spins & 1023) == 1023) {
      double t = anycclNowSec();
      if (start == 0) start = t;
      if (s->timeoutNs && (t - start) * 1e9 > s->timeoutNs) {
        WARN("port proxy of rank %d: no bounce buffer came free for %.1f s (the network takes nothing)", s->rank,
             t - start);
        return ncclSystemError;
      }
    }
    sched_yield();
  }
  *b = st->txFree[--st->txNFree];
  return ncclSuccess;
}

ncclResult_t portStagePut(struct anycclProxyService* s, int peer, int remoteId, uint64_t dstOff, const char* src,
                          uint64_t bytes, uint64_t seq, uint64_t* bump) {
  struct portStage* st = s->stage;
  if (bytes == 0) {
    struct portMsg m = {ANYCCL_TRIG_PUT, (uint32_t)remoteId, dstOff, 0, 0};
    return portNetQueue(s, peer, &m, NULL, seq, -1, NULL, bump);
  }
  for (uint64_t o = 0; o < bytes;) {
    uint64_t n = bytes - o < st->bytes ? bytes - o : st->bytes;
    int b = -1;
    NCCLCHECK(txAcquire(s, seq, &b));
    int e = st->rt.memcpyAsync(st->txBuf[b], src + o, n, st->txStream);
    if (e == 0) e = anycclRt.eventRecord(st->txEv[b], st->txStream);
    if (e != 0) {
      st->txFree[st->txNFree++] = b;
      RTCHECK(e, "the copy of a put's source into a bounce buffer");
    }
    struct portMsg m = {ANYCCL_TRIG_PUT, (uint32_t)remoteId, dstOff + o, n, 0};
    o += n;
    ncclResult_t r = portNetQueue(s, peer, &m, st->txBuf[b], seq, b, st->txEv[b], o >= bytes ? bump : NULL);
    if (r != ncclSuccess) {
      st->txFree[st->txNFree++] = b;
      return r;
    }
  }
  return ncclSuccess;
}

int portStageSendReady(struct anycclProxyService* s, struct netSendEntry* e) {
  if (e->event == NULL) return 1;
  int q = s->stage->rt.eventQuery((cudaEvent_t)e->event);
  if (q == NOT_READY) return 0;
  if (q != 0) {
    WARN("port proxy of rank %d: the copy into a bounce buffer failed: %s (%d)", s->rank, anycclRt.getErrorString(q), q);
    return -1;
  }
  e->event = NULL;
  if (e->t0) anycclProfAdd(PROF_PORT_D2H, e->t0);
  return 1;
}

void portStageSendDone(struct anycclProxyService* s, struct netSendEntry* e) {
  if (e->stageBuf < 0 || s->stage == NULL) return;
  s->stage->txFree[s->stage->txNFree++] = e->stageBuf;
  e->stageBuf = -1;
}

/* ---- receive ------------------------------------------------------------------- */

void portSignalSlot(struct anycclProxyService* s, int slot) {
  if (s->cuda) /* device waits add the host counter (registry.c requires it for network peers) */
    __atomic_add_fetch(&s->hostSems[slot], 1, __ATOMIC_RELEASE);
  else
    anycclPortHostSignal(&s->slots[slot].value, &s->slots[slot].sleepers);
}

static ncclResult_t applyEntry(struct anycclProxyService* s, int kind, int peer, int slot, const struct portMsg* m) {
  if (kind == PORT_MSG_SIGNAL) portSignalSlot(s, slot);
  if (kind == PORT_MSG_CUSTOM) return s->netHandler(s->netHandlerArg, peer, m);
  return ncclSuccess;
}

int portStageHeader(struct anycclProxyService* s, int peer, int kind, const struct portMsg* m, char* dst, int slot,
                    char** buf, uint64_t* entry, ncclResult_t* err) {
  struct portStage* st = s->stage;
  *buf = NULL;
  *entry = UINT64_MAX;
  if (kind == PORT_MSG_PUT && m->size == 0) return 0;
  if (kind != PORT_MSG_PUT && st->qHead == st->qTail) { /* nothing before it: apply now */
    *err = applyEntry(s, kind, peer, slot, m);
    return *err == ncclSuccess ? 0 : -1;
  }
  if (st->qTail - st->qHead == STAGE_Q) return 1;
  struct stageEntry* e = &st->q[st->qTail % STAGE_Q];
  memset(e, 0, sizeof(*e));
  e->kind = kind;
  e->peer = peer;
  e->slot = slot;
  e->msg = *m;
  e->buf = -1;
  if (kind == PORT_MSG_PUT) {
    if (m->size > st->bytes) {
      WARN("port proxy of rank %d: rank %d sent a put message of %llu bytes, larger than the bounce buffers (%llu): "
           "set ANYCCL_PORT_BOUNCE_BYTES alike on every rank", s->rank, peer, (unsigned long long)m->size,
           (unsigned long long)st->bytes);
      *err = ncclInvalidUsage;
      return -1;
    }
    if (st->rxNFree == 0) return 1;
    e->buf = st->rxFree[--st->rxNFree];
    e->dst = dst;
    e->size = m->size;
    *buf = st->rxBuf[e->buf];
    *entry = st->qTail;
  }
  st->qTail++;
  return 0;
}

ncclResult_t portStageData(struct anycclProxyService* s, uint64_t entry) {
  struct portStage* st = s->stage;
  struct stageEntry* e = &st->q[entry % STAGE_Q];
  RTCHECK(st->rt.memcpyAsync(e->dst, st->rxBuf[e->buf], e->size, st->rxStream), "the copy of a put's data out of a bounce buffer");
  RTCHECK(anycclRt.eventRecord(st->rxEv[e->buf], st->rxStream), "cudaEventRecord");
  e->state = 1;
  e->t0 = anycclProfNow();
  return ncclSuccess;
}

int portStageBusy(struct anycclProxyService* s) {
  struct portStage* st = __atomic_load_n(&s->stage, __ATOMIC_ACQUIRE);
  return st && st->qHead != st->qTail;
}

int portStageProgress(struct anycclProxyService* s, ncclResult_t* err) {
  struct portStage* st = __atomic_load_n(&s->stage, __ATOMIC_ACQUIRE);
  int moved = 0;
  while (st && st->qHead < st->qTail && *err == ncclSuccess) {
    struct stageEntry* e = &st->q[st->qHead % STAGE_Q];
    if (e->kind == PORT_MSG_PUT) {
      if (e->state == 0) break;
      int q = st->rt.eventQuery(st->rxEv[e->buf]);
      if (q == NOT_READY) break;
      if (q != 0) {
        WARN("port proxy of rank %d: the copy out of a bounce buffer failed: %s (%d)", s->rank,
             anycclRt.getErrorString(q), q);
        *err = ncclUnhandledCudaError;
        break;
      }
      st->rxFree[st->rxNFree++] = e->buf;
      if (e->t0) anycclProfAdd(PROF_PORT_H2D, e->t0);
    } else {
      *err = applyEntry(s, e->kind, e->peer, e->slot, &e->msg);
    }
    st->qHead++;
    moved = 1;
  }
  return moved;
}
