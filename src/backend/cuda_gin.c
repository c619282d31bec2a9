/* GIN (NCCL 2.28's GPU-initiated networking) to ranks outside the LSA team,
 * that is on other hosts, on the machinery of port channels: one proxy
 * service per communicator (src/onesided), made by the first device
 * communicator that asks for GIN on a communicator that spans hosts.
 *
 * Device code (include/nccl_device/gin.h) writes a 64-byte descriptor
 * (struct anycclGinDesc) beside its FIFO entry and commits the entry as a
 * custom trigger; ginTrigger, on the proxy thread, turns it into a staged
 * put to the peer's proxy (port_bounce.c: the source copied into pinned
 * host memory, sent, copied into the peer's window; a put-value carries its
 * bytes in the message) and a custom message for the signal. The peer's
 * proxy applies that (ginMessage) after every earlier put of that
 * connection has landed (a put it dropped drops its signal): it adds it to a
 * host-mapped word of the device communicator, of which it is the only
 * writer; device waits add that word to the signal's device word.
 *
 * Windows are known to the proxy by their memory id in its service: windows
 * are registered collectively, in the same order on every rank, so the ids
 * agree, and a put names the destination by the sender's id. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "comm.h"
#include "rt.h"
#include "../onesided/port.h"
#include "nccl_device/core.h"

_Static_assert(sizeof(struct anycclGinDesc) == 64, "a GIN descriptor is 64 bytes");
_Static_assert(ANYCCL_GIN_TRIGGER == (((uint64_t)ANYCCL_TRIG_CUSTOM << 43) | ANYCCL_TRIG_COMMIT),
               "gin.h's trigger is a committed custom trigger of anyccl_port.h");

#define GIN_MAX_DEVCOMMS 1024
enum { GIN_MSG_SIGNAL = 1 };

/* A device communicator's host words (kept until the communicator ends: the
 * proxy thread may still hold them when ncclDevCommDestroy runs). */
struct ginDev {
  uint64_t* signals;
  void* signalsDev;
  int nSignals;
  uint64_t* counters;
  void* countersDev;
  int nCounters;
  struct anycclGinProxyDev* view; /* the device communicator's ginProxy (device memory; cpu backend: host) */
};

struct anycclGinHost {
  anycclProxyService_t svc;
  struct anycclPortFifo fifo;
  struct anycclGinDesc* desc; /* [fifo.size], host-mapped */
  void* descDev;
  struct ginDev* devs[GIN_MAX_DEVCOMMS];
};

/* Host words the device reads (GPUs: pinned and mapped; the cpu backend,
 * where host threads stand in for kernels in tests/onesided/test_gin.c:
 * plain memory). */
static ncclResult_t hostWords(size_t n, uint64_t** host, void** dev) {
  *host = NULL;
  *dev = NULL;
  if (n == 0) return ncclSuccess;
  if (anycclRt.kind != ANYCCL_BACKEND_CUDA) {
    ANYCCL_CALLOC(*host, n);
    *dev = *host;
    return ncclSuccess;
  }
  CUDACHECK(anycclRt.hostAllocMapped((void**)host, dev, n * sizeof(uint64_t)));
  memset(*host, 0, n * sizeof(uint64_t));
  return ncclSuccess;
}
static void hostWordsFree(void* p) {
  if (p == NULL) return;
  if (anycclRt.kind != ANYCCL_BACKEND_CUDA) free(p);
  else anycclRt.freeHost(p);
}

/* A bad descriptor or message: reported once, dropped (device flushes and
 * waits still end: their bounds), the service's error set. */
static ncclResult_t ginDrop(struct anycclGinHost* g, const char* what, long long value, long long limit) {
  struct anycclProxyService* s = g->svc;
  if (!__atomic_exchange_n(&s->warned, 1, __ATOMIC_RELAXED))
    WARN("GIN proxy of rank %d: dropped an operation with a bad %s (%lld; limit %lld): a kernel passed a bad "
         "argument or a window that is not registered on every rank", s->rank, what, value, limit);
  portSetError(s, ncclInvalidArgument);
  return ncclSuccess;
}

/* Sender: a descriptor from device code (the proxy thread). */
static ncclResult_t ginTrigger(void* arg, uint64_t w0, uint64_t w1) {
  struct anycclGinHost* g = arg;
  struct anycclProxyService* s = g->svc;
  uint64_t seq = s->curSeq;
  (void)w1;
  if (w0 != seq) return ginDrop(g, "FIFO sequence", (long long)w0, (long long)seq);
  struct anycclGinDesc d;
  memcpy(&d, &g->desc[seq & (g->fifo.size - 1)], sizeof(d));
  if (d.peer < 0 || d.peer >= s->nRanks || s->conns[d.peer].kind != CONN_NET ||
      !__atomic_load_n(&s->conns[d.peer].ready, __ATOMIC_ACQUIRE))
    return ginDrop(g, "peer (a rank on another host)", d.peer, s->nRanks);
  struct ginDev* dev = d.devComm >= 0 && d.devComm < GIN_MAX_DEVCOMMS ? __atomic_load_n(&g->devs[d.devComm], __ATOMIC_ACQUIRE) : NULL;
  if (dev == NULL) return ginDrop(g, "device communicator number", d.devComm, GIN_MAX_DEVCOMMS);
  struct portMsg m;
  if (d.op == ANYCCL_GIN_PUT) {
    if (d.counter >= dev->nCounters) return ginDrop(g, "counter", d.counter, dev->nCounters);
    if (d.dstMem < 0) return ginDrop(g, "destination window", d.dstMem, 0);
    NCCLCHECK(portNetPutBump(s, d.peer, d.dstMem, d.dstOff, (const char*)(uintptr_t)d.src, d.bytes, seq,
                             d.counter >= 0 ? &dev->counters[d.counter] : NULL));
  } else if (d.op == ANYCCL_GIN_PUT_VALUE) {
    if (d.bytes > 8 || d.dstMem < 0) return ginDrop(g, "put-value size or window", (long long)d.bytes, 8);
    NCCLCHECK(portNetPutInline(s, d.peer, d.dstMem, d.dstOff, &d.src, d.bytes, seq));
  } else if (d.op != ANYCCL_GIN_SIGNAL) {
    return ginDrop(g, "operation", d.op, ANYCCL_GIN_SIGNAL);
  }
  if (d.signal >= 0) { /* size 1: the signal of the put (or put-value) just before it */
    m = (struct portMsg){ANYCCL_TRIG_CUSTOM, (GIN_MSG_SIGNAL << 24) | (uint32_t)d.devComm, (uint64_t)d.signal,
                         d.op != ANYCCL_GIN_SIGNAL, d.sigValue};
    NCCLCHECK(portNetCustom(s, d.peer, &m, seq));
  }
  return ncclSuccess;
}

/* Receiver: a signal from a peer's proxy, after its earlier puts landed. */
static ncclResult_t ginMessage(void* arg, int peer, const struct portMsg* m) {
  struct anycclGinHost* g = arg;
  uint32_t op = m->id >> 24, idx = m->id & 0xffffff;
  (void)peer;
  struct ginDev* dev = idx < GIN_MAX_DEVCOMMS ? __atomic_load_n(&g->devs[idx], __ATOMIC_ACQUIRE) : NULL;
  if (dev == NULL) return ginDrop(g, "device communicator number", idx, GIN_MAX_DEVCOMMS);
  if (op == GIN_MSG_SIGNAL) {
    if (m->off >= (uint64_t)dev->nSignals) return ginDrop(g, "signal", (long long)m->off, dev->nSignals);
    /* the signal of a put whose bytes were dropped: dropped too (the waiter times out and reports) */
    if ((m->size & 1) && (m->type & PORT_MSG_AFTER_DROP))
      return ginDrop(g, "put destination (its signal dropped too)", (long long)m->off, 0);
    __atomic_add_fetch(&dev->signals[m->off], m->pad, __ATOMIC_RELEASE);
    return ncclSuccess;
  }
  return ginDrop(g, "message", op, GIN_MSG_SIGNAL);
}

anycclProxyService_t anycclGinService(struct ncclComm* comm) { return comm->gin ? comm->gin->svc : NULL; }

void anycclGinFree(struct ncclComm* comm) {
  struct anycclGinHost* g = comm->gin;
  if (g == NULL) return;
  if (g->svc) anycclProxyServiceDestroy(g->svc); /* stops the proxy thread first */
  hostWordsFree(g->desc);
  for (int i = 0; i < GIN_MAX_DEVCOMMS; i++) {
    struct ginDev* d = g->devs[i];
    if (d == NULL) continue;
    hostWordsFree(d->signals);
    hostWordsFree(d->counters);
    if (d->view && anycclRt.kind == ANYCCL_BACKEND_CUDA) anycclRt.free(d->view);
    else free(d->view);
    free(d);
  }
  free(g);
  comm->gin = NULL;
}

/* Ranks of one host outside each other's LSA team (hosts whose rank counts
 * are not multiples of one block, or whose ranks are not consecutive):
 * the same answer on every rank. */
static int sameHostOutsideLsa(struct ncclComm* comm, int lsaSize, int* p, int* q) {
  for (*p = 0; *p < comm->nRanks; (*p)++)
    for (*q = *p + 1; *q < comm->nRanks; (*q)++)
      if (comm->peerInfo[*p].hostHash == comm->peerInfo[*q].hostHash && *p / lsaSize != *q / lsaSize) return 1;
  return 0;
}

/* Collective (every rank of comm, once): the proxy and its connections to
 * every rank of another host, in ascending order (one global order of the
 * pairs: no rank waits for a pair that waits for it). */
ncclResult_t anycclGinSetup(struct ncclComm* comm) {
  if (comm->gin) return ncclSuccess;
  int lsaSize, lsaRank, p, q;
  anycclLsaTeam(comm, &lsaSize, &lsaRank);
  if (sameHostOutsideLsa(comm, lsaSize, &p, &q)) {
    WARN("ncclDevCommCreate: GIN across hosts needs each host's ranks in one LSA team of consecutive ranks, the "
         "same count on every host: ranks %d and %d share a host but not an LSA team (LSA teams of %d)", p, q,
         lsaSize);
    return ncclInvalidUsage;
  }
  if (anycclRt.kind == ANYCCL_BACKEND_CUDA && anycclRt.hostAllocMapped == NULL) {
    WARN("ncclDevCommCreate: GIN across hosts needs the cuda backend's mapped host memory (this libnccl lacks it)");
    return ncclInvalidUsage;
  }
  struct anycclGinHost* g;
  ANYCCL_CALLOC(g, 1);
  comm->gin = g;
  ncclResult_t r = anycclProxyServiceCreate(comm, 0, &g->svc);
  if (r == ncclSuccess) r = anycclProxyServiceFifo(g->svc, &g->fifo);
  if (r == ncclSuccess) {
    uint64_t* host;
    r = hostWords((size_t)g->fifo.size * sizeof(struct anycclGinDesc) / 8, &host, &g->descDev);
    g->desc = (struct anycclGinDesc*)host;
  }
  if (r == ncclSuccess) r = anycclProxyServiceSetHandler(g->svc, ginTrigger, g);
  if (r == ncclSuccess) {
    g->svc->netHandler = ginMessage;
    g->svc->netHandlerArg = g;
  }
  /* every rank walks all pairs, also after a failure, so that none waits alone */
  for (int peer = 0; peer < comm->nRanks; peer++) {
    if (peer / lsaSize == comm->rank / lsaSize) continue;
    anycclSemaphoreId sem;
    ncclResult_t c = r == ncclSuccess ? anycclSemaphoreCreate(g->svc, peer, &sem) : r;
    if (r == ncclSuccess) r = c;
  }
  if (r == ncclSuccess) r = anycclProxyServiceStart(g->svc);
  if (r != ncclSuccess) {
    anycclGinFree(comm);
    return r;
  }
  INFO(NCCL_INIT | NCCL_PROXY, "rank %d: GIN to %d ranks on other hosts through the proxy (FIFO of %u)", comm->rank,
       comm->nRanks - lsaSize, g->fifo.size);
  return ncclSuccess;
}

ncclResult_t anycclGinRegister(struct ncclComm* comm, void* ptr, size_t bytes, int* mem) {
  *mem = -1;
  if (comm->gin == NULL) return ncclSuccess;
  anycclMemoryId id;
  NCCLCHECK(anycclRegisterMemory(comm->gin->svc, ptr, bytes, &id));
  *mem = id;
  return ncclSuccess;
}

void anycclGinUnregister(struct ncclComm* comm, int mem) {
  struct anycclGinHost* g = comm->gin;
  if (g == NULL || mem < 0) return;
  pthread_mutex_lock(&g->svc->lock);
  if (mem < g->svc->nMems) __atomic_store_n(&g->svc->mems[mem].kind, MEM_FREE, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g->svc->lock);
}

/* A device communicator's signals and counters (host words) and its view of the proxy. */
ncclResult_t anycclGinAttach(struct ncclComm* comm, int index, int nSignals, int nCounters, struct ncclDevComm* out) {
  struct anycclGinHost* g = comm->gin;
  if (index < 0 || index >= GIN_MAX_DEVCOMMS) {
    WARN("ncclDevCommCreate: GIN across hosts: this communicator made %d device communicators already (at most %d "
         "use GIN across hosts)", index, GIN_MAX_DEVCOMMS);
    return ncclInvalidUsage;
  }
  struct ginDev* d;
  ANYCCL_CALLOC(d, 1);
  d->nSignals = nSignals;
  d->nCounters = nCounters;
  ncclResult_t r = hostWords((size_t)nSignals, &d->signals, &d->signalsDev);
  if (r == ncclSuccess) r = hostWords((size_t)nCounters, &d->counters, &d->countersDev);
  if (r != ncclSuccess) {
    hostWordsFree(d->signals);
    free(d);
    return r;
  }
  struct anycclGinProxyDev v = {g->fifo.trig, (unsigned long long*)g->fifo.head, (struct anycclGinDesc*)g->descDev,
                                &g->fifo.shared->tail, &g->fifo.shared->done, &g->fifo.shared->state,
                                (uint64_t*)d->signalsDev, (uint64_t*)d->countersDev, g->fifo.size, index};
  if (anycclRt.kind != ANYCCL_BACKEND_CUDA) {
    if ((d->view = malloc(sizeof(v))) != NULL) *d->view = v;
  } else if (anycclRt.malloc((void**)&d->view, sizeof(v)) == 0 && anycclRt.memcpy(d->view, &v, sizeof(v)) != 0) {
    anycclRt.free(d->view);
    d->view = NULL;
  }
  if (d->view == NULL) {
    WARN("ncclDevCommCreate: no memory for the GIN proxy's device view");
    hostWordsFree(d->signals);
    hostWordsFree(d->counters);
    free(d);
    return ncclSystemError;
  }
  __atomic_store_n(&g->devs[index], d, __ATOMIC_RELEASE);
  out->ginProxy = d->view;
  return ncclSuccess;
}
