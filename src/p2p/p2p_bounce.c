/* The P2P engine's bounce buffers: GPU buffers go through pinned host memory.
 *
 * A request whose buffer the CPU cannot address (device memory on the cuda
 * backend; every buffer with ANYCCL_P2P_BOUNCE=2) is staged chunk by chunk:
 *
 *   send     a D2H copy of the chunk into a free send buffer, an event after
 *            it; the channel writes the buffer once the event completed and
 *            frees it when the socket took the last byte
 *   receive  the chunk's bytes land in a free receive buffer; an H2D copy
 *            moves them to the request's buffer, an event after it; the
 *            buffer goes back to the pool only once that event completed,
 *            and the request completes when all its copies did
 *
 * One pinned allocation per connection (the first time a request bounces):
 * n buffers of one chunk per direction (ANYCCL_P2P_BOUNCE_BUFS, else 2 per
 * channel, at least 4), one event per buffer, one stream per direction, all
 * created once. Without a free receive buffer the channel stops reading
 * (TCP pushes back); without a free send buffer dealing stops. Early chunks
 * (p2pUnexp, malloc'd) are copied from where they wait, and freed after
 * their copy's event. Everything here runs with the connection's lock held
 * unless said otherwise.
 *
 * ANYCCL_P2P_BOUNCE_DEBUG=us: every copy waits that long on its stream first
 * (a host function) and every buffer is poisoned when it is freed and when it
 * is taken, so freeing a buffer before its copy completed, or completing a
 * request before its copies, corrupts the data the tests check. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "checks.h"
#include "p2p_int.h"
#include "param.h"
#include "rt.h"

struct p2pUnpack { /* an H2D copy in flight (in issue order on the h2d stream) */
  cudaEvent_t ev;   /* created once, reused */
  int bidx;         /* receive buffer to free after ev; -1: none */
  void* freeMe;     /* an early chunk's bytes to free after ev */
  struct anycclP2pReq* req; /* NULL once the request completed without it */
  struct p2pInWrite* w;     /* or the peer's write into a GPU region */
  struct p2pUnpack* next;
};

struct p2pBounce {
  const struct anycclRtCopy* rt;
  cudaStream_t h2d, d2h;
  size_t bytes; /* per buffer: one chunk */
  int n;        /* buffers per direction: receive 0..n-1, send n..2n-1 */
  char* mem;
  cudaEvent_t* ev; /* send buffers' staging events (index bidx - n) */
  int *freeRecv, nFreeRecv, *freeSend, nFreeSend;
  struct p2pUnpack *head, *tail, *spare;
  int pending; /* unpacks in flight */
  int debugUs;
};

#define POISON 0xa5

int p2pBounceMode(void) {
  int64_t m = anycclParamInt(PARAM_P2P_BOUNCE);
  if (m >= 0) return m > 2 ? 2 : (int)m;
  return anycclRtCudaBackend(); /* auto: device pointers on the cuda backend */
}

int p2pBounceWanted(struct anycclP2pConn* c, const void* buf, size_t size) {
  int mode = c->ep->bounce;
  if (mode == 0 || size == 0) return 0;
  if (mode == 2) return 1;
  const struct anycclRtCopy* rt;
  if (anycclRtCopyOps(&rt) != ncclSuccess) return 0;
  return rt->isDevice(buf);
}

/* The endpoint's device current for creating streams and events (a copy
 * may go to a stream of another device; an event is recorded only on a
 * stream of its own device). Returns the device to restore, or -1. */
static int devEnter(const struct anycclRtCopy* rt, int dev) {
  int saved = -1;
  if (dev >= 0 && rt->getDevice(&saved) == 0 && saved != dev && rt->setDevice(dev) == 0) return saved;
  return -1;
}
static void devLeave(const struct anycclRtCopy* rt, int saved) {
  if (saved >= 0) rt->setDevice(saved);
}

static void sleepFn(void* arg) { usleep((useconds_t)(uintptr_t)arg); }

static void debugDelay(struct p2pBounce* b, cudaStream_t s) {
  if (b->debugUs > 0) b->rt->launchHostFunc(s, sleepFn, (void*)(uintptr_t)b->debugUs);
}

/* Create the pool on first use (device ep->device current meanwhile). */
static ncclResult_t setup(struct anycclP2pConn* c) {
  if (c->bnc) return ncclSuccess;
  if (c->bncFailed) return ncclSystemError;
  const struct anycclRtCopy* rt;
  NCCLCHECK(anycclRtCopyOps(&rt));
  struct p2pBounce* b = calloc(1, sizeof(*b));
  if (b == NULL) return ncclSystemError;
  b->rt = rt;
  int64_t n = anycclParamInt(PARAM_P2P_BOUNCE_BUFS);
  b->n = (int)(n > 0 ? (n > 1024 ? 1024 : n) : (2 * c->nch < 4 ? 4 : 2 * c->nch));
  b->bytes = c->chunk;
  b->debugUs = (int)anycclParamInt(PARAM_P2P_BOUNCE_DEBUG);
  int dev = c->ep->device, saved = devEnter(rt, dev);
  int e = 0;
  const char* what = "";
  b->ev = calloc((size_t)b->n, sizeof(*b->ev));
  b->freeRecv = calloc((size_t)b->n, sizeof(int));
  b->freeSend = calloc((size_t)b->n, sizeof(int));
  if (!b->ev || !b->freeRecv || !b->freeSend) e = -1, what = "host memory";
  if (!e && (e = rt->hostAlloc((void**)&b->mem, 2 * (size_t)b->n * b->bytes)) != 0) what = "cudaHostAlloc";
  if (!e && (e = rt->streamCreate(&b->h2d)) != 0) what = "cudaStreamCreateWithFlags";
  if (!e && (e = rt->streamCreate(&b->d2h)) != 0) what = "cudaStreamCreateWithFlags";
  for (int i = 0; i < b->n && !e; i++)
    if ((e = rt->eventCreate(&b->ev[i])) != 0) what = "cudaEventCreateWithFlags";
  devLeave(rt, saved);
  for (int i = 0; i < b->n && b->freeRecv && b->freeSend; i++) b->freeRecv[i] = i, b->freeSend[i] = b->n + i;
  b->nFreeRecv = b->nFreeSend = b->n;
  __atomic_store_n(&c->bnc, b, __ATOMIC_RELEASE);
  if (e) {
    WARN("P2P: cannot set up %d bounce buffers of %zu bytes per direction for GPU buffers on device %d: %s failed "
         "(%s); lower ANYCCL_P2P_BOUNCE_BUFS or ANYCCL_P2P_CHUNK", b->n, b->bytes, dev, what,
         e > 0 ? rt->errorString(e) : "out of memory");
    p2pBounceFree(c);
    c->bncFailed = 1;
    return e > 0 ? ncclUnhandledCudaError : ncclSystemError;
  }
  INFO(NCCL_NET, "P2P: %d + %d bounce buffers of %zu bytes (pinned) for GPU buffers on device %d%s", b->n, b->n,
       b->bytes, dev, b->debugUs ? ", debug: slow copies, poisoned buffers" : "");
  return ncclSuccess;
}

ncclResult_t p2pBounceSetup(struct anycclP2pConn* c) { return setup(c); }

static char* bufOf(struct p2pBounce* b, int bidx) { return b->mem + (size_t)bidx * b->bytes; }

static void release(struct p2pBounce* b, int bidx) {
  if (b->debugUs) memset(bufOf(b, bidx), POISON, b->bytes);
  if (bidx < b->n) b->freeRecv[b->nFreeRecv++] = bidx;
  else b->freeSend[b->nFreeSend++] = bidx;
}

void p2pBounceRelease(struct anycclP2pConn* c, int bidx) {
  if (c->bnc && bidx >= 0) release(c->bnc, bidx);
}

int p2pBounceBusy(struct anycclP2pConn* c) { return c->bnc && c->bnc->pending > 0; }

/* Free what the completed copies held and complete requests whose copies are
 * all done (the ordered h2d stream: stop at the first copy still running).
 * Returns how many completed. */
int p2pBounceReap(struct anycclP2pConn* c) {
  struct p2pBounce* b = c->bnc;
  int n = 0;
  while (b && b->head && b->rt->eventQuery(b->head->ev) == 0) {
    struct p2pUnpack* u = b->head;
    b->head = u->next;
    if (b->head == NULL) b->tail = NULL;
    b->pending--;
    n++;
    if (u->bidx >= 0) release(b, u->bidx);
    free(u->freeMe);
    struct anycclP2pReq* r = u->req;
    struct p2pInWrite* w = u->w;
    u->freeMe = NULL;
    u->req = NULL;
    u->w = NULL;
    u->next = b->spare;
    b->spare = u;
    if (r && --r->copiesLeft == 0 && r->total != SIZE_MAX && r->moved >= r->total) p2pReqComplete(c, r, r->err);
    if (w && --w->copiesLeft == 0 && w->got >= w->total) p2pWriteLanded(c, w);
  }
  return n;
}

char* p2pBounceRecvBuf(struct anycclP2pConn* c, int* bidx) {
  *bidx = -1;
  if (setup(c) != ncclSuccess) {
    *bidx = -2;
    return NULL;
  }
  struct p2pBounce* b = c->bnc;
  if (b->nFreeRecv == 0) p2pBounceReap(c);
  if (b->nFreeRecv == 0) return NULL;
  *bidx = b->freeRecv[--b->nFreeRecv];
  if (b->debugUs) memset(bufOf(b, *bidx), POISON, b->bytes);
  return bufOf(b, *bidx);
}

/* Copy len bytes from src (a receive buffer bidx, or an early chunk freeMe)
 * to dst for r or w. 0, or a runtime error (then nothing is held). */
static int unpack(struct anycclP2pConn* c, struct anycclP2pReq* r, struct p2pInWrite* w, char* dst, const char* src,
                  size_t len, int bidx, void* freeMe) {
  struct p2pBounce* b = c->bnc;
  int e = 0;
  if (b == NULL) {
    if (setup(c) != ncclSuccess) return -1;
    b = c->bnc;
  }
  struct p2pUnpack* u = b->spare;
  if (u) {
    b->spare = u->next;
  } else {
    u = calloc(1, sizeof(*u));
    int saved = devEnter(b->rt, c->ep->device);
    if (u == NULL || (e = b->rt->eventCreate(&u->ev)) != 0) {
      free(u);
      u = NULL;
    }
    devLeave(b->rt, saved);
  }
  if (u) {
    debugDelay(b, b->h2d);
    e = b->rt->memcpyAsync(dst, src, len, b->h2d);
    if (!e) e = b->rt->eventRecord(u->ev, b->h2d);
  }
  if (u == NULL || e) {
    WARN("P2P: copying %zu bytes into the GPU buffer of a %s failed: %s", len, r ? "receive" : "write from the peer",
         e ? b->rt->errorString(e) : "out of memory");
    if (u) u->next = b->spare, b->spare = u;
    if (bidx >= 0) {
      b->rt->streamSynchronize(b->h2d); /* the copy may have been issued */
      release(b, bidx);
    }
    free(freeMe);
    return e ? e : -1;
  }
  *u = (struct p2pUnpack){u->ev, bidx, freeMe, r, w, NULL};
  if (b->tail) b->tail->next = u;
  else b->head = u;
  b->tail = u;
  b->pending++;
  if (r) r->copiesLeft++;
  if (w) w->copiesLeft++;
  return 0;
}

int p2pBounceUnpack(struct anycclP2pConn* c, struct anycclP2pReq* r, char* dst, const char* src, size_t len,
                    int bidx, void* freeMe) {
  return unpack(c, r, NULL, dst, src, len, bidx, freeMe);
}

int p2pBounceUnpackWrite(struct anycclP2pConn* c, struct p2pInWrite* w, char* dst, const char* src, size_t len,
                         int bidx) {
  return unpack(c, NULL, w, dst, src, len, bidx, NULL);
}

const char* p2pBounceStage(struct anycclP2pConn* c, const char* src, size_t len, int* bidx, int* err) {
  *bidx = -1;
  *err = 0;
  if (setup(c) != ncclSuccess) {
    *err = -1;
    return NULL;
  }
  struct p2pBounce* b = c->bnc;
  if (b->nFreeSend == 0) return NULL;
  int i = b->freeSend[--b->nFreeSend];
  char* dst = bufOf(b, i);
  if (b->debugUs) memset(dst, POISON, b->bytes);
  debugDelay(b, b->d2h);
  int e = b->rt->memcpyAsync(dst, src, len, b->d2h);
  if (!e) e = b->rt->eventRecord(b->ev[i - b->n], b->d2h);
  if (e) {
    WARN("P2P: copying %zu bytes out of the GPU buffer of a send failed: %s", len, b->rt->errorString(e));
    b->rt->streamSynchronize(b->d2h);
    release(b, i);
    *err = e;
    return NULL;
  }
  *bidx = i;
  return dst;
}

int p2pBounceStaged(struct anycclP2pConn* c, int bidx) {
  struct p2pBounce* b = c->bnc;
  return b->rt->eventQuery(b->ev[bidx - b->n]) == 0;
}

/* r completes before its copies did (a failure): wait for them (a copy
 * ends in bounded time) so that nothing writes into or reads from r's
 * buffer once r is done, and forget r in the copies not reaped yet. */
void p2pBounceForget(struct anycclP2pConn* c, struct anycclP2pReq* r) {
  struct p2pBounce* b = c->bnc;
  if (b == NULL) return;
  if (r->copiesLeft > 0) {
    b->rt->streamSynchronize(b->h2d);
    for (struct p2pUnpack* u = b->head; u; u = u->next)
      if (u->req == r) u->req = NULL;
    r->copiesLeft = 0;
  }
  if (r->kind == REQ_SEND || r->kind == REQ_WRITE || r->kind == REQ_RESP) b->rt->streamSynchronize(b->d2h);
}

/* Connection teardown (no other thread left). */
void p2pBounceFree(struct anycclP2pConn* c) {
  struct p2pBounce* b = c->bnc;
  if (b == NULL) return;
  const struct anycclRtCopy* rt = b->rt;
  if (b->h2d) rt->streamSynchronize(b->h2d);
  if (b->d2h) rt->streamSynchronize(b->d2h);
  for (int pass = 0; pass < 2; pass++)
    for (struct p2pUnpack* u = pass ? b->spare : b->head; u;) {
      struct p2pUnpack* next = u->next;
      free(u->freeMe);
      rt->eventDestroy(u->ev);
      free(u);
      u = next;
    }
  for (int i = 0; i < b->n && b->ev; i++)
    if (b->ev[i]) rt->eventDestroy(b->ev[i]);
  if (b->h2d) rt->streamDestroy(b->h2d);
  if (b->d2h) rt->streamDestroy(b->d2h);
  if (b->mem) rt->freeHost(b->mem);
  free(b->ev);
  free(b->freeRecv);
  free(b->freeSend);
  free(b);
  c->bnc = NULL;
}
