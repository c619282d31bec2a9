/* The network table (net.h) over the P2P engine (src/p2p): what the
 * collectives' proxy and the one-sided layer get with ANYCCL_NET_ENGINE=p2p.
 * A net connection is one P2P connection (ANYCCL_P2P_CHANNELS TCP channels,
 * chunks dealt round-robin, a window per channel); each FIFO slot is one
 * message. The proxy thread that calls test() moves the bytes itself (the
 * engine's caller-driven progress); completions ring its eventfd.
 *
 * The listen handle is the engine's, cut to one address so that it fits
 * ANYCCL_NET_HANDLE_MAXSIZE. A peer that destroyed its communicator
 * normally (goodbye on every channel) shows as a receive of SIZE_MAX bytes,
 * as the socket table does. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include "bootstrap.h"
#include "checks.h"
#include "net.h"
#include "../p2p/p2p_int.h"
#include "param.h"
#include "rt.h"

_Static_assert(offsetof(struct p2pWireHandle, addrs) + sizeof(union ncclSocketAddress) <= ANYCCL_NET_HANDLE_MAXSIZE,
               "a one-address engine handle fits the net handle");

struct p2pNetListen {
  anycclP2pEndpoint_t ep;
  volatile uint32_t* abortFlag; /* the communicator's, for accept */
};

/* Connection setup is bounded as the bootstrap is (ANYCCL_BOOTSTRAP_TIMEOUT)
 * and ends when the communicator is aborted. */
#define SETUP_TIMEOUT_NAME "ANYCCL_BOOTSTRAP_TIMEOUT"


struct p2pNetComm {
  anycclP2pEndpoint_t ep; /* owned when this side connected */
  anycclP2pConn_t conn;
};

static ncclResult_t endpoint(int dev, anycclP2pEndpoint_t* ep) {
  int ndev = 0;
  NCCLCHECK(anycclNetSocket.devices(&ndev));
  anycclNetProperties props;
  NCCLCHECK(anycclNetSocket.getProperties(dev >= 0 && dev < ndev ? dev : 0, &props));
  anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
  const char* ifname = anycclParamStr(PARAM_P2P_IFNAME);
  cfg.ifname = ifname && ifname[0] ? NULL : props.name; /* the socket table's device, unless overridden */
  /* channels: NCCL's socket knobs when the user set them (threads x sockets per thread), else the engine's */
  if (getenv("NCCL_SOCKET_NTHREADS") || getenv("NCCL_NSOCKS_PERTHREAD")) {
    int64_t nt = anycclParamInt(PARAM_SOCKET_NTHREADS), per = anycclParamInt(PARAM_NSOCKS_PERTHREAD);
    int64_t n = (nt < 1 ? 1 : nt) * (per < 1 ? 1 : per);
    cfg.channels = (int)(n > ANYCCL_P2P_MAX_CHANNELS ? ANYCCL_P2P_MAX_CHANNELS : n);
  } else if (anycclParamInt(PARAM_P2P_CHANNELS) == 0) {
    cfg.channels = 4;
  }
  /* A FIFO slot (512 KB by default) is one message. Whole (one chunk), the
   * 4 slots in flight on a connection's 4 channels share a bottleneck link
   * and all arrive late, which a chain or ring waits for at every hop; cut
   * over all channels, they arrive in order but every large message pays 4x
   * the chunks. Half a slot per chunk: pairs of slots share the link. On 4
   * tc-shaped hosts at 1 Gbit/s all-reduce 4-16 MB takes 0.84-0.87x the
   * time of whole slots (a quarter slot: 0.78-0.84x), and over loopback
   * 64 MB send/recv keeps 0.87x of its rate (a quarter slot: 0.66x). */
  if (getenv("ANYCCL_P2P_CHUNK") == NULL) cfg.chunkBytes = 256 << 10;
  /* this table carries the transport only when no plugin loaded (anycclNetDefault): its own sockets */
  cfg.net = "socket";
  NCCLCHECK(anycclP2pEndpointCreate(-1, &cfg, ep));
  (*ep)->bounce = 0; /* FIFOs in host memory (pinned on the cuda backend), user memory only on the cpu backend */
  return ncclSuccess;
}

static ncclResult_t pListen(int dev, void* handle, void** out, volatile uint32_t* abortFlag) {
  struct p2pNetListen* l;
  ANYCCL_CALLOC(l, 1);
  l->abortFlag = abortFlag;
  ncclResult_t res = endpoint(dev, &l->ep);
  anycclP2pHandle_t h;
  if (res == ncclSuccess) res = anycclP2pListen(l->ep, &h);
  if (res != ncclSuccess) {
    anycclP2pEndpointDestroy(l->ep);
    free(l);
    return res;
  }
  struct p2pWireHandle w;
  memcpy(&w, h.bytes, sizeof(w));
  w.naddrs = 1;
  memset(handle, 0, ANYCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &w, offsetof(struct p2pWireHandle, addrs) + sizeof(union ncclSocketAddress));
  *out = l;
  return ncclSuccess;
}

/* The FIFO is the flow control: chunks beyond the posted receives wait in
 * TCP, not in the engine's early-chunk buffers. Receives stay posted on an
 * idle connection: no engine timeout (the transport has its own, and TCP
 * liveness, ANYCCL_NET_TIMEOUT, catches a dead network). */
static void setup(struct p2pNetComm* c) {
  pthread_mutex_lock(&c->conn->lock);
  c->conn->quietBye = 1;
  c->conn->unexpMax = 0;
  c->conn->noDrain = 1;
  c->conn->keepDone = 1;
  c->conn->timeoutMs = -1;
  pthread_mutex_unlock(&c->conn->lock);
}

static ncclResult_t pConnect(int dev, const void* handle, void** out, volatile uint32_t* abortFlag) {
  struct p2pNetComm* c;
  ANYCCL_CALLOC(c, 1);
  anycclP2pHandle_t h;
  memset(&h, 0, sizeof(h));
  memcpy(h.bytes, handle, ANYCCL_NET_HANDLE_MAXSIZE);
  ncclResult_t res = endpoint(dev, &c->ep);
  if (res == ncclSuccess) res = p2pConnectEx(c->ep, &h, &c->conn, bootstrapTimeoutMs(), abortFlag, SETUP_TIMEOUT_NAME);
  if (res != ncclSuccess) {
    anycclP2pEndpointDestroy(c->ep);
    free(c);
    return res;
  }
  setup(c);
  *out = c;
  return ncclSuccess;
}

static ncclResult_t pAccept(void* listenComm, void** out) {
  struct p2pNetListen* l = listenComm;
  struct p2pNetComm* c;
  ANYCCL_CALLOC(c, 1);
  ncclResult_t res = p2pAcceptEx(l->ep, &c->conn, bootstrapTimeoutMs(), l->abortFlag, SETUP_TIMEOUT_NAME);
  if (res != ncclSuccess) {
    free(c);
    return res;
  }
  /* the connection outlives the listener: move it to an endpoint of its own */
  c->ep = l->ep;
  l->ep = NULL;
  setup(c);
  *out = c;
  return ncclSuccess;
}

static ncclResult_t pRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  (void)comm, (void)data, (void)size, (void)type;
  *mhandle = NULL;
  return ncclSuccess;
}
static ncclResult_t pDeregMr(void* comm, void* mhandle) { return ncclSuccess; }

/* A request the engine refused because the peer said goodbye: report it as
 * a goodbye receive (SIZE_MAX) on test. */
static char byeReq;

/* Every message goes with match tag 0 (slots arrive in order); the slot's
 * operation tag (transport.h) rides beside it as the engine's immediate
 * word, so mismatch checks and stalled ranks' signatures work as over the
 * sockets. */
static ncclResult_t pIsend(void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  struct p2pNetComm* c = comm;
  (void)mhandle;
  return p2pIsendImm(c->conn, data, size, (uint32_t)tag, (struct anycclP2pReq**)request);
}

static ncclResult_t pIrecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request) {
  struct p2pNetComm* c = comm;
  (void)mhandles;
  if (n != 1) {
    WARN("NET/P2P: grouped receives (n=%d) are not supported", n);
    return ncclInternalError;
  }
  (void)tags;
  ncclResult_t res = anycclP2pIrecv(c->conn, data[0], sizes[0], 0, (anycclP2pRequest_t*)request);
  if (res != ncclSuccess && __atomic_load_n(&c->conn->peerBye, __ATOMIC_ACQUIRE)) {
    *request = &byeReq;
    return ncclSuccess;
  }
  return res;
}

static ncclResult_t pTestTag(void* request, int* done, size_t* sizes, int* tag) {
  if (tag) *tag = 0;
  if (request == &byeReq) {
    *done = 1;
    if (sizes) *sizes = SIZE_MAX;
    return ncclSuccess;
  }
  struct anycclP2pReq* r = request;
  struct anycclP2pConn* conn = r->conn;
  *done = 0;
  if (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) p2pKick(conn, 0);
  if (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) return ncclSuccess;
  if (r->err != ncclSuccess) {
    /* failed: it stays listed (freed at close), since the caller may test it again as the socket table allows */
    if (r->kind != REQ_RECV || !__atomic_load_n(&conn->peerBye, __ATOMIC_ACQUIRE)) return r->err;
    *done = 1; /* the peer said goodbye: a receive of SIZE_MAX bytes, as the socket table reports it */
    if (sizes) *sizes = SIZE_MAX;
    return ncclSuccess;
  }
  size_t got = 0;
  if (tag) *tag = (int)r->imm; /* read before the test frees the request */
  ncclResult_t res = anycclP2pTest(r, done, &got);
  if (*done && sizes) *sizes = got;
  return res;
}

static ncclResult_t pClose(void* comm) {
  struct p2pNetComm* c = comm;
  if (c == NULL) return ncclSuccess;
  anycclP2pClose(c->conn);
  anycclP2pEndpointDestroy(c->ep);
  free(c);
  return ncclSuccess;
}

static ncclResult_t pCloseListen(void* listenComm) {
  struct p2pNetListen* l = listenComm;
  if (l == NULL) return ncclSuccess;
  anycclP2pEndpointDestroy(l->ep);
  free(l);
  return ncclSuccess;
}

static void pSetNotify(void* comm, int fd, const int32_t* asleep) {
  struct p2pNetComm* c = comm;
  pthread_mutex_lock(&c->conn->lock);
  c->conn->notifyFd = fd;
  c->conn->notifyAsleep = asleep;
  pthread_mutex_unlock(&c->conn->lock);
}

static void pSetPick(void* comm, void* (*pick)(void*, void*, size_t, uint32_t), void* arg) {
  struct p2pNetComm* c = comm;
  pthread_mutex_lock(&c->conn->lock);
  c->conn->pick = pick;
  c->conn->pickArg = arg;
  pthread_mutex_unlock(&c->conn->lock);
}

static ncclResult_t pInit(void) { return anycclNetSocket.init(); }
static ncclResult_t pDevices(int* n) { return anycclNetSocket.devices(n); }
static ncclResult_t pGetProperties(int dev, anycclNetProperties* p) { return anycclNetSocket.getProperties(dev, p); }

static ncclResult_t pTest(void* request, int* done, size_t* sizes) { return pTestTag(request, done, sizes, NULL); }

const anycclNet_t anycclNetP2p = {"P2P",    pInit,   pDevices, pGetProperties, pListen,  pConnect,
                                  pAccept,  pRegMr,  pDeregMr, pIsend,         pIrecv,   pTest,
                                  pClose,   pClose,  pCloseListen, pSetNotify, pTestTag, NULL /* pollFds */, pSetPick,
                                  NULL,     NULL /* connect and accept block */};

/* Unset: the P2P engine on the cpu backend (fewer threads and wake-ups per
 * byte than the socket table's helpers: docs/p2p.md, Numbers), the socket
 * table on GPUs (the engine is not yet measured there). */
const anycclNet_t* anycclNetDefault(void) {
  const anycclNet_t* plugin = anycclNetPlugin();
  if (plugin) return plugin;
  const char* e = anycclParamStr(PARAM_NET_ENGINE);
  if (e && strcmp(e, "p2p") == 0) return &anycclNetP2p;
  if (e && strcmp(e, "socket") == 0) return &anycclNetSocket;
  if (e && e[0]) {
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      WARN("ANYCCL_NET_ENGINE=%s is not an engine: set socket or p2p (using the default)", e);
  }
  return anycclRt.kind == ANYCCL_BACKEND_CUDA ? &anycclNetSocket : &anycclNetP2p;
}
