/* Port channels to another host: the proxy turns a put into messages
 * {header, data} over the network transport (anycclNet_t: TCP sockets built
 * in), at most ANYCCL_PORT_CHUNK bytes each, sent straight from the source
 * memory; the peer's proxy receives the data straight into the registered
 * destination memory. A signal is a header alone: messages of a connection
 * complete in order, so the peer bumps its semaphore after every earlier
 * put has landed. A put counts as complete (flush) once its messages have
 * left. GPUs (and the cpu backend with ANYCCL_PORT_STAGE=1) send from and
 * receive into pinned host bounce buffers instead (port_bounce.c). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bootstrap.h"
#include "checks.h"
#include "port.h"

enum { RQ_HDR = 0, RQ_DATA = 1 };

ncclResult_t portNetConnect(struct anycclProxyService* s, int peer) {
  struct ncclComm* comm = s->comm;
  if (s->net == NULL) {
    s->net = anycclNetDefault();
    NCCLCHECK(s->net->init());
  }
  if (portStageWanted(s)) NCCLCHECK(portStageInit(s));
  struct portConn* c = &s->conns[peer];
  char mine[ANYCCL_NET_HANDLE_MAXSIZE], theirs[ANYCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = NULL;
  int tag = portTag(s, 2, 1);
  memset(mine, 0, sizeof(mine));
  NCCLCHECK(s->net->listen(0, mine, &listenComm, &comm->abortFlag));
  ncclResult_t r = bootstrapSend(comm->bootstrap, peer, tag, mine, sizeof(mine));
  if (r == ncclSuccess) r = bootstrapRecv(comm->bootstrap, peer, tag, theirs, sizeof(theirs));
  if (r == ncclSuccess)
    r = anycclNetConnectAll(s->net, 1, (char(*)[ANYCCL_NET_HANDLE_MAXSIZE])theirs, &c->sendComm, 1, &listenComm,
                            &c->recvComm, &comm->abortFlag);
  s->net->closeListen(listenComm);
  if (r != ncclSuccess) {
    WARN("port: rank %d cannot connect to rank %d over the network: %s", s->rank, peer, ncclGetErrorString(r));
    return r;
  }
  if (s->net->setNotify) {
    s->net->setNotify(c->sendComm, s->efd, NULL);
    s->net->setNotify(c->recvComm, s->efd, NULL);
  }
  return ncclSuccess;
}

static int progressSend(struct anycclProxyService* s, struct portConn* c, ncclResult_t* err) {
  const anycclNet_t* net = s->net;
  int moved = 0;
  while (c->sqPosted < c->sqTail) {
    struct netSendEntry* e = &c->sq[c->sqPosted % NET_SQ];
    if (e->event) { /* staged: its copy into the bounce buffer first */
      int ready = portStageSendReady(s, e);
      if (ready < 0) *err = ncclUnhandledCudaError;
      if (ready <= 0) return moved;
    }
    if (e->state == 0) {
      /* the entries behind it that are ready ride along: header-only ones,
       * and at most one put last (its data inside when it is small, else
       * as a message of its own) */
      int k = 1, b = -1;
      if (!(e->msg.type == ANYCCL_TRIG_PUT && e->msg.size > 0)) {
        for (uint64_t p = c->sqPosted + 1; k < PORT_BATCH && p < c->sqTail; p++) {
          const struct netSendEntry* f = &c->sq[p % NET_SQ];
          if (f->state != 0 || f->event) break;
          k++;
          if (f->msg.type == ANYCCL_TRIG_PUT && f->msg.size > 0) break;
        }
      }
      struct netSendEntry* last = &c->sq[(c->sqPosted + k - 1) % NET_SQ];
      const int inl = last->msg.type == ANYCCL_TRIG_PUT && last->msg.size > 0 && last->msg.size <= PORT_INLINE;
      for (int i = 0; (k > 1 || inl) && i < PORT_SBATCH && b < 0; i++) b = c->sbatchBusy[i] ? -1 : i;
      if (b < 0) k = 1; /* no send buffer free: e alone, its data apart */
      const void* hdr = &e->msg;
      size_t len = k * sizeof(e->msg);
      if (b >= 0) {
        for (int j = 0; j < k; j++) c->sbatch[b][j] = c->sq[(c->sqPosted + j) % NET_SQ].msg;
        if (inl) {
          c->sbatch[b][k - 1].type |= PORT_MSG_INLINE;
          memcpy(&c->sbatch[b][k], last->data, last->msg.size);
          len += last->msg.size;
        }
        hdr = c->sbatch[b];
      }
      if ((*err = net->isend(c->sendComm, (void*)hdr, len, 0, NULL, &e->hreq)) != ncclSuccess) return moved;
      if (e->hreq == NULL) break;
      if (b >= 0 && inl) last->inl = 1; /* its data went with the headers */
      e->state = 1;
      e->batch = b;
      if (b >= 0) c->sbatchBusy[b] = 1;
      for (int j = 1; j < k; j++) c->sq[(c->sqPosted + j) % NET_SQ].state = 1; /* sent with e's */
    }
    if (e->state == 1 && e->msg.type == ANYCCL_TRIG_PUT && e->msg.size > 0 && !e->inl) { /* only puts carry data */
      if ((*err = net->isend(c->sendComm, (void*)e->data, e->msg.size, 0, NULL, &e->dreq)) != ncclSuccess)
        return moved;
      if (e->dreq == NULL) break;
    }
    e->state = 2;
    c->sqPosted++;
    moved = 1;
  }
  while (c->sqHead < c->sqPosted) {
    struct netSendEntry* e = &c->sq[c->sqHead % NET_SQ];
    int d = 0;
    if (e->hreq) {
      if ((*err = net->test(e->hreq, &d, NULL)) != ncclSuccess || !d) return moved;
      e->hreq = NULL;
      if (e->batch >= 0) c->sbatchBusy[e->batch] = 0;
    }
    if (e->dreq) {
      if ((*err = net->test(e->dreq, &d, NULL)) != ncclSuccess || !d) return moved;
      e->dreq = NULL;
    }
    portStageSendDone(s, e);
    if (e->t0) anycclProfAdd(PROF_PORT_SEND, e->t0);
    if (e->bump) __atomic_add_fetch(e->bump, 1, __ATOMIC_RELEASE);
    c->sqHead++;
    moved = 1;
  }
  return moved;
}

/* Test hook (test_port's recvfail case): ANYCCL_TEST_PORT_REFUSE_HDR=N
 * refuses the Nth receive of headers this process posts, as a network
 * whose connection failed would. */
static int refuseHdr(void) {
  static int at = -1, n;
  int a = __atomic_load_n(&at, __ATOMIC_RELAXED);
  if (a < 0) {
    const char* e = getenv("ANYCCL_TEST_PORT_REFUSE_HDR");
    __atomic_store_n(&at, a = e ? atoi(e) : 0, __ATOMIC_RELAXED);
  }
  return a > 0 && __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED) == a;
}

static ncclResult_t postRecv(struct anycclProxyService* s, struct portConn* c, int kind, void* data, size_t size,
                             uint64_t stageEntry) {
  if (kind == RQ_HDR && refuseHdr()) {
    WARN("port proxy of rank %d: receive refused (ANYCCL_TEST_PORT_REFUSE_HDR)", s->rank);
    return ncclSystemError;
  }
  int i = (c->rhead + c->rcount) % NET_RQ;
  if (kind == RQ_HDR) data = c->rhdr[i], size = sizeof(c->rhdr[i]);
  int tag = 0;
  void* req = NULL;
  NCCLCHECK(s->net->irecv(c->recvComm, 1, &data, &size, &tag, NULL, &req));
  if (req == NULL) {
    WARN("port: the network refused a receive (too many in flight)");
    return ncclInternalError;
  }
  c->rreq[i] = req;
  c->rkind[i] = kind;
  c->rsize[i] = size;
  c->rstage[i] = stageEntry;
  c->rcount++;
  return ncclSuccess;
}

int portNetBatchCount(const void* msg, size_t got, size_t* inlineBytes, char* why, size_t whyLen) {
  *inlineBytes = 0;
  size_t off = 0;
  int k = 0;
  while (k < PORT_BATCH && got - off >= sizeof(struct portMsg)) {
    struct portMsg m;
    memcpy(&m, (const char*)msg + off, sizeof(m));
    off += sizeof(m);
    k++;
    if (!(m.type & PORT_MSG_INLINE)) continue;
    if ((m.type & ~PORT_MSG_INLINE) != ANYCCL_TRIG_PUT || m.size == 0 || m.size > PORT_INLINE || got - off != m.size) {
      snprintf(why, whyLen, "header %d of a message of %zu bytes: inline data of %llu bytes with %zu bytes left (a put of 1 to %d bytes, the message's end)",
               k, got, (unsigned long long)m.size, got - off, PORT_INLINE);
      return -1;
    }
    *inlineBytes = m.size;
    return k;
  }
  if (k == 0 || off != got) {
    snprintf(why, whyLen, "a message of headers of %zu bytes (a multiple of %zu, at most %zu, or inline data after the last)",
             got, sizeof(struct portMsg), PORT_BATCH * sizeof(struct portMsg));
    return -1;
  }
  return k;
}

int portNetParseMsg(const struct anycclProxyService* s, int peer, const void* bytes, size_t got, struct portMsg* m,
                    char** ptr, int* slot, char* why, size_t whyLen) {
  *ptr = NULL;
  *slot = -1;
  memset(m, 0, sizeof(*m));
  if (got != sizeof(*m)) {
    snprintf(why, whyLen, "a message header of %zu bytes (not %zu)", got, sizeof(*m));
    return PORT_MSG_BAD;
  }
  memcpy(m, bytes, sizeof(*m));
  if (m->type == ANYCCL_TRIG_PUT) {
    if (m->size > ANYCCL_PORT_MAX_PUT) {
      snprintf(why, whyLen, "a put of %llu bytes (one message carries at most %llu)", (unsigned long long)m->size,
               (unsigned long long)ANYCCL_PORT_MAX_PUT);
      return PORT_MSG_BAD;
    }
    int n = __atomic_load_n(&s->nMems, __ATOMIC_ACQUIRE);
    if (m->id < (uint32_t)n && s->mems[m->id].kind == MEM_LOCAL && m->off <= s->mems[m->id].size &&
        m->size <= s->mems[m->id].size - m->off) {
      *ptr = s->mems[m->id].ptr + m->off;
      return PORT_MSG_PUT;
    }
    snprintf(why, whyLen, "a put from rank %d names memory %u, bytes [%llu, +%llu) that is not registered here", peer,
             m->id, (unsigned long long)m->off, (unsigned long long)m->size);
    return PORT_MSG_DISCARD;
  }
  if (m->type == ANYCCL_TRIG_SIGNAL) {
    int n = __atomic_load_n(&s->nSems, __ATOMIC_ACQUIRE);
    if (m->id < (uint32_t)n && s->sems[m->id].peer == peer) {
      *slot = (int)m->id;
      return PORT_MSG_SIGNAL;
    }
    snprintf(why, whyLen, "rank %d signalled semaphore %u, which is not one of theirs", peer, m->id);
    return PORT_MSG_DISCARD;
  }
  if (m->type == ANYCCL_TRIG_CUSTOM) {
    if (s->netHandler) return PORT_MSG_CUSTOM;
    snprintf(why, whyLen, "rank %d sent a custom message, but this service has no handler for them", peer);
    return PORT_MSG_DISCARD;
  }
  snprintf(why, whyLen, "a message of unknown type %u from rank %d", m->type, peer);
  return PORT_MSG_BAD;
}

/* A parsed header: where its data goes, and its signal or custom message
 * applied (now, or behind earlier staged puts). 0: done; 1: no room now
 * (the caller holds the header); -1: error. */
static int deliver(struct anycclProxyService* s, struct portConn* c, int peer, int kind, const struct portMsg* m,
                   char* ptr, int slot, int last, ncclResult_t* err) {
  uint64_t entry = UINT64_MAX;
  if (kind == PORT_MSG_DISCARD) {
    ptr = c->discard;
  } else if (s->stage) {
    int h = portStageHeader(s, peer, kind, m, ptr, slot, &ptr, &entry, err);
    if (h != 0) return h;
  } else if (kind == PORT_MSG_SIGNAL) {
    portSignalSlot(s, slot);
  } else if (kind == PORT_MSG_CUSTOM && (*err = s->netHandler(s->netHandlerArg, peer, m)) != ncclSuccess) {
    return -1;
  }
  if (!last) return 0; /* (a batch's earlier headers carry no data) */
  if (m->type == ANYCCL_TRIG_PUT && m->size > 0 && c->npendInline) { /* its data came inside */
    memcpy(ptr, (const char*)&c->pend[c->npend], m->size);
    if (entry != UINT64_MAX && (*err = portStageData(s, entry)) != ncclSuccess) return -1;
  } else if (m->type == ANYCCL_TRIG_PUT && m->size > 0 && (*err = postRecv(s, c, RQ_DATA, ptr, m->size, entry)) != ncclSuccess) {
    return -1;
  }
  if ((*err = postRecv(s, c, RQ_HDR, NULL, 0, UINT64_MAX)) != ncclSuccess) return -1;
  return 0;
}

/* Deliver the received batch's headers in order from ipend; the last one
 * posts the next receives. 0: all delivered; 1: held (no room now: no
 * further receive is posted on this connection until it is delivered); -1:
 * error (*err). */
static int drainBatch(struct anycclProxyService* s, struct portConn* c, int peer, ncclResult_t* err) {
  while (c->ipend < c->npend) {
    const int last = c->ipend == c->npend - 1;
    struct portMsg m;
    char* ptr;
    int slot, kind;
    if (c->held) {
      m = c->heldMsg, ptr = c->heldPtr, kind = c->heldKind, slot = c->heldSlot;
    } else {
      char why[256];
      struct portMsg h = c->pend[c->ipend];
      h.type &= ~PORT_MSG_INLINE; /* (portNetBatchCount checked it: the last header, a put) */
      kind = portNetParseMsg(s, peer, &h, sizeof(struct portMsg), &m, &ptr, &slot, why, sizeof(why));
      if (kind != PORT_MSG_BAD && !last && m.type == ANYCCL_TRIG_PUT && m.size > 0) {
        snprintf(why, sizeof(why), "a put header with data inside a batch (header %d of %d)", c->ipend + 1, c->npend);
        kind = PORT_MSG_BAD;
      }
      if (kind == PORT_MSG_BAD) {
        WARN("port proxy of rank %d: %s; the connection to rank %d fails", s->rank, why, peer);
        *err = ncclRemoteError;
        return -1;
      }
      if (kind == PORT_MSG_DISCARD) {
        if (!__atomic_exchange_n(&s->warned, 1, __ATOMIC_RELAXED))
          WARN("port proxy of rank %d: %s; dropped (flush reports ncclInvalidArgument)", s->rank, why);
        portSetError(s, ncclInvalidArgument);
        if (m.type == ANYCCL_TRIG_PUT && c->discardSize < m.size) { /* its bytes still come: receive and drop them */
          char* dd = realloc(c->discard, m.size);
          if (dd == NULL) {
            *err = ncclSystemError;
            return -1;
          }
          c->discard = dd;
          c->discardSize = m.size;
        }
      }
      /* a custom message right behind a put that was dropped says so (GIN drops the put's signal) */
      if (m.type == ANYCCL_TRIG_PUT) c->putDropped = kind == PORT_MSG_DISCARD;
      if (kind == PORT_MSG_CUSTOM && c->putDropped) m.type |= PORT_MSG_AFTER_DROP;
    }
    int h = deliver(s, c, peer, kind, &m, ptr, slot, last, err);
    if (h < 0) return -1;
    if (h > 0) {
      c->held = 1;
      c->heldMsg = m, c->heldPtr = ptr, c->heldKind = kind, c->heldSlot = slot;
      return 1;
    }
    c->held = 0;
    c->ipend++;
  }
  return 0;
}

static int recvSome(struct anycclProxyService* s, struct portConn* c, int peer, ncclResult_t* err) {
  int moved = 0;
  if (c->ipend < c->npend) { /* a batch whose next header found no bounce buffer or queue room before */
    if (drainBatch(s, c, peer, err) != 0) return 0;
    moved = 1;
  }
  if (c->rcount == 0 && (*err = postRecv(s, c, RQ_HDR, NULL, 0, UINT64_MAX)) != ncclSuccess) return 0;
  while (c->rcount > 0) {
    int i = c->rhead, d = 0;
    size_t got = 0;
    if ((*err = s->net->test(c->rreq[i], &d, &got)) != ncclSuccess || !d) return moved;
    moved = 1;
    c->rhead = (c->rhead + 1) % NET_RQ;
    c->rcount--;
    if (got == SIZE_MAX) { /* the peer closed the connection normally */
      c->closed = 1;
      return moved;
    }
    if (c->rkind[i] != RQ_HDR) {
      if (got == c->rsize[i]) {
        if (c->rstage[i] != UINT64_MAX && (*err = portStageData(s, c->rstage[i])) != ncclSuccess) return moved;
        continue;
      }
      WARN("port proxy of rank %d: a put's data from rank %d arrived short (%zu of %zu bytes); the connection fails",
           s->rank, peer, got, c->rsize[i]);
      *err = ncclRemoteError;
      return moved;
    }
    char why[256];
    size_t inl = 0;
    const int k = portNetBatchCount(c->rhdr[i], got, &inl, why, sizeof(why));
    if (k < 0) {
      WARN("port proxy of rank %d: %s; the connection to rank %d fails", s->rank, why, peer);
      *err = ncclRemoteError;
      return moved;
    }
    memcpy(c->pend, c->rhdr[i], got);
    c->npend = k;
    c->npendInline = inl;
    c->ipend = 0;
    if (drainBatch(s, c, peer, err) != 0) return moved;
  }
  return moved;
}

/* A connection whose receive side failed takes nothing more: the proxy
 * keeps calling this after an error (the service is in error by then), and
 * a batch whose last header was applied before posting the next receives
 * failed must not be applied again. */
static int progressRecv(struct anycclProxyService* s, struct portConn* c, int peer, ncclResult_t* err) {
  if (c->closed) return 0;
  int moved = recvSome(s, c, peer, err);
  if (*err != ncclSuccess) c->closed = 1;
  return moved;
}

int portNetProgress(struct anycclProxyService* s, uint64_t* oldest, ncclResult_t* err) {
  if (s->net == NULL) return 0;
  int moved = 0;
  for (int q = 0; q < s->nRanks && *err == ncclSuccess; q++) {
    struct portConn* c = &s->conns[q];
    if (!__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) || c->kind != CONN_NET) continue;
    moved |= progressSend(s, c, err);
    if (*err == ncclSuccess) moved |= progressRecv(s, c, q, err);
    if (c->sqHead < c->sqTail && c->sq[c->sqHead % NET_SQ].seq < *oldest) *oldest = c->sq[c->sqHead % NET_SQ].seq;
  }
  if (*err == ncclSuccess) moved |= portStageProgress(s, err);
  return moved;
}

/* Queue a message; while the queue is full, move messages (bounded). */
ncclResult_t portNetQueue(struct anycclProxyService* s, int peer, const struct portMsg* m, const char* data,
                          uint64_t seq, int stageBuf, void* event, uint64_t* bump) {
  struct portConn* c = &s->conns[peer];
  uint64_t spins = 0;
  double start = 0;
  while (c->sqTail - c->sqHead == NET_SQ) {
    ncclResult_t err = ncclSuccess;
    uint64_t oldest = seq;
    if (portNetProgress(s, &oldest, &err)) continue;
    if (err != ncclSuccess) return err;
    if (__atomic_load_n(&s->comm->abortFlag, __ATOMIC_ACQUIRE)) return ncclInvalidUsage;
    if ((++spins & 1023) == 0) {
      double t = anycclNowSec();
      if (start == 0) start = t;
      if (s->timeoutNs && (t - start) * 1e9 > s->timeoutNs) {
        WARN("port proxy of rank %d: the network to rank %d took nothing for %.1f s", s->rank, peer, t - start);
        return ncclSystemError;
      }
    }
    sched_yield();
  }
  struct netSendEntry* e = &c->sq[c->sqTail % NET_SQ];
  memset(e, 0, sizeof(*e));
  e->msg = *m;
  e->data = data;
  e->seq = seq;
  e->stageBuf = stageBuf;
  e->event = event;
  e->bump = bump;
  e->batch = -1;
  e->t0 = anycclProfNow();
  c->sqTail++;
  return ncclSuccess;
}

ncclResult_t portNetPutBump(struct anycclProxyService* s, int peer, int remoteId, uint64_t dstOff, const char* src,
                            uint64_t bytes, uint64_t seq, uint64_t* bump) {
  if (s->stage) return portStagePut(s, peer, remoteId, dstOff, src, bytes, seq, bump);
  uint64_t o = 0;
  do { /* a put of 0 bytes still sends its header (the peer checks it) */
    uint64_t n = bytes - o < s->chunk ? bytes - o : s->chunk;
    struct portMsg m = {ANYCCL_TRIG_PUT, (uint32_t)remoteId, dstOff + o, n, 0};
    o += n;
    NCCLCHECK(portNetQueue(s, peer, &m, src + o - n, seq, -1, NULL, o >= bytes ? bump : NULL));
  } while (o < bytes);
  return ncclSuccess;
}

ncclResult_t portNetPut(struct anycclProxyService* s, int peer, int remoteId, uint64_t dstOff, const char* src,
                        uint64_t bytes, uint64_t seq) {
  return portNetPutBump(s, peer, remoteId, dstOff, src, bytes, seq, NULL);
}

ncclResult_t portNetPutInline(struct anycclProxyService* s, int peer, int remoteId, uint64_t dstOff, const void* src,
                              uint64_t bytes, uint64_t seq) {
  if (bytes > sizeof(uint64_t)) return ncclInternalError;
  struct portMsg m = {ANYCCL_TRIG_PUT, (uint32_t)remoteId, dstOff, bytes, 0};
  NCCLCHECK(portNetQueue(s, peer, &m, NULL, seq, -1, NULL, NULL));
  struct portConn* c = &s->conns[peer];
  struct netSendEntry* e = &c->sq[(c->sqTail - 1) % NET_SQ];
  memcpy(&e->inlineData, src, bytes);
  e->data = (const char*)&e->inlineData;
  return ncclSuccess;
}

ncclResult_t portNetSignal(struct anycclProxyService* s, int peer, int remoteSlot, uint64_t seq) {
  struct portMsg m = {ANYCCL_TRIG_SIGNAL, (uint32_t)remoteSlot, 0, 0, 0};
  return portNetQueue(s, peer, &m, NULL, seq, -1, NULL, NULL);
}

ncclResult_t portNetCustom(struct anycclProxyService* s, int peer, const struct portMsg* m, uint64_t seq) {
  struct portMsg c = *m; /* size and pad are the handler's (no data follows) */
  c.type = ANYCCL_TRIG_CUSTOM;
  return portNetQueue(s, peer, &c, NULL, seq, -1, NULL, NULL);
}

void portNetClose(struct anycclProxyService* s) {
  if (s->net == NULL || s->conns == NULL) return;
  for (int q = 0; q < s->nRanks; q++) {
    struct portConn* c = &s->conns[q];
    if (c->sendComm) s->net->closeSend(c->sendComm);
    if (c->recvComm) s->net->closeRecv(c->recvComm);
    free(c->discard);
    c->sendComm = c->recvComm = NULL;
  }
  portStageFree(s);
}
