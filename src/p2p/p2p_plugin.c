/* The P2P engine over an NCCL net plugin (NCCL_NET_PLUGIN, loaded by
 * src/transport/net_plugin.c as for the collectives' transport).
 *
 * A plugin connection is one-directional and message-based, so each engine
 * channel is two of them: one the connecting side sends on, one the
 * accepting side sends on. The channel's byte stream (64-byte headers and
 * payloads, p2p_int.h) travels as plugin messages of at most one slot:
 * P2P_PLUG_SLOTS registered host slots each way, each a posted isend or
 * irecv (at most 4 requests per plugin connection: every version's
 * NCCL_NET_MAX_REQUESTS allows that). The sender copies what sendChannel
 * writes into a free slot; the receiver reads the oldest completed slot.
 * A plugin delivers a connection's messages in order, so the stream is the
 * socket's.
 *
 * Setup is stepped, as plugins return no comm until the peer progressed:
 *   connector  listens M_0..M_n-1, connects to the handle's listen (L),
 *              sends hello {cookie, connId, channels, chunk, window, M_k}
 *   acceptor   accepts on L (one per engine connection), receives the hello
 *              (cookie checked, junk dropped), listens N_1..N_n-1,
 *              connects to every M_k, sends {N_k} back on channel 0
 *   connector  accepts on every M_k, receives {N_k}, connects to N_k
 *   acceptor   accepts on every N_k
 * Accept returns once the hello checked out and Connect after its first
 * step; the connection's progress thread steps the rest (requests posted
 * meanwhile wait), bounded by the connect's timeout. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "bootstrap.h"
#include "checks.h"
#include "p2p_int.h"
#include "param.h"

#define HELLO_MS 2000
#define SLOT_CAP (256 << 10) /* payload bytes per slot at most (a larger chunk takes several messages) */
#define IDLE_SPINS 100 /* idle passes that yield before the waits sleep */

struct p2pPlugChan {
  void *sc, *rc;   /* sendComm, recvComm */
  void *smh, *rmh; /* the slots' registrations */
  char *sbuf, *rbuf;
  void* sreq[P2P_PLUG_SLOTS];
  uint64_t sPosted, sDone;
  void* rreq[P2P_PLUG_SLOTS];
  uint64_t rPosted, rTaken;
  size_t rsize, roff;
  int rready;
  /* setup */
  char conHandle[ANYCCL_NET_HANDLE_MAXSIZE]; /* the peer's listen handle, kept between connect steps */
  int conKnown;
  void* lc; /* our listen for the peer's direction of this channel */
  char lh[ANYCCL_NET_HANDLE_MAXSIZE];
};

struct p2pPlugHello { /* connector -> acceptor, first message on channel 0 */
  struct p2pHello base;
  char listen[ANYCCL_P2P_MAX_CHANNELS][ANYCCL_NET_HANDLE_MAXSIZE];
};
struct p2pPlugBack { /* acceptor -> connector, first message on channel 0 back */
  uint64_t magic, cookie, connId;
  int32_t nchannels, pad;
  char listen[ANYCCL_P2P_MAX_CHANNELS][ANYCCL_NET_HANDLE_MAXSIZE];
};

struct p2pPlugSetup {
  int acceptor;
  struct p2pPlugHello hello;
  struct p2pPlugBack back;
  int stage;       /* connector: 0 channel 0 connecting, 1 hello going, 2 accepting, 3 reply coming, 4 connecting;
                     acceptor: 0 connecting, reply going, 1 accepting */
  void *mh, *mhComm, *req; /* the setup message in flight */
  int posted;
  int64_t deadline;
  int64_t timeoutMs;
};

static size_t slotBytes(const struct anycclP2pConn* c) {
  return (c->chunk < SLOT_CAP ? c->chunk : SLOT_CAP) + sizeof(struct p2pHdr);
}
static size_t helloBytes(int nch) { return sizeof(struct p2pHello) + (size_t)nch * ANYCCL_NET_HANDLE_MAXSIZE; }
static size_t backBytes(int nch) { return offsetof(struct p2pPlugBack, listen) + (size_t)nch * ANYCCL_NET_HANDLE_MAXSIZE; }

/* ---- choice ------------------------------------------------------------------------ */
/* 0: chosen (*net NULL: sockets); 1: a bad value (ncclInvalidArgument); 2: the plugin wanted is not there */
int p2pPlugChoose(const char* cfgNet, const anycclNet_t** net) {
  const char* want = cfgNet ? cfgNet : anycclParamStr(PARAM_P2P_NET);
  const char* from = cfgNet ? "config.net" : "ANYCCL_P2P_NET";
  *net = NULL;
  if (want && want[0] && strcmp(want, "socket") != 0 && strcmp(want, "plugin") != 0) {
    WARN("anycclP2pEndpointCreate: %s=\"%s\" is not a network; pass \"socket\" or \"plugin\"", from, want);
    return 1;
  }
  if (want && strcmp(want, "socket") == 0) return 0;
  const char* name = anycclParamStr(PARAM_NET_PLUGIN);
  int named = name && name[0] && strcmp(name, "none") != 0;
  if (named) *net = anycclNetPlugin(); /* a library that does not load is WARNed there (file, symbol) */
  if (*net == NULL && want && strcmp(want, "plugin") == 0) {
    if (named)
      WARN("anycclP2pEndpointCreate: %s=plugin but NCCL_NET_PLUGIN=%s did not load (the WARN above names the library "
           "and the symbol); fix the plugin, or pass \"socket\" for the built-in sockets", from, name);
    else
      WARN("anycclP2pEndpointCreate: %s=plugin but NCCL_NET_PLUGIN names no plugin; set NCCL_NET_PLUGIN=<name> "
           "(libnccl-net-<name>.so) or pass \"socket\"", from);
    return 2;
  }
  return 0;
}

ncclResult_t p2pPlugEndpointInit(struct anycclP2pEndpoint* ep) {
  int ndev = 0;
  NCCLCHECK(ep->net->devices(&ndev));
  if (ndev < 1) {
    WARN("anycclP2pEndpointCreate: net plugin %s has no device", ep->net->name);
    return ncclSystemError;
  }
  ep->netDev = ep->device >= 0 ? ep->device % ndev : 0;
  anycclNetProperties props;
  memset(&props, 0, sizeof(props));
  NCCLCHECK(ep->net->getProperties(ep->netDev, &props));
  if (ep->channels <= 0) ep->channels = 4;
  ep->nifs = 1;
  snprintf(ep->ifNames[0], NCCL_SOCKET_IFNAME_MAXLEN, "%.*s", NCCL_SOCKET_IFNAME_MAXLEN - 1, props.name);
  INFO(NCCL_INIT | NCCL_NET, "P2P: endpoint of device %d over net plugin %s: its device %d (%s), %d channels, chunk %zu, "
       "window %d", ep->device, ep->net->name, ep->netDev, props.name, ep->channels, ep->chunk, ep->window);
  return ncclSuccess;
}

void p2pPlugEndpointFree(struct anycclP2pEndpoint* ep) {
  if (ep->net && ep->netListen) ep->net->closeListen(ep->netListen);
  ep->netListen = NULL;
}

ncclResult_t p2pPlugListen(struct anycclP2pEndpoint* ep, anycclP2pHandle_t* handle) {
  struct p2pPlugWireHandle h;
  memset(&h, 0, sizeof(h));
  h.magic = P2P_PHANDLE_MAGIC;
  h.cookie = ep->cookie;
  snprintf(h.net, sizeof(h.net), "%s", ep->net->name);
  NCCLCHECK(ep->net->listen(ep->netDev, h.listen, &ep->netListen, NULL));
  memset(handle, 0, sizeof(*handle));
  memcpy(handle->bytes, &h, sizeof(h));
  return ncclSuccess;
}

/* ---- connections ------------------------------------------------------------------- */
static ncclResult_t chanAlloc(struct anycclP2pConn* c) {
  c->pch = calloc((size_t)c->nch, sizeof(*c->pch));
  c->psetup = calloc(1, sizeof(*c->psetup));
  if (c->pch == NULL || c->psetup == NULL) return ncclSystemError;
  return ncclSuccess;
}

static int connectStep(struct anycclP2pConn* c, int k);

/* our listens for the peer's direction of channels first..nch-1 */
static ncclResult_t listenChannels(struct anycclP2pConn* c, int first) {
  for (int k = first; k < c->nch; k++) NCCLCHECK(c->ep->net->listen(c->ep->netDev, c->pch[k].lh, &c->pch[k].lc, NULL));
  return ncclSuccess;
}

ncclResult_t p2pPlugConnect(struct anycclP2pEndpoint* ep, const anycclP2pHandle_t* handle, struct anycclP2pConn* c,
                            int64_t timeoutMs) {
  struct p2pPlugWireHandle h;
  memcpy(&h, handle->bytes, sizeof(h));
  NCCLCHECK(chanAlloc(c));
  struct p2pPlugSetup* s = c->psetup;
  s->timeoutMs = timeoutMs;
  s->deadline = ncclSocketDeadlineMs(timeoutMs);
  memcpy(c->pch[0].conHandle, h.listen, sizeof(h.listen));
  c->pch[0].conKnown = 1;
  NCCLCHECK(listenChannels(c, 0));
  uint64_t connId;
  if (getrandom(&connId, sizeof(connId), 0) != sizeof(connId)) connId = (uint64_t)ncclSocketClockMs() ^ (uint64_t)(uintptr_t)c;
  s->hello.base = (struct p2pHello){P2P_HANDLE_MAGIC, h.cookie, connId, 0, c->nch, c->chunk, c->window, 0};
  for (int k = 0; k < c->nch; k++) memcpy(s->hello.listen[k], c->pch[k].lh, ANYCCL_NET_HANDLE_MAXSIZE);
  /* channel 0's first connect step here: a plugin that refuses the handle
   * fails the connect itself. Nothing further: the rest waits for the
   * peer's accept (a plugin's accept may block until a peer connects), and
   * the caller may be the thread that accepts next. */
  if (connectStep(c, 0) < 0) return ncclSystemError;
  if (c->pch[0].sc) s->stage = 1;
  return ncclSuccess;
}

static int64_t setupTimeout(int64_t timeoutMs) { return timeoutMs > 0 ? timeoutMs : bootstrapTimeoutMs(); }

/* Receive the hello on a fresh recvComm (bounded): 0 and *hi, or -1 (junk). */
static int recvHello(struct anycclP2pEndpoint* ep, void* rc, struct p2pPlugHello* hi, size_t* got) {
  const anycclNet_t* n = ep->net;
  void *mh = NULL, *req = NULL;
  if (n->regMr(rc, hi, sizeof(*hi), 0 /* host: the loader passes NCCL_PTR_HOST */, &mh) != ncclSuccess) return -1;
  int64_t deadline = ncclSocketDeadlineMs(HELLO_MS);
  void* data = hi;
  size_t size = sizeof(*hi);
  int tag = 0, done = 0, rc_ = -1;
  while (ncclSocketRemainingMs(deadline) > 0) {
    if (req == NULL && n->irecv(rc, 1, &data, &size, &tag, &mh, &req) != ncclSuccess) break;
    if (req && n->test(req, &done, got) != ncclSuccess) break;
    if (done) {
      rc_ = 0;
      break;
    }
    usleep(50);
  }
  n->deregMr(rc, mh);
  return rc_;
}

ncclResult_t p2pPlugAccept(struct anycclP2pEndpoint* ep, struct anycclP2pConn** out, int64_t timeoutMs,
                           volatile uint32_t* abortFlag, const char* timeoutName) {
  const anycclNet_t* n = ep->net;
  int64_t deadline = ncclSocketDeadlineMs(timeoutMs);
  struct p2pPlugHello* hi = malloc(sizeof(*hi));
  if (hi == NULL) return ncclSystemError;
  for (;;) {
    if (abortFlag && __atomic_load_n(abortFlag, __ATOMIC_ACQUIRE)) {
      INFO(NCCL_NET, "P2P: accept aborted (the abort flag is set)");
      free(hi);
      return ncclInternalError;
    }
    if (ncclSocketRemainingMs(deadline) == 0) {
      WARN("anycclP2pAccept: no peer connected through net plugin %s within %lld s (%s)", n->name,
           (long long)(timeoutMs / 1000), timeoutName);
      free(hi);
      return ncclSystemError;
    }
    void* rc = NULL;
    ncclResult_t res = n->acceptStep ? n->acceptStep(ep->netListen, &rc) : n->accept(ep->netListen, &rc);
    if (res != ncclSuccess) {
      WARN("anycclP2pAccept: net plugin %s's accept failed: %s", n->name, ncclGetErrorString(res));
      free(hi);
      return res;
    }
    if (rc == NULL) {
      usleep(100);
      continue;
    }
    size_t got = 0;
    struct p2pHello base;
    if (recvHello(ep, rc, hi, &got) != 0 || got < sizeof(base) ||
        p2pParseHello(&hi->base, sizeof(base), ep->cookie, &base) != ncclSuccess || base.index != 0 ||
        got != helloBytes(base.nchannels)) {
      INFO(NCCL_NET, "P2P: dropped a connection through net plugin %s that is not a P2P peer of this endpoint", n->name);
      n->closeRecv(rc);
      continue;
    }
    struct anycclP2pConn* c = p2pConnNew(ep, base.nchannels, base.chunk, base.window);
    ncclResult_t r2 = c ? chanAlloc(c) : ncclSystemError;
    if (r2 == ncclSuccess) {
      struct p2pPlugSetup* s = c->psetup;
      s->acceptor = 1;
      s->timeoutMs = setupTimeout(timeoutMs);
      s->deadline = ncclSocketDeadlineMs(s->timeoutMs);
      c->pch[0].rc = rc;
      rc = NULL;
      for (int k = 0; k < c->nch; k++) {
        memcpy(c->pch[k].conHandle, hi->listen[k], ANYCCL_NET_HANDLE_MAXSIZE);
        c->pch[k].conKnown = 1;
      }
      s->back = (struct p2pPlugBack){P2P_HANDLE_MAGIC, base.cookie, base.connId, c->nch, 0, {{0}}};
      r2 = listenChannels(c, 1);
      for (int k = 1; k < c->nch && r2 == ncclSuccess; k++)
        memcpy(s->back.listen[k], c->pch[k].lh, ANYCCL_NET_HANDLE_MAXSIZE);
    }
    if (rc) n->closeRecv(rc);
    free(hi);
    if (r2 != ncclSuccess) {
      if (c) p2pConnFree(c);
      return r2;
    }
    *out = c;
    return ncclSuccess;
  }
}

/* ---- setup steps (plock held) ------------------------------------------------------------ */
static int fail(struct anycclP2pConn* c, const char* what, ncclResult_t res) {
  WARN("P2P: connection setup through net plugin %s failed: %s (%s)", c->ep->net->name, what, ncclGetErrorString(res));
  return -1;
}

/* Post / test the setup message (hello or reply) on comm: 1 done now, 0 not yet, -1 failed. */
static int setupMsg(struct anycclP2pConn* c, void* comm, int send, void* buf, size_t size) {
  const anycclNet_t* n = c->ep->net;
  struct p2pPlugSetup* s = c->psetup;
  ncclResult_t res;
  if (!s->posted) {
    if (s->mh == NULL) {
      if ((res = n->regMr(comm, buf, size, 0, &s->mh)) != ncclSuccess) return fail(c, "regMr of the setup message", res);
      s->mhComm = comm;
    }
    int tag = 0;
    res = send ? n->isend(comm, buf, size, 0, s->mh, &s->req) : n->irecv(comm, 1, &buf, &size, &tag, &s->mh, &s->req);
    if (res != ncclSuccess) return fail(c, send ? "isend of a setup message" : "irecv of a setup message", res);
    if (s->req == NULL) return 0;
    s->posted = 1;
  }
  int done = 0;
  size_t got = 0;
  if ((res = n->test(s->req, &done, &got)) != ncclSuccess) return fail(c, "the peer went away during setup", res);
  if (!done) return 0;
  n->deregMr(comm, s->mh);
  s->mh = s->mhComm = NULL;
  s->posted = 0;
  if (!send && got != size) return fail(c, "the peer's setup message has the wrong size", ncclRemoteError);
  return 1;
}

static int connectStep(struct anycclP2pConn* c, int k) {
  struct p2pPlugChan* p = &c->pch[k];
  if (p->sc || !p->conKnown) return 0;
  const anycclNet_t* n = c->ep->net;
  ncclResult_t res = n->connectStep ? n->connectStep(c->ep->netDev, p->conHandle, &p->sc)
                                    : n->connect(c->ep->netDev, p->conHandle, &p->sc, NULL);
  if (res != ncclSuccess) return fail(c, "connect", res);
  return p->sc != NULL;
}

static int acceptStep(struct anycclP2pConn* c, int k) {
  struct p2pPlugChan* p = &c->pch[k];
  if (p->rc) return 0;
  const anycclNet_t* n = c->ep->net;
  ncclResult_t res = n->acceptStep ? n->acceptStep(p->lc, &p->rc) : n->accept(p->lc, &p->rc);
  if (res != ncclSuccess) return fail(c, "accept", res);
  return p->rc != NULL;
}

static ncclResult_t postRecvs(struct anycclP2pConn* c, struct p2pPlugChan* p, int k);

/* Every comm is up: slots registered, receives posted, listens closed. */
static int finish(struct anycclP2pConn* c) {
  const anycclNet_t* n = c->ep->net;
  size_t sb = slotBytes(c);
  for (int k = 0; k < c->nch; k++) {
    struct p2pPlugChan* p = &c->pch[k];
    if (p->lc) n->closeListen(p->lc);
    p->lc = NULL;
    p->sbuf = malloc(sb * P2P_PLUG_SLOTS);
    p->rbuf = malloc(sb * P2P_PLUG_SLOTS);
    if (p->sbuf == NULL || p->rbuf == NULL) return fail(c, "slot memory", ncclSystemError);
    ncclResult_t res;
    if ((res = n->regMr(p->sc, p->sbuf, sb * P2P_PLUG_SLOTS, 0, &p->smh)) != ncclSuccess ||
        (res = n->regMr(p->rc, p->rbuf, sb * P2P_PLUG_SLOTS, 0, &p->rmh)) != ncclSuccess)
      return fail(c, "regMr of the slots", res);
    if ((res = postRecvs(c, p, k)) != ncclSuccess) return fail(c, "irecv", res);
  }
  free(c->psetup);
  c->psetup = NULL;
  __atomic_store_n(&c->plugUp, 1, __ATOMIC_RELEASE);
  INFO(NCCL_NET, "P2P: connection of %d channels up through net plugin %s", c->nch, n->name);
  return 1;
}

/* Step every channel from..nch-1's connect (accept): 1 progressed, 0 not, -1 failed; *all: all up. */
static int connectAll(struct anycclP2pConn* c, int from, int* all) {
  int prog = 0;
  *all = 1;
  for (int k = from; k < c->nch; k++) {
    int r = connectStep(c, k);
    if (r < 0) return -1;
    prog |= r;
    *all &= c->pch[k].sc != NULL;
  }
  return prog;
}
static int acceptAll(struct anycclP2pConn* c, int from, int* all) {
  int prog = 0;
  *all = 1;
  for (int k = from; k < c->nch && *all; k++) { /* in order: a blocking accept waits only for the next connect */
    int r = acceptStep(c, k);
    if (r < 0) return -1;
    prog |= r;
    *all &= c->pch[k].rc != NULL;
  }
  return prog;
}

int p2pPlugSetupStep(struct anycclP2pConn* c) {
  struct p2pPlugSetup* s = c->psetup;
  if (s == NULL) return 0;
  if (ncclSocketRemainingMs(s->deadline) == 0) {
    WARN("P2P: connection setup through net plugin %s did not complete within %lld s (the peer stopped, or the "
         "plugin cannot connect; ANYCCL_OP_TIMEOUT / config.timeoutSec / ANYCCL_BOOTSTRAP_TIMEOUT)", c->ep->net->name,
         (long long)(s->timeoutMs / 1000));
    return -2;
  }
  int prog = 0, r = 0, all = 0;
  if (!s->acceptor) {
    switch (s->stage) {
      case 0: /* channel 0 to the handle's listen */
        if ((r = connectStep(c, 0)) <= 0) return r;
        s->stage = 1, prog = 1;
        /* fall through */
      case 1: /* the hello: cookie, connection, our listens */
        if ((r = setupMsg(c, c->pch[0].sc, 1, &s->hello, helloBytes(c->nch))) <= 0) return r < 0 ? -1 : prog;
        s->stage = 2, prog = 1;
        /* fall through */
      case 2: /* the acceptor connects to our listens */
        if ((r = acceptAll(c, 0, &all)) < 0) return -1;
        prog |= r;
        if (!all) return prog;
        s->stage = 3;
        /* fall through */
      case 3: /* its reply: its listens for channels 1.. */
        if ((r = setupMsg(c, c->pch[0].rc, 0, &s->back, backBytes(c->nch))) <= 0) return r < 0 ? -1 : prog;
        prog = 1;
        if (s->back.magic != P2P_HANDLE_MAGIC || s->back.cookie != s->hello.base.cookie ||
            s->back.connId != s->hello.base.connId || s->back.nchannels != c->nch)
          return fail(c, "the peer's reply is not for this connection", ncclRemoteError);
        for (int k = 1; k < c->nch; k++) {
          memcpy(c->pch[k].conHandle, s->back.listen[k], ANYCCL_NET_HANDLE_MAXSIZE);
          c->pch[k].conKnown = 1;
        }
        s->stage = 4;
        /* fall through */
      default:
        if ((r = connectAll(c, 1, &all)) < 0) return -1;
        return all ? finish(c) : (prog | r);
    }
  }
  if (s->stage == 0) { /* every channel to the connector's listens, the reply on channel 0 */
    if ((r = connectAll(c, 0, &all)) < 0) return -1;
    prog |= r;
    if (c->pch[0].sc == NULL) return prog;
    if ((r = setupMsg(c, c->pch[0].sc, 1, &s->back, backBytes(c->nch))) <= 0) return r < 0 ? -1 : prog;
    s->stage = 1, prog = 1;
  }
  /* then the connector connects to our listens */
  int allc;
  if ((r = connectAll(c, 0, &allc)) < 0) return -1;
  prog |= r;
  if ((r = acceptAll(c, 1, &all)) < 0) return -1;
  prog |= r;
  return all && allc ? finish(c) : prog;
}

/* ---- the stream ---------------------------------------------------------------------- */
static ncclResult_t postRecvs(struct anycclP2pConn* c, struct p2pPlugChan* p, int k) {
  const anycclNet_t* n = c->ep->net;
  size_t sb = slotBytes(c);
  while (p->rPosted - p->rTaken < P2P_PLUG_SLOTS) {
    int i = (int)(p->rPosted % P2P_PLUG_SLOTS);
    void* data = p->rbuf + (size_t)i * sb;
    size_t size = sb;
    int tag = k;
    void* req = NULL;
    NCCLCHECK(n->irecv(p->rc, 1, &data, &size, &tag, &p->rmh, &req));
    if (req == NULL) break; /* the plugin's requests are busy: later */
    p->rreq[i] = req;
    p->rPosted++;
  }
  return ncclSuccess;
}

ssize_t p2pPlugWrite(struct anycclP2pConn* c, int k, const struct iovec* iov, int niov) {
  struct p2pPlugChan* p = &c->pch[k];
  const anycclNet_t* n = c->ep->net;
  errno = EAGAIN;
  if (!__atomic_load_n(&c->plugUp, __ATOMIC_ACQUIRE)) return -1;
  while (p->sDone < p->sPosted) { /* reap the oldest sends */
    int done = 0;
    size_t sz = 0;
    if (n->test(p->sreq[p->sDone % P2P_PLUG_SLOTS], &done, &sz) != ncclSuccess) {
      errno = ECONNRESET;
      return -1;
    }
    if (!done) break;
    p->sDone++;
  }
  if (p->sPosted - p->sDone >= P2P_PLUG_SLOTS) return -1;
  size_t sb = slotBytes(c), len = 0;
  char* slot = p->sbuf + (size_t)(p->sPosted % P2P_PLUG_SLOTS) * sb;
  for (int i = 0; i < niov && len < sb; i++) {
    size_t m = iov[i].iov_len < sb - len ? iov[i].iov_len : sb - len;
    memcpy(slot + len, iov[i].iov_base, m);
    len += m;
  }
  if (len == 0) return 0;
  void* req = NULL;
  if (n->isend(p->sc, slot, len, k, p->smh, &req) != ncclSuccess) {
    errno = ECONNRESET;
    return -1;
  }
  if (req == NULL) return -1; /* busy: the same bytes again later */
  p->sreq[p->sPosted % P2P_PLUG_SLOTS] = req;
  p->sPosted++;
  return (ssize_t)len;
}

ssize_t p2pPlugRead(struct anycclP2pConn* c, int k, char* dst, size_t want) {
  struct p2pPlugChan* p = &c->pch[k];
  const anycclNet_t* n = c->ep->net;
  errno = EAGAIN;
  if (!__atomic_load_n(&c->plugUp, __ATOMIC_ACQUIRE)) return -1;
  if (c->ch[k].bye) return 0; /* nothing follows a goodbye: as EOF */
  for (;;) {
    if (postRecvs(c, p, k) != ncclSuccess) {
      errno = ECONNRESET;
      return -1;
    }
    if (p->rTaken == p->rPosted) return -1;
    if (!p->rready) {
      int done = 0;
      size_t sz = 0;
      if (n->test(p->rreq[p->rTaken % P2P_PLUG_SLOTS], &done, &sz) != ncclSuccess) {
        errno = ECONNRESET;
        return -1;
      }
      if (!done) return -1;
      if (sz > slotBytes(c)) {
        errno = EPROTO;
        return -1;
      }
      p->rready = 1, p->rsize = sz, p->roff = 0;
    }
    size_t m = p->rsize - p->roff < want ? p->rsize - p->roff : want;
    if (m && dst) memcpy(dst, p->rbuf + (size_t)(p->rTaken % P2P_PLUG_SLOTS) * slotBytes(c) + p->roff, m);
    p->roff += m;
    if (p->roff == p->rsize) {
      p->rready = 0;
      p->rTaken++;
    }
    if (m > 0 || want == 0) return (ssize_t)m;
    /* an empty message: on to the next */
  }
}

void p2pPlugBye(struct anycclP2pConn* c, const struct p2pHdr* bye) {
  if (!__atomic_load_n(&c->plugUp, __ATOMIC_ACQUIRE)) return;
  int64_t deadline = ncclSocketDeadlineMs(1000);
  for (int k = 0; k < c->nch; k++) {
    /* a channel may hold the tail of a partly written item: only a clean one can say goodbye */
    if (c->ch[k].qhead != NULL && c->ch[k].qhead->off != 0) continue;
    struct iovec iov = {(void*)bye, sizeof(*bye)};
    while (p2pPlugWrite(c, k, &iov, 1) < 0 && errno == EAGAIN && ncclSocketRemainingMs(deadline) > 0) sched_yield();
  }
  /* let the goodbyes (and what came before them) leave before the comms close */
  for (int k = 0; k < c->nch; k++) {
    struct p2pPlugChan* p = &c->pch[k];
    while (p->sDone < p->sPosted && ncclSocketRemainingMs(deadline) > 0) {
      int done = 0;
      size_t sz = 0;
      if (c->ep->net->test(p->sreq[p->sDone % P2P_PLUG_SLOTS], &done, &sz) != ncclSuccess) break;
      if (done) p->sDone++;
      else sched_yield();
    }
  }
}

void p2pPlugFree(struct anycclP2pConn* c) {
  if (c->pch == NULL) return;
  const anycclNet_t* n = c->ep->net;
  if (c->psetup && c->psetup->mh) n->deregMr(c->psetup->mhComm, c->psetup->mh);
  for (int k = 0; k < c->nch; k++) {
    struct p2pPlugChan* p = &c->pch[k];
    if (p->smh) n->deregMr(p->sc, p->smh);
    if (p->rmh) n->deregMr(p->rc, p->rmh);
    if (p->sc) n->closeSend(p->sc);
    if (p->rc) n->closeRecv(p->rc);
    if (p->lc) n->closeListen(p->lc);
    free(p->sbuf);
    free(p->rbuf);
  }
  free(c->pch);
  free(c->psetup);
  c->pch = NULL;
  c->psetup = NULL;
}

/* The waits yield for IDLE_SPINS passes, then sleep 10 us doubling up to a
 * millisecond (the plugin's own threads may need the core that spins). */
int p2pPlugIdleUs(struct anycclP2pConn* c) {
  int n = c->pidle++;
  if (n < IDLE_SPINS) return 0;
  return n - IDLE_SPINS >= 7 ? 1000 : 10 << (n - IDLE_SPINS);
}
