/* The P2P engine's inside (include/anyccl_p2p.h is the outside).
 *
 * A connection is N channels, each one TCP socket carrying both directions.
 * Everything on a channel is a 64-byte header and, for data, its payload:
 *
 *   MSG       tag, per-tag sequence (id), offset in the message, total
 *   WRITE     writer's request id, region key, offset in the region, total, notify
 *   READREQ   reader's request id, region key, offset, total (no payload)
 *   READRESP  reader's request id, offset in the read, total
 *   ACK       writer's / reader's request id; flags 1 = refused (bad key or range)
 *   BYE       the peer closes normally
 *
 * Outgoing data (sends, writes, read responses) waits in one queue per
 * connection; the progress thread deals its chunks round-robin over the
 * channels, at most `window` chunks queued per channel. Incoming MSG chunks
 * go straight into the matching posted receive (tag, per-tag sequence);
 * without one they wait in a bounded unexpected list (window chunks per
 * channel), and past that the channel stops reading (TCP pushes back). */
#ifndef ANYCCL_P2P_INT_H
#define ANYCCL_P2P_INT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include "anyccl_p2p.h"
#include "debug.h"
#include "socket.h"
#include "net.h"

#define P2P_MAGIC 0x61703270u /* "p2pa" */
#define P2P_HANDLE_MAGIC 0x616e79703270683aULL
#define P2P_MAX_IFS 4
#define P2P_STAGE_BYTES 16384 /* per channel: a header and a small payload in one recv */
/* A waiter with nothing but one small receive pending blocks in recv on the
 * channel its message comes by, at most this long before it looks at the
 * other channels (SO_RCVTIMEO on every channel socket). */
#define P2P_DIRECT_WAIT_MS 20
#define P2P_API __attribute__((visibility("default")))
/* bad input: one WARN naming the function and what to do */
#define ARGCHECK(cond, fn, fmt, ...)            \
  do {                                          \
    if (!(cond)) {                              \
      WARN("%s: " fmt, fn, ##__VA_ARGS__);      \
      return ncclInvalidArgument;               \
    }                                           \
  } while (0)

enum { P2P_OP_MSG = 1, P2P_OP_WRITE, P2P_OP_READREQ, P2P_OP_READRESP, P2P_OP_ACK, P2P_OP_BYE };

struct p2pHdr {
  uint32_t magic;
  uint16_t op;
  uint16_t flags;
  int32_t tag;
  uint32_t pad; /* MSG: the sender's immediate word (anycclP2pReq.imm) */
  uint64_t id;
  uint64_t key;
  uint64_t off;
  uint64_t len; /* payload bytes after this header */
  uint64_t total;
  uint64_t notify;
};
_Static_assert(sizeof(struct p2pHdr) == 64, "header is 64 bytes");

struct p2pWireHandle {
  uint64_t magic;
  uint64_t cookie;
  int32_t naddrs;
  int32_t pad;
  union ncclSocketAddress addrs[P2P_MAX_IFS];
};
_Static_assert(sizeof(struct p2pWireHandle) <= ANYCCL_P2P_HANDLE_BYTES, "handle fits");

/* A handle from an endpoint over a net plugin (p2p_plugin.c): the plugin's
 * name (a peer on another plugin, or on the built-in sockets, is refused)
 * and the plugin's listen handle for the connection's first channel. */
#define P2P_PHANDLE_MAGIC 0x616e797032706c67ULL
struct p2pPlugWireHandle {
  uint64_t magic;
  uint64_t cookie;
  char net[32];
  char listen[ANYCCL_NET_HANDLE_MAXSIZE];
};
_Static_assert(sizeof(struct p2pPlugWireHandle) <= ANYCCL_P2P_HANDLE_BYTES, "plugin handle fits");

struct p2pHello { /* first bytes on every channel socket */
  uint64_t magic;
  uint64_t cookie;
  uint64_t connId;
  int32_t index, nchannels;
  uint64_t chunk;
  int32_t window, pad;
};

enum { REQ_SEND = 1, REQ_RECV, REQ_WRITE, REQ_READ, REQ_RESP };

struct anycclP2pReq {
  struct anycclP2pConn* conn;
  int kind, tag;
  uint64_t id;     /* MSG: per-tag sequence; WRITE/READ: request id */
  char* buf;
  size_t size;     /* send/write/resp: bytes; recv: room; read: bytes */
  size_t total;    /* recv: message bytes (SIZE_MAX until known) */
  size_t moved;    /* bytes that arrived (recv, read) */
  size_t dealt;    /* bytes dealt to channels (outgoing) */
  int chunksLeft;  /* outgoing: chunks not yet fully written */
  int dealtAll;
  uint64_t key, remoteOff, notify;
  int done;
  ncclResult_t err;
  uint32_t imm;    /* MSG: a word for the receiver beside the data (the header's pad; the collectives' operation tag) */
  int bounce;      /* the buffer goes through the connection's bounce buffers (p2p_bounce.c) */
  int copiesLeft;  /* bounce receive: copies into buf not yet complete */
  struct anycclP2pReq *prev, *next;   /* conn->active */
  struct anycclP2pReq* outNext;       /* conn->out queue */
};

struct p2pItem { /* one header (+ payload) to write on a channel */
  struct p2pHdr hdr;
  const char* data;
  size_t off; /* bytes of hdr + data written */
  struct anycclP2pReq* req; /* NULL: control */
  int counted; /* counts against the window */
  int bidx;    /* a bounce send buffer (data points into it; written once staged); -1: none */
  struct p2pItem* next;
};

/* anycclP2pIsend with a 32-bit word delivered beside the message (match tag 0):
 * the collectives' network transport carries its operation tag in it. */
ncclResult_t p2pIsendImm(struct anycclP2pConn* c, const void* buf, size_t size, uint32_t imm, struct anycclP2pReq** req);

struct p2pUnexp { /* a MSG chunk that arrived before its receive */
  int32_t tag;
  int chan;
  uint64_t id, off, len, total;
  char* data;
  struct p2pUnexp* next;
  uint32_t imm;
};

struct p2pInWrite { /* a WRITE whose bytes are arriving */
  uint64_t id, total, got, notify;
  int bad;
  struct p2pInWrite* next;
  int copiesLeft; /* a region in GPU memory: copies from bounce buffers not complete yet */
  int chan;       /* where the acknowledgement goes */
};

struct p2pChannel {
  struct ncclSocket sock;
  int ifIndex;
  struct p2pItem *qhead, *qtail;
  int inflight; /* counted items queued */
  /* receive state */
  struct p2pHdr rhdr;
  size_t rhdrGot;
  int rstate;        /* 0: header, 1: payload, 2: stalled (no room for an unexpected chunk) */
  char* rdst;        /* NULL: discard */
  size_t rlen, rgot;
  struct anycclP2pReq* rreq;
  struct p2pUnexp* runexp;
  int rbidx;   /* the bounce receive buffer rdst points into (-1: none) ... */
  char* rfinal; /* ... and where its bytes go once in */
  int unexpCount;
  int bye;
  int closed;   /* EOF after the peer's goodbye */
  int readable; /* worth a recv: poll said so, or no EAGAIN since */
  int blockOnce; /* the next recv blocks (at most P2P_DIRECT_WAIT_MS: SO_RCVTIMEO) */
  /* received bytes not consumed yet: a header is read together with what
   * follows it (a small message's payload, the next header), so a small
   * message costs one recv; large payloads bypass it */
  size_t sbeg, send;
  char* sbuf; /* P2P_STAGE_BYTES */
};

struct p2pBounce;

struct p2pTagSeq {
  int32_t tag;
  uint64_t sendSeq, recvSeq;
  struct p2pTagSeq* next;
};

struct anycclP2pConn {
  struct anycclP2pEndpoint* ep;
  int nch;
  size_t chunk;
  int window;
  int64_t timeoutMs;
  struct p2pChannel* ch;
  pthread_mutex_t lock;  /* requests, lists, notifications */
  pthread_cond_t cv;
  pthread_mutex_t plock; /* the channels' I/O state: one thread moves bytes at a time */
  int plockInit;
  int spinners;          /* callers spinning in wait (they move the bytes) */
  int watch;             /* 1: the progress thread watches the sockets; 0: nothing pending, it sleeps on the wake fd */
  int nclosed;
  pthread_t thread;
  int threadStarted, stop, wakeFd;
  struct anycclP2pReq* active; /* every live request */
  struct anycclP2pReq *outHead, *outTail;
  struct p2pUnexp* unexp;
  struct p2pInWrite* inWrites;
  struct p2pTagSeq* tags;
  uint64_t nextId;
  int nextChan;
  uint64_t* notes;
  int nnotes, capNotes;
  ncclResult_t error;
  int peerBye;   /* every channel ended after the peer's goodbye */
  int unexpMax;  /* early chunks kept per channel (window; 0: stall at once, the net transport's FIFO flow control) */
  int keepDone;  /* the net table: done requests stay listed (finished) until tested, freed at close if never */
  struct anycclP2pReq* finished;
  int noDrain;   /* close at once (the net transport drained what it wanted already) */
  int quietBye;  /* a goodbye with requests pending is normal (the net transport's receives): no WARN */
  int notifyFd;  /* written on every completion (the net transport's proxy sleeps on it); -1: none */
  const int32_t* notifyAsleep; /* ... only while *notifyAsleep (NULL: always) */
  /* where a message's bytes go, decided at its first chunk (the net
   * transport's setPick; NULL: the posted buffer) */
  void* (*pick)(void* arg, void* posted, size_t size, uint32_t imm);
  void* pickArg;
  int64_t lastProgress;
  struct p2pBounce* bnc; /* bounce buffers (created at the first request that needs them) */
  int bncFailed;         /* ... and could not be */
  int bncErr;            /* a staging copy failed: the progress pass fails the connection */
  struct anycclP2pConn *epPrev, *epNext;
  /* over a net plugin (p2p_plugin.c; NULL: the channels' sockets) */
  struct p2pPlugChan* pch;
  struct p2pPlugSetup* psetup; /* connection setup still stepping (NULL once up) */
  int plugUp;
  int pidle; /* progress passes without progress (the idle wait spins first, then sleeps) */
};

struct anycclP2pMr {
  struct anycclP2pEndpoint* ep;
  uint64_t key;
  char* ptr;
  size_t size;
  int bounce; /* GPU memory (or ANYCCL_P2P_BOUNCE=2): the peer's writes and reads go through bounce buffers */
  struct anycclP2pMr* next;
};

struct p2pPending { /* channels of a connection still arriving at accept */
  uint64_t connId;
  struct p2pHello hello;
  struct ncclSocket* socks;
  int have;
  struct p2pPending* next;
};

struct anycclP2pEndpoint {
  int device;
  int bounce; /* 0: no bounce buffers; 1: for device memory; 2: for every buffer (ANYCCL_P2P_BOUNCE) */
  int channels, window;
  size_t chunk;
  int64_t timeoutMs;
  char topoNic[16];
  int nifs;
  char ifNames[P2P_MAX_IFS][NCCL_SOCKET_IFNAME_MAXLEN];
  union ncclSocketAddress ifAddrs[P2P_MAX_IFS];
  int listening;
  struct ncclSocket lsock[P2P_MAX_IFS];
  uint64_t cookie;
  struct p2pPending* pending;
  pthread_mutex_t lock;
  struct anycclP2pConn* conns;
  struct anycclP2pMr* mrs;
  int nmrs; /* regions ever registered (atomic): once any, the progress thread always serves the peer's writes
              * and reads, and refuses those for regions deregistered since */
  uint64_t nextKey;
  /* over a net plugin (ANYCCL_P2P_NET, config.net; NULL: built-in sockets) */
  const anycclNet_t* net;
  int netDev;
  void* netListen;
};

/* The channel of a message that fits one chunk: both sides compute it from
 * the tag and the per-tag sequence (a tag's small messages still go round
 * the channels), so a receiver can wait on that one socket. */
static inline int p2pMsgChannel(const struct anycclP2pConn* c, int tag, uint64_t seq) {
  return (int)((seq + (uint32_t)tag) % (uint64_t)c->nch);
}

/* p2p_wire.c: the bytes from outside (pure; fuzz/fuzz_p2p.c) */
/* A handle from anycclP2pListen: ncclInvalidArgument (with why) unless it has
 * the magic and 1..P2P_MAX_IFS IPv4/IPv6 addresses with ports. */
ncclResult_t p2pParseHandle(const void* bytes, size_t len, struct p2pWireHandle* out, char* why, size_t whyLen);
/* A hello on an accepted socket: ncclSuccess only with this listener's
 * cookie, 1..ANYCCL_P2P_MAX_CHANNELS channels, an index below that, a chunk
 * of 4 KB..1 GB and a window of 1..1024. */
ncclResult_t p2pParseHello(const void* bytes, size_t len, uint64_t cookie, struct p2pHello* out);
/* A chunk header: magic, a known op, len <= chunk and <= total. */
int p2pHeaderValid(const struct p2pHdr* h, size_t chunk);

/* A plugin endpoint's handle (ncclInvalidArgument with why unless its magic). */
ncclResult_t p2pParsePlugHandle(const void* bytes, size_t len, struct p2pPlugWireHandle* out, char* why, size_t whyLen);

/* p2p_plugin.c: the engine over an NCCL net plugin. Each channel is two
 * plugin connections (one each way) carrying the channel's byte stream as
 * messages of at most one slot (a header and its payload, or part of a
 * large payload), P2P_PLUG_SLOTS in flight each way. */
#define P2P_PLUG_SLOTS 4
/* ANYCCL_P2P_NET / config.net: the plugin's table, or NULL for sockets; 1: a bad value, 2: the
 * plugin asked for did not load (WARNed) */
int p2pPlugChoose(const char* cfgNet, const anycclNet_t** net);
ncclResult_t p2pPlugEndpointInit(struct anycclP2pEndpoint* ep);
ncclResult_t p2pPlugListen(struct anycclP2pEndpoint* ep, anycclP2pHandle_t* handle);
ncclResult_t p2pPlugConnect(struct anycclP2pEndpoint* ep, const anycclP2pHandle_t* handle, struct anycclP2pConn* c,
                            int64_t timeoutMs);
ncclResult_t p2pPlugAccept(struct anycclP2pEndpoint* ep, struct anycclP2pConn** out, int64_t timeoutMs,
                           volatile uint32_t* abortFlag, const char* timeoutName);
/* plock held: one step of the setup; 1 progressed, 0 not, -1 failed, -2 timed out (WARNed) */
int p2pPlugSetupStep(struct anycclP2pConn* c);
/* channel k's stream (plock held): bytes taken / given, or -1 with errno
 * EAGAIN (nothing now) or ECONNRESET (the plugin failed); read: 0 after the
 * peer's goodbye */
ssize_t p2pPlugWrite(struct anycclP2pConn* c, int k, const struct iovec* iov, int n);
ssize_t p2pPlugRead(struct anycclP2pConn* c, int k, char* dst, size_t want);
void p2pPlugBye(struct anycclP2pConn* c, const struct p2pHdr* bye);
void p2pPlugFree(struct anycclP2pConn* c);
void p2pPlugEndpointFree(struct anycclP2pEndpoint* ep);
/* the idle wait (plock held): 0 yield, else sleep this many us (1000: a
 * millisecond's poll on the wake fd) */
int p2pPlugIdleUs(struct anycclP2pConn* c);

/* p2p_progress.c */
ncclResult_t p2pConnStart(struct anycclP2pConn* c);
void p2pConnStop(struct anycclP2pConn* c); /* joins the thread */
void p2pConnDrop(struct anycclP2pConn* c); /* frees queued items, the wake fd */
void p2pWake(struct anycclP2pConn* c);
/* Progress now in the caller's thread, or wake the progress thread.
 * willDrive: the caller waits (p2pDrive) right after, so what is pending
 * needs no hand-off to the progress thread. */
void p2pKick(struct anycclP2pConn* c, int willDrive);
/* The progress thread watches c's sockets from now on (a region was registered). */
void p2pWatch(struct anycclP2pConn* c);
/* Wait for r moving the bytes in this thread (blocking in poll on the
 * channels, as a plain socket read would): 1 when r is done or the
 * connection stops; 0 at once when another thread holds the channels. */
int p2pDrive(struct anycclP2pConn* c, struct anycclP2pReq* r);
/* lock held */
struct p2pTagSeq* p2pTagSeq(struct anycclP2pConn* c, int tag);
void p2pReqLink(struct anycclP2pConn* c, struct anycclP2pReq* r);
void p2pReqUnlink(struct anycclP2pConn* c, struct anycclP2pReq* r);
void p2pOutPush(struct anycclP2pConn* c, struct anycclP2pReq* r);
void p2pRecvTakeUnexpected(struct anycclP2pConn* c, struct anycclP2pReq* r);
void p2pReqComplete(struct anycclP2pConn* c, struct anycclP2pReq* r, ncclResult_t err);
/* p2p.c: a connection's memory (NULL: none) and its end (thread stopped, everything freed) */
struct anycclP2pConn* p2pConnNew(struct anycclP2pEndpoint* ep, int nch, size_t chunk, int window);
void p2pConnFree(struct anycclP2pConn* c);
/* p2p.c: connection setup with an explicit bound (timeoutMs, < 0: none;
 * timeoutName names the parameter in the WARN) and an abort flag (may be
 * NULL; set: ncclInternalError within NCCL_SOCKET_POLL_MS). */
ncclResult_t p2pConnectEx(anycclP2pEndpoint_t ep, const anycclP2pHandle_t* handle, anycclP2pConn_t* out,
                          int64_t timeoutMs, volatile uint32_t* abortFlag, const char* timeoutName);
ncclResult_t p2pAcceptEx(anycclP2pEndpoint_t ep, anycclP2pConn_t* out, int64_t timeoutMs,
                         volatile uint32_t* abortFlag, const char* timeoutName);
/* p2p_bounce.c: GPU buffers through pinned host bounce buffers (lock held
 * unless noted) */
int p2pBounceMode(void); /* ANYCCL_P2P_BOUNCE, resolved (no lock) */
int p2pBounceWanted(struct anycclP2pConn* c, const void* buf, size_t size);
ncclResult_t p2pBounceSetup(struct anycclP2pConn* c);
/* a free receive buffer (NULL: none now; wait for copies to complete) */
char* p2pBounceRecvBuf(struct anycclP2pConn* c, int* bidx);
/* copy len bytes from src to r's dst; src is receive buffer bidx or early
 * bytes freeMe, freed once the copy completed. 0 or an error (then freed). */
int p2pBounceUnpack(struct anycclP2pConn* c, struct anycclP2pReq* r, char* dst, const char* src, size_t len,
                    int bidx, void* freeMe);
/* the same for the peer's write w into a GPU region (w lands when its copies did: p2pWriteLanded) */
int p2pBounceUnpackWrite(struct anycclP2pConn* c, struct p2pInWrite* w, char* dst, const char* src, size_t len,
                         int bidx);
/* stage len bytes of a send in a free send buffer (NULL: none free, or *err) */
const char* p2pBounceStage(struct anycclP2pConn* c, const char* src, size_t len, int* bidx, int* err);
int p2pBounceStaged(struct anycclP2pConn* c, int bidx); /* 1: its copy completed (no lock needed) */
void p2pBounceRelease(struct anycclP2pConn* c, int bidx);
int p2pBounceReap(struct anycclP2pConn* c);
int p2pBounceBusy(struct anycclP2pConn* c);
void p2pBounceForget(struct anycclP2pConn* c, struct anycclP2pReq* r);
void p2pBounceFree(struct anycclP2pConn* c);
/* p2p_progress.c: the peer's write w has all its bytes in place: notify, acknowledge, free (lock held) */
void p2pWriteLanded(struct anycclP2pConn* c, struct p2pInWrite* w);
/* p2p.c: region lookup (ep lock taken inside) */
char* p2pMrLookup(struct anycclP2pEndpoint* ep, uint64_t key, uint64_t off, uint64_t len, int* bounce);

#endif
