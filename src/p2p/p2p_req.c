/* The P2P engine's requests: post, test, wait, and the blocking helpers. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "checks.h"
#include "p2p_int.h"


/* A new request on c (lock held); NULL with *res set when c has failed. */
static struct anycclP2pReq* reqNew(struct anycclP2pConn* c, int kind, const char* fn, ncclResult_t* res) {
  *res = c->error;
  /* after the peer's goodbye, a receive may still match what arrived before it */
  int late = kind == REQ_RECV && c->unexp != NULL && __atomic_load_n(&c->peerBye, __ATOMIC_ACQUIRE);
  if (c->error != ncclSuccess && !late) {
    INFO(NCCL_NET, "%s: the connection failed earlier (%s)", fn, ncclGetErrorString(c->error));
    return NULL;
  }
  struct anycclP2pReq* r = calloc(1, sizeof(*r));
  if (r == NULL) {
    *res = ncclSystemError;
    return NULL;
  }
  r->conn = c;
  r->kind = kind;
  r->total = SIZE_MAX;
  p2pReqLink(c, r);
  *res = ncclSuccess;
  return r;
}

static ncclResult_t post(struct anycclP2pConn* c, int kind, char* buf, size_t size, int tag, const anycclP2pMrDesc_t* rm,
                         size_t offset, uint64_t notify, anycclP2pRequest_t* out, const char* fn, int willDrive,
                         uint32_t imm) {
  ncclResult_t res;
  pthread_mutex_lock(&c->lock);
  struct anycclP2pReq* r = reqNew(c, kind, fn, &res);
  if (r && p2pBounceWanted(c, buf, size)) {
    r->bounce = 1;
    if ((res = p2pBounceSetup(c)) != ncclSuccess) {
      p2pReqUnlink(c, r);
      free(r);
      r = NULL;
    }
  }
  if (r) {
    r->buf = buf;
    r->size = size;
    r->tag = tag;
    r->imm = imm;
    if (kind == REQ_SEND || kind == REQ_RECV) {
      struct p2pTagSeq* t = p2pTagSeq(c, tag);
      if (t == NULL) {
        p2pReqUnlink(c, r);
        free(r);
        pthread_mutex_unlock(&c->lock);
        return ncclSystemError;
      }
      r->id = kind == REQ_SEND ? t->sendSeq++ : t->recvSeq++;
    } else {
      r->id = c->nextId++;
      r->key = rm->key;
      r->remoteOff = offset;
      r->notify = notify;
    }
    if (kind == REQ_READ) r->total = size;
    if (kind == REQ_RECV) {
      p2pRecvTakeUnexpected(c, r);
      /* the peer is gone: what arrived before its goodbye is all there is */
      if (c->error != ncclSuccess && !r->done) p2pReqComplete(c, r, c->error);
    } else {
      p2pOutPush(c, r);
    }
  }
  pthread_mutex_unlock(&c->lock);
  *out = r;
  if (r) p2pKick(c, willDrive);
  return res;
}

P2P_API ncclResult_t anycclP2pIsend(anycclP2pConn_t c, const void* buf, size_t size, int tag, anycclP2pRequest_t* req) {
  const char* fn = "anycclP2pIsend";
  ARGCHECK(c != NULL && req != NULL, fn, "conn or req is NULL");
  *req = NULL;
  ARGCHECK(buf != NULL || size == 0, fn, "buf is NULL for %zu bytes; pass the data", size);
  return post(c, REQ_SEND, (char*)buf, size, tag, NULL, 0, 0, req, fn, 0, 0);
}

ncclResult_t p2pIsendImm(struct anycclP2pConn* c, const void* buf, size_t size, uint32_t imm, struct anycclP2pReq** req) {
  *req = NULL;
  return post(c, REQ_SEND, (char*)buf, size, 0, NULL, 0, 0, req, "anycclP2pIsend", 0, imm);
}

P2P_API ncclResult_t anycclP2pIrecv(anycclP2pConn_t c, void* buf, size_t size, int tag, anycclP2pRequest_t* req) {
  const char* fn = "anycclP2pIrecv";
  ARGCHECK(c != NULL && req != NULL, fn, "conn or req is NULL");
  *req = NULL;
  ARGCHECK(buf != NULL || size == 0, fn, "buf is NULL for %zu bytes of room; pass a buffer", size);
  return post(c, REQ_RECV, buf, size, tag, NULL, 0, 0, req, fn, 0, 0);
}

static ncclResult_t checkRemote(const char* fn, const anycclP2pMrDesc_t* rm, size_t offset, size_t size) {
  ARGCHECK(rm != NULL, fn, "remote is NULL; pass the descriptor the peer got from anycclP2pMrGetDesc");
  ARGCHECK(offset <= rm->size && size <= rm->size - offset, fn,
           "%zu bytes at offset %zu do not fit the remote region of %llu bytes", size, offset,
           (unsigned long long)rm->size);
  return ncclSuccess;
}

P2P_API ncclResult_t anycclP2pIwrite(anycclP2pConn_t c, const void* src, size_t size, const anycclP2pMrDesc_t* rm,
                                     size_t offset, uint64_t notify, anycclP2pRequest_t* req) {
  const char* fn = "anycclP2pIwrite";
  ARGCHECK(c != NULL && req != NULL, fn, "conn or req is NULL");
  *req = NULL;
  ARGCHECK(src != NULL || size == 0, fn, "src is NULL for %zu bytes", size);
  NCCLCHECK(checkRemote(fn, rm, offset, size));
  return post(c, REQ_WRITE, (char*)src, size, 0, rm, offset, notify, req, fn, 0, 0);
}

P2P_API ncclResult_t anycclP2pIread(anycclP2pConn_t c, void* dst, size_t size, const anycclP2pMrDesc_t* rm,
                                    size_t offset, anycclP2pRequest_t* req) {
  const char* fn = "anycclP2pIread";
  ARGCHECK(c != NULL && req != NULL, fn, "conn or req is NULL");
  *req = NULL;
  ARGCHECK(dst != NULL || size == 0, fn, "dst is NULL for %zu bytes", size);
  NCCLCHECK(checkRemote(fn, rm, offset, size));
  return post(c, REQ_READ, dst, size, 0, rm, offset, 0, req, fn, 0, 0);
}

static ncclResult_t finish(struct anycclP2pReq* r, size_t* bytes) {
  struct anycclP2pConn* c = r->conn;
  if (c->keepDone) {
    pthread_mutex_lock(&c->lock);
    struct anycclP2pReq** pp = &c->finished;
    while (*pp && *pp != r) pp = &(*pp)->outNext;
    if (*pp) *pp = r->outNext;
    pthread_mutex_unlock(&c->lock);
  }
  ncclResult_t err = r->err;
  if (bytes) *bytes = r->kind == REQ_RECV ? (r->total == SIZE_MAX ? 0 : r->total) : r->size;
  free(r);
  return err;
}

P2P_API ncclResult_t anycclP2pTest(anycclP2pRequest_t r, int* done, size_t* bytes) {
  ARGCHECK(r != NULL && done != NULL, "anycclP2pTest", "req or done is NULL");
  struct anycclP2pConn* c = r->conn;
  if (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) p2pKick(c, 0);
  *done = __atomic_load_n(&r->done, __ATOMIC_ACQUIRE);
  return *done ? finish(r, bytes) : ncclSuccess;
}

P2P_API ncclResult_t anycclP2pWait(anycclP2pRequest_t r, size_t* bytes) {
  ARGCHECK(r != NULL, "anycclP2pWait", "req is NULL");
  struct anycclP2pConn* c = r->conn;
  int tries = 0;
  while (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) {
    if (p2pDrive(c, r)) continue;
    /* the progress thread holds the channels for one pass: try again soon */
    if (++tries % 64 != 0) {
      sched_yield();
      continue;
    }
    /* another thread moves the bytes: sleep until a completion (the
     * progress thread fails every request after the timeout: this ends) */
    pthread_mutex_lock(&c->lock);
    if (!r->done) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 200000;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&c->cv, &c->lock, &ts);
    }
    pthread_mutex_unlock(&c->lock);
  }
  return finish(r, bytes);
}

P2P_API ncclResult_t anycclP2pNotifyPoll(anycclP2pConn_t c, uint64_t* value, int* got) {
  ARGCHECK(c != NULL && value != NULL && got != NULL, "anycclP2pNotifyPoll", "conn, value or got is NULL");
  pthread_mutex_lock(&c->lock);
  *got = c->nnotes > 0;
  if (*got) {
    *value = c->notes[0];
    memmove(c->notes, c->notes + 1, (size_t)(c->nnotes - 1) * sizeof(*c->notes));
    c->nnotes--;
  }
  ncclResult_t err = *got ? ncclSuccess : c->error;
  pthread_mutex_unlock(&c->lock);
  return err;
}

/* The blocking helpers post and wait in this thread: no hand-off to the
 * progress thread in between (a small round trip stays in the caller). */
P2P_API ncclResult_t anycclP2pSend(anycclP2pConn_t c, const void* buf, size_t size, int tag) {
  const char* fn = "anycclP2pSend";
  ARGCHECK(c != NULL, fn, "conn is NULL");
  ARGCHECK(buf != NULL || size == 0, fn, "buf is NULL for %zu bytes; pass the data", size);
  anycclP2pRequest_t r = NULL;
  NCCLCHECK(post(c, REQ_SEND, (char*)buf, size, tag, NULL, 0, 0, &r, fn, 1, 0));
  return anycclP2pWait(r, NULL);
}

P2P_API ncclResult_t anycclP2pRecv(anycclP2pConn_t c, void* buf, size_t size, int tag, size_t* received) {
  const char* fn = "anycclP2pRecv";
  ARGCHECK(c != NULL, fn, "conn is NULL");
  ARGCHECK(buf != NULL || size == 0, fn, "buf is NULL for %zu bytes of room; pass a buffer", size);
  anycclP2pRequest_t r = NULL;
  NCCLCHECK(post(c, REQ_RECV, buf, size, tag, NULL, 0, 0, &r, fn, 1, 0));
  return anycclP2pWait(r, received);
}

P2P_API ncclResult_t anycclP2pWrite(anycclP2pConn_t c, const void* src, size_t size, const anycclP2pMrDesc_t* rm,
                                    size_t offset, uint64_t notify) {
  anycclP2pRequest_t r;
  NCCLCHECK(anycclP2pIwrite(c, src, size, rm, offset, notify, &r));
  return anycclP2pWait(r, NULL);
}

P2P_API ncclResult_t anycclP2pRead(anycclP2pConn_t c, void* dst, size_t size, const anycclP2pMrDesc_t* rm,
                                   size_t offset) {
  anycclP2pRequest_t r;
  NCCLCHECK(anycclP2pIread(c, dst, size, rm, offset, &r));
  return anycclP2pWait(r, NULL);
}
