/* The P2P engine's progress thread: one per connection, it deals outgoing
 * chunks over the channels, writes and reads the channel sockets, matches
 * incoming chunks with requests and fails everything when a channel drops
 * or nothing moves for the connection's timeout. See p2p_int.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>
#include "checks.h"
#include "debug.h"
#include "net.h"
#include "p2p_int.h"

void p2pWake(struct anycclP2pConn* c) {
  uint64_t one = 1;
  ssize_t r = write(c->wakeFd, &one, sizeof(one));
  (void)r;
}

/* ---- bookkeeping (lock held) ------------------------------------------------ */
struct p2pTagSeq* p2pTagSeq(struct anycclP2pConn* c, int tag) {
  for (struct p2pTagSeq* t = c->tags; t; t = t->next)
    if (t->tag == tag) return t;
  struct p2pTagSeq* t = calloc(1, sizeof(*t));
  if (t == NULL) return NULL;
  t->tag = tag;
  t->next = c->tags;
  c->tags = t;
  return t;
}

void p2pReqLink(struct anycclP2pConn* c, struct anycclP2pReq* r) {
  r->prev = NULL;
  r->next = c->active;
  if (c->active) c->active->prev = r;
  c->active = r;
}

void p2pReqUnlink(struct anycclP2pConn* c, struct anycclP2pReq* r) {
  if (r->prev) r->prev->next = r->next;
  else if (c->active == r) c->active = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
}

void p2pOutPush(struct anycclP2pConn* c, struct anycclP2pReq* r) {
  r->outNext = NULL;
  if (c->outTail) c->outTail->outNext = r;
  else c->outHead = r;
  c->outTail = r;
}

void p2pReqComplete(struct anycclP2pConn* c, struct anycclP2pReq* r, ncclResult_t err) {
  if (r->done) return;
  /* a failure before r's copies completed: none touches r's buffer after this */
  if (r->bounce && (r->copiesLeft > 0 || err != ncclSuccess)) p2pBounceForget(c, r);
  p2pReqUnlink(c, r);
  /* a channel still reading a chunk into r (a peer that sent overlapping
   * chunks, or refused a read halfway) discards the rest: r and its buffer
   * belong to the caller once done is seen. Callers hold plock, or (a
   * receive completed as it is posted) r is no channel's yet. */
  for (int k = 0; k < c->nch; k++)
    if (c->ch[k].rreq == r) c->ch[k].rreq = NULL, c->ch[k].rdst = NULL;
  r->err = err;
  if (r->kind == REQ_RESP) {
    free(r);
    return;
  }
  if (c->keepDone) {
    r->outNext = c->finished;
    c->finished = r;
  }
  /* once done is seen the owner may free r: nothing touches r after this */
  __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&c->cv);
  anycclNetNotify(c->notifyFd, c->notifyAsleep);
}

/* 1 when r completed (then r may be gone). */
static int recvChunkArrived(struct anycclP2pConn* c, struct anycclP2pReq* r, uint64_t len) {
  r->moved += len;
  /* bounced: complete once the last copy into r's buffer did (p2pBounceReap) */
  if (r->total == SIZE_MAX || r->moved < r->total || r->copiesLeft > 0) return 0;
  p2pReqComplete(c, r, r->err);
  return 1;
}

/* A message of `total` bytes arrives for receive r: too long fails it (the
 * bytes are still consumed). Returns 1 if the chunk's bytes may land. */
static int recvAccepts(struct anycclP2pReq* r, uint64_t total, uint64_t off, uint64_t len, uint32_t imm) {
  if (r->total == SIZE_MAX) {
    r->total = total;
    struct anycclP2pConn* c = r->conn;
    void* to = c->pick && total > 0 && total <= r->size ? c->pick(c->pickArg, r->buf, (size_t)total, imm) : NULL;
    if (to) r->buf = to;
    if (total > r->size) {
      WARN("P2P: a message of %llu bytes (tag %d) arrived for a receive of %zu bytes; the receive fails with "
           "ncclInvalidUsage (post a larger buffer)", (unsigned long long)total, r->tag, r->size);
      r->err = ncclInvalidUsage;
    }
  }
  return r->err == ncclSuccess && off <= r->total && len <= r->total - off;
}

void p2pRecvTakeUnexpected(struct anycclP2pConn* c, struct anycclP2pReq* r) {
  struct p2pUnexp** pp = &c->unexp;
  while (*pp) {
    struct p2pUnexp* u = *pp;
    if (u->tag != r->tag || u->id != r->id) {
      pp = &u->next;
      continue;
    }
    *pp = u->next;
    r->imm = u->imm;
    if (recvAccepts(r, u->total, u->off, u->len, u->imm) && u->len) {
      if (!r->bounce) {
        memcpy(r->buf + u->off, u->data, u->len);
      } else {
        if (p2pBounceUnpack(c, r, r->buf + u->off, u->data, u->len, -1, u->data) != 0) r->err = ncclUnhandledCudaError;
        u->data = NULL; /* freed after its copy */
      }
    }
    c->ch[u->chan].unexpCount--;
    uint64_t len = u->len;
    free(u->data);
    free(u);
    if (recvChunkArrived(c, r, len)) break;
  }
}

static struct anycclP2pReq* findReq(struct anycclP2pConn* c, int kind, int tag, uint64_t id) {
  for (struct anycclP2pReq* r = c->active; r; r = r->next)
    if (r->id == id && (kind == 0 ? (r->kind == REQ_WRITE || r->kind == REQ_READ) : r->kind == kind) &&
        (kind != REQ_RECV || r->tag == tag))
      return r;
  return NULL;
}

static void failAll(struct anycclP2pConn* c, ncclResult_t err) {
  while (c->active) p2pReqComplete(c, c->active, err);
  c->outHead = c->outTail = NULL;
  pthread_cond_broadcast(&c->cv);
}

static void connError(struct anycclP2pConn* c, ncclResult_t err, const char* fmt, int chan, const char* why) {
  pthread_mutex_lock(&c->lock);
  if (c->error == ncclSuccess) {
    c->error = err;
    if (c->active && !(c->quietBye && c->peerBye))
      WARN("P2P: connection failed: %s (channel %d: %s); its pending requests fail with %s", fmt, chan, why,
           ncclGetErrorString(err));
    else
      INFO(NCCL_NET, "P2P: connection ended: %s (channel %d: %s)", fmt, chan, why);
  }
  failAll(c, err);
  pthread_mutex_unlock(&c->lock);
}

/* ---- sending ------------------------------------------------------------------- */
static void chanPush(struct p2pChannel* ch, struct p2pItem* it) {
  it->next = NULL;
  it->off = 0;
  if (ch->qtail) ch->qtail->next = it;
  else ch->qhead = it;
  ch->qtail = it;
  if (it->counted) ch->inflight++;
}

static void pushControl(struct anycclP2pConn* c, int chan, int op, int flags, uint64_t id, uint64_t total) {
  struct p2pItem* it = calloc(1, sizeof(*it));
  if (it == NULL) return; /* the peer's request then times out */
  it->hdr = (struct p2pHdr){P2P_MAGIC, (uint16_t)op, (uint16_t)flags, 0, 0, id, 0, 0, 0, total, 0};
  it->bidx = -1;
  chanPush(&c->ch[chan], it);
}

/* Deal chunks of the queued outgoing requests to the channels, strictly
 * round-robin (a message of one chunk: its p2pMsgChannel); stop at a
 * channel whose window is full (lock held). */
static void schedule(struct anycclP2pConn* c) {
  while (c->outHead) {
    struct anycclP2pReq* r = c->outHead;
    if (r->kind == REQ_READ) {
      struct p2pItem* it = calloc(1, sizeof(*it));
      if (it == NULL) return;
      it->hdr = (struct p2pHdr){P2P_MAGIC, P2P_OP_READREQ, 0, 0, 0, r->id, r->key, r->remoteOff, 0, r->size, 0};
      it->bidx = -1;
      chanPush(&c->ch[c->nextChan], it);
      c->nextChan = (c->nextChan + 1) % c->nch;
      r->dealtAll = 1;
    }
    while (!r->dealtAll) {
      int one = r->kind == REQ_SEND && r->size <= c->chunk;
      struct p2pChannel* ch = &c->ch[one ? p2pMsgChannel(c, r->tag, r->id) : c->nextChan];
      if (ch->inflight >= c->window) return;
      size_t len = r->size - r->dealt < c->chunk ? r->size - r->dealt : c->chunk;
      const char* data = r->buf + r->dealt;
      int bidx = -1;
      if (r->bounce && len > 0) { /* a GPU buffer: copy the chunk to a bounce buffer first */
        int err = 0;
        data = p2pBounceStage(c, data, len, &bidx, &err);
        if (err) c->bncErr = err;
        if (data == NULL) return; /* none free: dealing goes on when a channel wrote one */
      }
      struct p2pItem* it = calloc(1, sizeof(*it));
      if (it == NULL) {
        p2pBounceRelease(c, bidx);
        return;
      }
      int op = r->kind == REQ_SEND ? P2P_OP_MSG : r->kind == REQ_WRITE ? P2P_OP_WRITE : P2P_OP_READRESP;
      uint64_t off = r->kind == REQ_WRITE ? r->remoteOff + r->dealt : r->dealt;
      it->hdr = (struct p2pHdr){P2P_MAGIC, (uint16_t)op, 0, r->tag, r->kind == REQ_SEND ? r->imm : 0, r->id, r->key, off, len, r->size, r->notify};
      it->data = data;
      it->bidx = bidx;
      it->req = r;
      it->counted = 1;
      chanPush(ch, it);
      r->dealt += len;
      r->chunksLeft++;
      if (r->dealt == r->size) r->dealtAll = 1;
      if (!one) c->nextChan = (c->nextChan + 1) % c->nch;
    }
    c->outHead = r->outNext;
    if (c->outHead == NULL) c->outTail = NULL;
  }
}

static void itemDone(struct anycclP2pConn* c, struct p2pChannel* ch, struct p2pItem* it) {
  if (it->counted) ch->inflight--;
  struct anycclP2pReq* r = it->req;
  if (r || it->bidx >= 0) {
    pthread_mutex_lock(&c->lock);
    p2pBounceRelease(c, it->bidx); /* the socket took its last byte */
    if (r && !r->done && --r->chunksLeft == 0 && r->dealtAll && r->kind != REQ_WRITE) p2pReqComplete(c, r, ncclSuccess);
    pthread_mutex_unlock(&c->lock);
  }
  free(it);
}

/* Write what the socket takes. 1: progressed; -1: failed. */
static int sendChannel(struct anycclP2pConn* c, int k) {
  struct p2pChannel* ch = &c->ch[k];
  int progressed = 0;
  while (ch->qhead) {
    struct p2pItem* it = ch->qhead;
    /* a bounced chunk goes once its copy into the bounce buffer completed */
    if (it->bidx >= 0 && it->off == 0 && !p2pBounceStaged(c, it->bidx)) return progressed;
    size_t hdrLeft = it->off < sizeof(it->hdr) ? sizeof(it->hdr) - it->off : 0;
    size_t dataOff = it->off - (sizeof(it->hdr) - hdrLeft);
    struct iovec iov[2];
    int n = 0;
    if (hdrLeft) iov[n++] = (struct iovec){(char*)&it->hdr + it->off, hdrLeft};
    if (it->hdr.len > dataOff && it->data) iov[n++] = (struct iovec){(char*)it->data + dataOff, it->hdr.len - dataOff};
    struct msghdr m = {0};
    m.msg_iov = iov;
    m.msg_iovlen = n;
    ssize_t w = c->pch ? p2pPlugWrite(c, k, iov, n) : sendmsg(ch->sock.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return progressed;
      connError(c, ncclRemoteError, "the peer is gone or the network dropped a channel", k, strerror(errno));
      return -1;
    }
    it->off += (size_t)w;
    progressed = 1;
    if (it->off < sizeof(it->hdr) + it->hdr.len) return progressed;
    ch->qhead = it->next;
    if (ch->qhead == NULL) ch->qtail = NULL;
    itemDone(c, ch, it);
  }
  return progressed;
}

/* ---- receiving ----------------------------------------------------------------- */
/* Where the chunk's bytes land: r's buffer, or for a bounced r a free bounce
 * buffer (copied to r's buffer when in). 1: no buffer free now (the channel
 * stalls until a copy completes). */
static int bounceInto(struct anycclP2pConn* c, struct p2pChannel* ch, struct anycclP2pReq* r, const struct p2pHdr* h) {
  if (!r->bounce || h->len == 0) {
    ch->rdst = r->buf + h->off;
    return 0;
  }
  int b;
  char* buf = p2pBounceRecvBuf(c, &b);
  if (buf == NULL) return 1;
  ch->rdst = buf;
  ch->rbidx = b;
  ch->rfinal = r->buf + h->off;
  return 0;
}

/* Route the payload of the header just read (lock held). 0: go on; 1:
 * stalled (no room for an unexpected chunk); -1: protocol error. */
static int dispatch(struct anycclP2pConn* c, int k) {
  struct p2pChannel* ch = &c->ch[k];
  struct p2pHdr* h = &ch->rhdr;
  ch->rdst = NULL;
  ch->rreq = NULL;
  ch->runexp = NULL;
  ch->rlen = h->len;
  ch->rgot = 0;
  switch (h->op) {
    case P2P_OP_MSG: {
      struct anycclP2pReq* r = findReq(c, REQ_RECV, h->tag, h->id);
      if (r) {
        if (recvAccepts(r, h->total, h->off, h->len, h->pad) && bounceInto(c, ch, r, h) != 0) return 1;
        ch->rreq = r;
        r->imm = h->pad;
        return 0;
      }
      if (ch->unexpCount >= c->unexpMax) return 1;
      struct p2pUnexp* u = calloc(1, sizeof(*u));
      if (u == NULL || (h->len && (u->data = malloc(h->len)) == NULL)) {
        free(u);
        return 1;
      }
      *u = (struct p2pUnexp){h->tag, k, h->id, h->off, h->len, h->total, u->data, NULL, h->pad};
      ch->unexpCount++;
      ch->runexp = u;
      ch->rdst = u->data;
      return 0;
    }
    case P2P_OP_WRITE: {
      struct p2pInWrite* w = c->inWrites;
      while (w && w->id != h->id) w = w->next;
      if (w == NULL) {
        if ((w = calloc(1, sizeof(*w))) == NULL) return -1;
        *w = (struct p2pInWrite){h->id, h->total, 0, h->notify, 0, c->inWrites, 0, k};
        c->inWrites = w;
      }
      int bounce = 0;
      char* dst = p2pMrLookup(c->ep, h->key, h->off, h->len, &bounce);
      if (dst == NULL && h->len) w->bad = 1;
      if (h->len == 0 && p2pMrLookup(c->ep, h->key, h->off, 0, &bounce) == NULL) w->bad = 1;
      ch->rdst = dst;
      if (dst && bounce && h->len) { /* a GPU region: through a bounce buffer */
        int b;
        char* buf = p2pBounceRecvBuf(c, &b);
        if (buf == NULL && b == -1) return 1; /* none free now */
        if (buf == NULL) w->bad = 1, ch->rdst = NULL;
        else ch->rdst = buf, ch->rbidx = b, ch->rfinal = dst;
      }
      return 0;
    }
    case P2P_OP_READREQ: {
      int bounce = 0;
      char* src = p2pMrLookup(c->ep, h->key, h->off, h->total, &bounce);
      if (src == NULL || (bounce && h->total > 0 && p2pBounceSetup(c) != ncclSuccess)) {
        pushControl(c, k, P2P_OP_ACK, 1, h->id, h->total);
        return 0;
      }
      struct anycclP2pReq* r = calloc(1, sizeof(*r));
      if (r == NULL) return -1;
      r->conn = c;
      r->kind = REQ_RESP;
      r->id = h->id;
      r->buf = src;
      r->size = h->total;
      r->bounce = bounce && h->total > 0; /* a GPU region: staged through bounce buffers */
      p2pReqLink(c, r);
      p2pOutPush(c, r);
      return 0;
    }
    case P2P_OP_READRESP: {
      struct anycclP2pReq* r = findReq(c, REQ_READ, 0, h->id);
      if (r == NULL || h->off > r->size || h->len > r->size - h->off) return -1;
      if (bounceInto(c, ch, r, h) != 0) return 1;
      ch->rreq = r;
      return 0;
    }
    case P2P_OP_ACK: {
      struct anycclP2pReq* r = findReq(c, 0, 0, h->id);
      if (r == NULL) return -1;
      if (h->flags) {
        WARN("P2P: the peer refused a %s of %zu bytes at offset %llu of region %llu (unknown region or out of its "
             "range); the request fails with ncclInvalidUsage",
             r->kind == REQ_WRITE ? "write" : "read", r->size, (unsigned long long)r->remoteOff,
             (unsigned long long)r->key);
        p2pReqComplete(c, r, ncclInvalidUsage);
      } else if (r->kind == REQ_WRITE) {
        p2pReqComplete(c, r, ncclSuccess);
      }
      return 0;
    }
    case P2P_OP_BYE: ch->bye = 1; return 0;
    default: return -1;
  }
}

void p2pWriteLanded(struct anycclP2pConn* c, struct p2pInWrite* w) {
  struct p2pInWrite** pp = &c->inWrites;
  while (*pp && *pp != w) pp = &(*pp)->next;
  if (*pp) *pp = w->next;
  if (!w->bad && w->notify) {
    if (c->nnotes == c->capNotes) {
      int cap = c->capNotes ? 2 * c->capNotes : 16;
      uint64_t* n = realloc(c->notes, (size_t)cap * sizeof(*n));
      if (n) c->notes = n, c->capNotes = cap;
    }
    if (c->nnotes < c->capNotes) c->notes[c->nnotes++] = w->notify;
    pthread_cond_broadcast(&c->cv);
  }
  pushControl(c, w->chan, P2P_OP_ACK, w->bad, w->id, w->total);
  free(w);
}

/* The payload of the current chunk is in (lock held). */
static void chunkArrived(struct anycclP2pConn* c, int k) {
  struct p2pChannel* ch = &c->ch[k];
  struct p2pHdr* h = &ch->rhdr;
  if (h->op == P2P_OP_MSG && ch->runexp) {
    struct p2pUnexp* u = ch->runexp;
    u->next = c->unexp;
    c->unexp = u;
    struct anycclP2pReq* r = findReq(c, REQ_RECV, h->tag, h->id); /* posted while the bytes came */
    if (r) p2pRecvTakeUnexpected(c, r);
  } else if ((h->op == P2P_OP_MSG || h->op == P2P_OP_READRESP) && ch->rreq) {
    struct anycclP2pReq* r = ch->rreq;
    if (ch->rbidx >= 0) { /* in the bounce buffer: on to r's buffer (the buffer is freed after the copy) */
      int b = ch->rbidx;
      ch->rbidx = -1;
      if (p2pBounceUnpack(c, r, ch->rfinal, ch->rdst, h->len, b, NULL) != 0) r->err = ncclUnhandledCudaError;
    }
    recvChunkArrived(c, r, h->len);
  } else if (h->op == P2P_OP_WRITE) {
    struct p2pInWrite* w = c->inWrites;
    while (w && w->id != h->id) w = w->next;
    if (w) {
      if (ch->rbidx >= 0) { /* a GPU region: on from the bounce buffer (freed after the copy) */
        int b = ch->rbidx;
        ch->rbidx = -1;
        if (p2pBounceUnpackWrite(c, w, ch->rfinal, ch->rdst, h->len, b) != 0) w->bad = 1;
      }
      w->got += h->len;
      w->chan = k;
      /* in place once its copies completed too (p2pBounceReap) */
      if (w->got >= w->total && w->copiesLeft == 0) p2pWriteLanded(c, w);
    }
  }
  if (ch->rbidx >= 0) { /* its request completed meanwhile: the bytes were dropped */
    p2pBounceRelease(c, ch->rbidx);
    ch->rbidx = -1;
  }
  ch->rstate = 0;
  ch->rhdrGot = 0;
}

static int recvChannel(struct anycclP2pConn* c, int k) {
  struct p2pChannel* ch = &c->ch[k];
  int progressed = 0;
  for (;;) {
    if (ch->rstate == 2) {
      pthread_mutex_lock(&c->lock);
      int st = dispatch(c, k);
      if (st == 0) {
        ch->rstate = 1;
        if (ch->rlen == 0) chunkArrived(c, k);
      }
      pthread_mutex_unlock(&c->lock);
      if (st != 0) return progressed;
      progressed = 1;
      continue;
    }
    char* dst;
    size_t want;
    if (ch->rstate == 0) {
      dst = (char*)&ch->rhdr + ch->rhdrGot;
      want = sizeof(ch->rhdr) - ch->rhdrGot;
    } else {
      want = ch->rlen - ch->rgot;
      dst = ch->rdst ? ch->rdst + ch->rgot : NULL;
    }
    ssize_t n;
    if (c->pch) { /* over a net plugin: its received messages are the staging */
      n = p2pPlugRead(c, k, dst, want);
    } else if (ch->sbeg < ch->send) { /* bytes received earlier come first */
      n = (ssize_t)(ch->send - ch->sbeg < want ? ch->send - ch->sbeg : want);
      if (dst) memcpy(dst, ch->sbuf + ch->sbeg, (size_t)n);
      ch->sbeg += (size_t)n;
    } else if (!ch->readable) {
      return progressed; /* a short read emptied the socket: poll says when more comes */
    } else if (ch->rstate == 0 || want < P2P_STAGE_BYTES || dst == NULL) {
      /* a header (with what follows it), a small payload, or bytes to drop */
      n = recv(ch->sock.fd, ch->sbuf, P2P_STAGE_BYTES, ch->blockOnce ? 0 : MSG_DONTWAIT);
      ch->blockOnce = 0;
      ch->sbeg = ch->send = 0;
      if (n > 0) {
        ch->send = (size_t)n;
        /* fewer bytes than asked: the socket is empty now, no recv to hear EAGAIN */
        if (n < P2P_STAGE_BYTES) ch->readable = 0;
        continue;
      }
    } else { /* the rest of a large payload: straight into the buffer */
      n = recv(ch->sock.fd, dst, want, ch->blockOnce ? 0 : MSG_DONTWAIT);
      ch->blockOnce = 0;
      if (n > 0 && (size_t)n < want) ch->readable = 0;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) ch->readable = 0; /* until poll says otherwise */
    if (n == 0) {
      if (ch->bye) return -2; /* closed after its goodbye */
      connError(c, ncclRemoteError, "the peer closed a channel without saying goodbye (it died?)", k, "EOF");
      return -1;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return progressed;
      connError(c, ncclRemoteError, "the peer is gone or the network dropped a channel", k, strerror(errno));
      return -1;
    }
    progressed = 1;
    if (ch->rstate == 0) {
      ch->rhdrGot += (size_t)n;
      if (ch->rhdrGot < sizeof(ch->rhdr)) continue;
      if (!p2pHeaderValid(&ch->rhdr, c->chunk)) {
        connError(c, ncclRemoteError, "a channel carried bytes that are not the P2P protocol", k, "bad header");
        return -1;
      }
      pthread_mutex_lock(&c->lock);
      int st = dispatch(c, k);
      if (st == 0) {
        ch->rstate = 1;
        if (ch->rlen == 0) chunkArrived(c, k);
      } else if (st == 1) {
        ch->rstate = 2;
      }
      pthread_mutex_unlock(&c->lock);
      if (st < 0) {
        connError(c, ncclRemoteError, "the peer sent a chunk for no known request", k, "protocol error");
        return -1;
      }
      if (st == 1) return progressed;
    } else {
      ch->rgot += (size_t)n;
      if (ch->rgot < ch->rlen) continue;
      pthread_mutex_lock(&c->lock);
      chunkArrived(c, k);
      pthread_mutex_unlock(&c->lock);
    }
  }
}

/* ---- progress ------------------------------------------------------------------- */
/* Read channel k: 1 progressed, 0 not, -1 the connection failed. */
static int recvStep(struct anycclP2pConn* c, int k) {
  int r = recvChannel(c, k);
  if (r == -2) {
    c->ch[k].closed = 1;
    c->nclosed++;
    return 1;
  }
  return r;
}

/* One pass over the channels (plock held): deal chunks, write, read.
 * Returns 1 if anything moved. */
static int progressOnce(struct anycclP2pConn* c) {
  if (__atomic_load_n(&c->error, __ATOMIC_ACQUIRE) != ncclSuccess) return 0;
  int progressed = 0;
  pthread_mutex_lock(&c->lock);
  progressed |= p2pBounceReap(c) > 0; /* copies into GPU buffers that completed */
  schedule(c);
  int bncErr = c->bncErr;
  pthread_mutex_unlock(&c->lock);
  if (bncErr) {
    connError(c, ncclUnhandledCudaError, "a copy between a GPU buffer and a bounce buffer failed", -1, "CUDA");
    return 1;
  }
  if (c->psetup) { /* over a net plugin, the setup still stepping */
    int st = p2pPlugSetupStep(c);
    if (st < 0) {
      connError(c, st == -2 ? ncclSystemError : ncclRemoteError, "the connection could not be set up through the net plugin",
                -1, st == -2 ? "timeout" : "setup");
      return 1;
    }
    if (st > 0) __atomic_store_n(&c->lastProgress, ncclSocketClockMs(), __ATOMIC_RELEASE);
    if (c->psetup) return st;
    progressed = 1;
  }
  for (int k = 0; k < c->nch; k++) {
    if (c->pch) c->ch[k].readable = 1; /* no poll: the plugin's test says */
    int s = sendChannel(c, k);
    if (s < 0) return 1;
    progressed |= s > 0;
    struct p2pChannel* ch = &c->ch[k];
    /* a stalled channel looks again (its receive or a bounce buffer may be there now) */
    if (ch->closed || (!ch->readable && ch->sbeg == ch->send && ch->rstate != 2)) continue;
    int r = recvStep(c, k);
    if (r < 0) return 1;
    progressed |= r > 0;
  }
  if (progressed) __atomic_store_n(&c->lastProgress, ncclSocketClockMs(), __ATOMIC_RELEASE);
  if (progressed) c->pidle = 0;
  return progressed;
}

/* Something for the progress thread to watch while no caller drives:
 * pending requests, queued output, stalled input, or regions the peer may
 * write or read (plock held). */
static int needsWatch(struct anycclP2pConn* c, int* left) {
  pthread_mutex_lock(&c->lock); /* posters change these */
  *left = c->outHead != NULL;
  int busy = c->active != NULL || p2pBounceBusy(c);
  pthread_mutex_unlock(&c->lock);
  for (int k = 0; k < c->nch && !*left; k++) *left = c->ch[k].qhead != NULL || c->ch[k].rstate == 2;
  return *left || busy || c->psetup != NULL || __atomic_load_n(&c->ep->nmrs, __ATOMIC_ACQUIRE) > 0;
}

/* Hand the sockets to the progress thread: wake it only when it sleeps
 * (watch was 0) or must write what the caller left queued. */
static void handOff(struct anycclP2pConn* c, int left) {
  if (!__atomic_exchange_n(&c->watch, 1, __ATOMIC_SEQ_CST) || left) p2pWake(c);
}

void p2pWatch(struct anycclP2pConn* c) { handOff(c, 0); }

/* The caller's thread moves bytes itself when nobody else is (no hand-off
 * to the progress thread on the latency path); otherwise, or when work is
 * left, it wakes the progress thread. */
void p2pKick(struct anycclP2pConn* c, int willDrive) {
  if (pthread_mutex_trylock(&c->plock) != 0) {
    handOff(c, 1); /* the progress thread has the channels: it must watch and look again */
    return;
  }
  progressOnce(c);
  int left = 0, watch = needsWatch(c, &left);
  pthread_mutex_unlock(&c->plock);
  if (left || (watch && !willDrive)) handOff(c, left);
}

/* The poll set (plock held): the wake fd, then every channel with
 * something to read or write. */
static int pollSet(struct anycclP2pConn* c, struct pollfd* pfd, int sockets) {
  int n = 0;
  pfd[n++] = (struct pollfd){c->wakeFd, POLLIN, 0};
  if (!sockets || __atomic_load_n(&c->error, __ATOMIC_ACQUIRE) != ncclSuccess) return n;
  for (int k = 0; k < c->nch; k++) {
    struct p2pChannel* ch = &c->ch[k];
    short ev = (!ch->closed && ch->rstate != 2 ? POLLIN : 0) | (ch->qhead ? POLLOUT : 0);
    if (ev) pfd[n++] = (struct pollfd){ch->sock.fd, ev, 0};
  }
  return n;
}

/* Copies between GPU and bounce buffers are running (or a channel waits for
 * a bounce buffer): their completion wakes no descriptor, so the waits poll
 * without sleeping meanwhile (plock held). */
static int copiesPending(struct anycclP2pConn* c) {
  if (__atomic_load_n(&c->bnc, __ATOMIC_ACQUIRE) == NULL) return 0; /* no GPU buffer yet: no lock taken */
  pthread_mutex_lock(&c->lock);
  int busy = p2pBounceBusy(c);
  pthread_mutex_unlock(&c->lock);
  for (int k = 0; k < c->nch && !busy; k++) busy = c->ch[k].qhead && c->ch[k].qhead->bidx >= 0;
  return busy;
}

/* Sleep until a socket is ready, a wake, or the timeout. 1 if any fd is ready. */
static int pollWait(struct anycclP2pConn* c, struct pollfd* pfd, int n, int timeoutMs) {
  if (poll(pfd, (nfds_t)n, timeoutMs) <= 0) return 0;
  if (pfd[0].revents & POLLIN) {
    uint64_t v;
    ssize_t r = read(c->wakeFd, &v, sizeof(v));
    (void)r;
  }
  return 1;
}

/* Nothing to poll and nothing moved: yield (us 0) or sleep us microseconds. */
static void idleNap(int us) {
  if (us > 0 && us < 1000) usleep((useconds_t)us);
  else sched_yield();
}

/* The channels poll found readable are worth a recv again (plock held). */
static void markReadable(struct anycclP2pConn* c, const struct pollfd* pfd, int n) {
  for (int i = 1; i < n; i++)
    if (pfd[i].revents & (POLLIN | POLLERR | POLLHUP))
      for (int k = 0; k < c->nch; k++)
        if (c->ch[k].sock.fd == pfd[i].fd) c->ch[k].readable = 1;
}

/* Fail the connection when every channel said goodbye or nothing moved for
 * the timeout while requests wait (plock held). */
static void checkHealth(struct anycclP2pConn* c) {
  if (__atomic_load_n(&c->error, __ATOMIC_ACQUIRE) != ncclSuccess) return;
  int64_t now = ncclSocketClockMs();
  pthread_mutex_lock(&c->lock);
  int busy = c->active != NULL;
  if (!busy) __atomic_store_n(&c->lastProgress, now, __ATOMIC_RELEASE);
  int64_t idle = now - __atomic_load_n(&c->lastProgress, __ATOMIC_ACQUIRE);
  int64_t limit = c->timeoutMs;
  pthread_mutex_unlock(&c->lock);
  if (c->nclosed == c->nch) {
    __atomic_store_n(&c->peerBye, 1, __ATOMIC_RELEASE);
    connError(c, ncclRemoteError, "the peer closed the connection", -1, "goodbye");
  } else if (busy && limit > 0 && idle > limit) {
    char why[64];
    snprintf(why, sizeof(why), "no progress for %lld ms", (long long)limit);
    connError(c, ncclSystemError, "nothing moved within the timeout (ANYCCL_OP_TIMEOUT)", -1, why);
  }
}

/* The channel r's message comes by when r is a receive of one chunk that
 * has seen nothing yet and is all there is to do: no other request, nothing
 * to write, no region the peer may write or read, that channel idle and
 * reading headers (plock held). -1 otherwise. */
static int directChannel(struct anycclP2pConn* c, struct anycclP2pReq* r) {
  if (c->pch || r->kind != REQ_RECV || r->size > c->chunk || __atomic_load_n(&c->ep->nmrs, __ATOMIC_ACQUIRE) > 0)
    return -1;
  for (int k = 0; k < c->nch; k++)
    if (c->ch[k].qhead) return -1;
  pthread_mutex_lock(&c->lock);
  int alone = c->error == ncclSuccess && !r->done && r->total == SIZE_MAX && c->active == r && r->next == NULL &&
              c->outHead == NULL;
  int k = p2pMsgChannel(c, r->tag, r->id);
  pthread_mutex_unlock(&c->lock);
  struct p2pChannel* ch = &c->ch[k];
  return alone && !ch->closed && ch->rstate == 0 && ch->sbeg == ch->send ? k : -1;
}

int p2pDrive(struct anycclP2pConn* c, struct anycclP2pReq* r) {
  if (pthread_mutex_trylock(&c->plock) != 0) return 0;
  struct pollfd pfd[ANYCCL_P2P_MAX_CHANNELS + 1];
  __atomic_fetch_add(&c->spinners, 1, __ATOMIC_ACQ_REL);
  int direct = 1; /* 0 right after a blocking recv timed out: one poll over every socket first */
  while (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE) && !__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
    int progressed = progressOnce(c);
    checkHealth(c);
    if (__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) break;
    if (progressed) continue;
    int k = direct ? directChannel(c, r) : -1;
    if (k >= 0) {
      /* as a plain socket read: block in recv on that channel (SO_RCVTIMEO
       * bounds it), no poll over the channels in between */
      c->ch[k].readable = 1;
      c->ch[k].blockOnce = 1;
      int got = recvStep(c, k);
      c->ch[k].blockOnce = 0;
      if (got > 0) __atomic_store_n(&c->lastProgress, ncclSocketClockMs(), __ATOMIC_RELEASE);
      direct = got != 0;
      continue;
    }
    int n = pollSet(c, pfd, 1);
    int copying = copiesPending(c);
    /* over a net plugin nothing wakes a poll: yield a while, then sleep longer each time */
    int us = !copying && c->pch ? p2pPlugIdleUs(c) : 0;
    int ms = copying ? 0 : c->pch ? us >= 1000 : NCCL_SOCKET_POLL_MS;
    if (pollWait(c, pfd, n, ms)) markReadable(c, pfd, n);
    else if (ms == 0) idleNap(us);
    direct = 1;
  }
  int left = 0, watch = needsWatch(c, &left);
  __atomic_fetch_sub(&c->spinners, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_unlock(&c->plock);
  /* the progress thread takes the sockets back (within a millisecond when it watches already) */
  if (watch) handOff(c, left);
  return 1;
}

static void* progressMain(void* arg) {
  struct anycclP2pConn* c = arg;
  struct pollfd pfd[ANYCCL_P2P_MAX_CHANNELS + 1];
  int n = 0, ready = 0;
  while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
    /* a caller waiting in p2pDrive moves the bytes: keep out of its way
     * (the wake fd alone, a millisecond at a time) */
    int spin = __atomic_load_n(&c->spinners, __ATOMIC_ACQUIRE) > 0;
    if (spin || !__atomic_load_n(&c->watch, __ATOMIC_ACQUIRE)) {
      /* nothing to watch: sleep until a caller hands something over */
      pfd[0] = (struct pollfd){c->wakeFd, POLLIN, 0};
      pollWait(c, pfd, 1, spin ? 1 : NCCL_SOCKET_POLL_MS);
      ready = 0;
      continue;
    }
    pthread_mutex_lock(&c->plock);
    if (ready) markReadable(c, pfd, n);
    int progressed = progressOnce(c);
    checkHealth(c);
    n = pollSet(c, pfd, 1);
    int left = 0;
    /* idle (no request, region or queued byte): stop watching; the next post
     * hands over. A post between the check and the store found watch == 1
     * and only woke this thread: look once more after the store. */
    if (!progressed && !needsWatch(c, &left)) {
      __atomic_store_n(&c->watch, 0, __ATOMIC_SEQ_CST);
      if (needsWatch(c, &left)) __atomic_store_n(&c->watch, 1, __ATOMIC_SEQ_CST);
    }
    int copying = !progressed && copiesPending(c);
    int us = !progressed && !copying && c->pch ? p2pPlugIdleUs(c) : 0;
    int ms = copying ? 0 : c->pch ? us >= 1000 : NCCL_SOCKET_POLL_MS;
    pthread_mutex_unlock(&c->plock);
    /* the poll (and a plugin's nap) runs without the channels' lock: a caller may take them */
    ready = progressed ? 0 : pollWait(c, pfd, n, ms);
    if (!progressed && ms == 0 && !ready) idleNap(us);
  }
  return NULL;
}

ncclResult_t p2pConnStart(struct anycclP2pConn* c) {
  c->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->wakeFd < 0) {
    WARN("P2P: eventfd failed: %s", strerror(errno));
    return ncclSystemError;
  }
  c->lastProgress = ncclSocketClockMs();
  c->watch = 1;
  /* a waiter may block in recv on a channel (p2pDrive), at most
   * P2P_DIRECT_WAIT_MS; every other send and recv on a channel is
   * MSG_DONTWAIT (p2pConnStop makes the sockets non-blocking again) */
  struct timeval tv = {0, P2P_DIRECT_WAIT_MS * 1000};
  for (int k = 0; k < c->nch && c->pch == NULL; k++) {
    int fd = c->ch[k].sock.fd, fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  }
  pthread_mutex_init(&c->plock, NULL);
  c->plockInit = 1;
  if (pthread_create(&c->thread, NULL, progressMain, c) != 0) {
    WARN("P2P: cannot start a progress thread");
    return ncclSystemError;
  }
  c->threadStarted = 1;
  return ncclSuccess;
}

void p2pConnStop(struct anycclP2pConn* c) {
  if (!c->threadStarted) return;
  __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
  p2pWake(c);
  pthread_join(c->thread, NULL);
  c->threadStarted = 0;
  for (int k = 0; k < c->nch && c->pch == NULL; k++) { /* the goodbye and close take non-blocking sockets */
    int fd = c->ch[k].sock.fd, fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  }
}

void p2pConnDrop(struct anycclP2pConn* c) {
  for (int k = 0; k < c->nch; k++) {
    struct p2pChannel* ch = &c->ch[k];
    while (ch->qhead) {
      struct p2pItem* it = ch->qhead;
      ch->qhead = it->next;
      free(it);
    }
    ch->qtail = NULL;
    if (ch->rstate == 1 && ch->runexp) {
      free(ch->runexp->data);
      free(ch->runexp);
      ch->runexp = NULL;
    }
  }
  if (c->wakeFd >= 0) close(c->wakeFd);
  c->wakeFd = -1;
}
