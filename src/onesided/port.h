/* The one-sided layer inside libnccl (see include/anyccl_port.h for the API).
 *
 * proxy.c     the service: FIFO, proxy thread, triggers, completion, waits
 * registry.c  memories, semaphores, channels, exchange with peers (bootstrap)
 * port_net.c  peers on other hosts: puts and signals as messages */
#ifndef ANYCCL_ONESIDED_PORT_H
#define ANYCCL_ONESIDED_PORT_H

#include <pthread.h>
#include <stdint.h>
#include "anyccl_port.h"
#include "comm.h"
#include "net.h"

#define PORT_API __attribute__((visibility("default")))

enum { MEM_FREE = 0, MEM_LOCAL, MEM_MAPPED, MEM_NET };
enum { CONN_NONE = 0, CONN_LOCAL, CONN_IPC, CONN_NET };

struct portMem {
  int kind;
  int owner;       /* rank that registered it */
  int ownerId;     /* its id in the owner's service (MEM_NET) */
  char* ptr;       /* in this process (MEM_LOCAL, MEM_MAPPED) */
  uint64_t size;
  void* ipcBase;   /* opened through IPC here (closed at destroy) */
};

struct portSem {
  int peer;        /* -1: host semaphore */
  int remoteSlot;  /* the peer's slot */
  uint64_t sent;   /* signals sent (cuda: the value copied to the peer, or stored into its host counter) */
  uint64_t hostValue; /* host semaphore on GPUs: the value last written */
  uint64_t streamSent; /* GPUs: signals written by the proxy stream into the peer's slot (its `proxied` word) */
};

struct portChan { int sem, dst, src; };

/* A message to another host's proxy. */
struct portMsg {
  uint32_t type;   /* ANYCCL_TRIG_PUT or ANYCCL_TRIG_SIGNAL */
  uint32_t id;     /* PUT: memory id at the receiver; SIGNAL: its slot */
  uint64_t off;
  uint64_t size;
  uint64_t pad;
};

#define NET_SQ 256 /* send queue entries per connection */
#define NET_RQ 4
/* Header-only messages queued back to back (signals, custom messages, at
 * most one put header last) leave as one network message of up to
 * PORT_BATCH headers, so a receiver takes them in one hand-off; each
 * connection has PORT_SBATCH such send buffers. */
#define PORT_BATCH 16
#define PORT_SBATCH 8
/* A put of at most PORT_INLINE bytes that ends such a message travels in
 * it, right after its header (flagged PORT_MSG_INLINE): one network message
 * instead of two. A header message is then up to PORT_MSG_WORDS portMsg
 * sizes long. */
#define PORT_INLINE 1024
#define PORT_MSG_WORDS (PORT_BATCH + PORT_INLINE / 32)
#define PORT_MSG_INLINE 0x20000u

struct netSendEntry {
  struct portMsg msg;
  const char* data;
  uint64_t seq;    /* the trigger it belongs to */
  void* hreq;
  void* dreq;
  int state;       /* 0 nothing posted, 1 header posted, 2 all posted */
  int stageBuf;    /* staged put: its bounce buffer (port_bounce.c), else -1 */
  void* event;     /* staged put: the copy into the bounce buffer (data sent once it completed) */
  uint64_t* bump;  /* raised by 1 (release) once the entry completed (GIN counters), or NULL */
  uint64_t inlineData; /* a put of at most 8 bytes carried here (portNetPutInline) */
  uint64_t t0;     /* ANYCCL_PROFILE_HOST: when it was queued (0: off) */
  int batch;       /* its header message carries the next entries' too, or its data: the send buffer (sbatch), else -1 */
  int inl;         /* a put whose data went inside a header message */
};

struct portConn {
  int kind;        /* CONN_* (written before ready) */
  int ready;       /* atomic */
  char* peerSlots; /* LOCAL/IPC: the peer's semaphore slots mapped here */
  void* ipcBase;
  uint64_t* peerHost; /* GPUs, LOCAL/IPC: the peer's host counters mapped here (NULL: signal by copy) */
  size_t peerHostMap;  /* bytes mapped (IPC; 0 when peerHost is the peer's own pointer) */
  /* NET */
  void* sendComm;
  void* recvComm;
  struct netSendEntry sq[NET_SQ];
  uint64_t sqHead, sqPosted, sqTail; /* completed, being posted, queued */
  struct portMsg rhdr[NET_RQ][PORT_MSG_WORDS]; /* header receives: up to PORT_BATCH headers each (and inline data) */
  struct portMsg sbatch[PORT_SBATCH][PORT_MSG_WORDS];
  int sbatchBusy[PORT_SBATCH];
  struct portMsg pend[PORT_MSG_WORDS]; /* a received batch, delivered in order from ipend (its inline data after npend) */
  size_t npendInline;                /* bytes of inline data after the last header */
  int npend, ipend;
  void* rreq[NET_RQ];
  int rkind[NET_RQ];                 /* 0 header, 1 data */
  size_t rsize[NET_RQ];              /* bytes posted */
  int rhead, rcount;
  uint64_t rstage[NET_RQ];           /* staged receives: the data's entry in the staging queue */
  int held;                          /* staged receives: pend[ipend] waits for a bounce buffer or queue room */
  struct portMsg heldMsg;
  char* heldPtr;
  int heldKind, heldSlot;
  int putDropped;                    /* the last put header received was dropped */
  int peerNslots;                    /* LOCAL/IPC: slots in peerSlots (the peer said) */
  char* discard;                     /* receive room for a put that cannot land */
  uint64_t discardSize;
  int closed;                        /* receives end: the peer closed it normally, or it failed */
};

/* An operation on the proxy stream; store: a host counter to raise to
 * value once the operation (and all before it) completed. */
struct portInflight { void* event; uint64_t seq; uint64_t* store; uint64_t value; };
#define CUDA_INFLIGHT 64
#define PORT_MAX_SIDE 7 /* side streams of a proxy (ANYCCL_PORT_CE_STREAMS - 1) */

struct anycclProxyService {
  struct ncclComm* comm;
  int rank, nRanks, index;
  int cuda;
  /* FIFO: host view and device view */
  struct anycclPortShared* shared;
  struct anycclPortShared* sharedDev;
  uint64_t* trig;
  uint64_t* trigDev;
  uint64_t* head;   /* device memory on GPUs */
  uint64_t* sigVals; /* GPUs: pinned sources of the semaphore copies, one per in-flight slot */
  /* GPUs: a host counter per semaphore (memfd, mapped by same-host peers,
   * registered with CUDA): peers' proxies signal with a CPU store, device
   * waits add it to the slot's value */
  uint64_t* hostSems;
  void* hostSemsDev;
  int hostSemsFd;
  size_t hostSemsBytes;
  uint32_t fifoSize;
  uint64_t tail;    /* proxy thread only */
  int efd;
  pthread_t thread;
  int started, stop;
  /* tables: fixed capacity (the proxy reads them while the host adds) */
  struct portMem* mems;
  int nMems, maxMems;
  struct portSem* sems;
  int nSems, maxSems;
  struct portChan* chans;
  int nChans, maxChans;
  struct anycclSemSlot* slots; /* my semaphore counters ("device" memory, peers map it) */
  uint64_t* expected;          /* per semaphore ("device" memory) */
  struct portConn* conns;      /* [nRanks] */
  int* nMemSent;               /* per peer: exchange sequence numbers (bootstrap tags) */
  int* nMemRecv;
  int* nSemMade;
  anycclTriggerHandler handler;
  void* handlerArg;
  pthread_mutex_t lock;        /* host API calls */
  uint64_t timeoutNs;
  uint64_t chunk;
  const anycclNet_t* net;
  int warned;                  /* invalid triggers reported once */
  double lastPeerCheck;
  /* GPUs: copies on a stream of the proxy, completion by events */
  void* stream;
  /* GPUs: a put of splitMin bytes or more is cut into 1 + nSide pieces,
   * copied at once on the proxy stream and nSide side streams that fork
   * from it and join it again (ANYCCL_PORT_CE_STREAMS) */
  int nSide;
  uint64_t splitMin;
  int streamSignals; /* GPUs: a signal behind copies is a stream write into the peer's slot, and the stream
                        writes `done` into head[3] while anyNet is 0 (ANYCCL_PORT_STREAM_SIGNALS) */
  int anyNet;        /* atomic: a connection to another host exists */
  void* side[PORT_MAX_SIDE];
  void* joinEv[PORT_MAX_SIDE];
  void* forkEv;
  struct portInflight inflight[CUDA_INFLIGHT];
  uint64_t infHead, infTail;
  /* Staging through pinned host bounce buffers to and from the network
   * (GPUs always; the cpu backend with ANYCCL_PORT_STAGE=1): port_bounce.c */
  struct portStage* stage;
  /* Custom messages from peers' proxies (ANYCCL_TRIG_CUSTOM, portNetCustom):
   * called on the proxy thread once every earlier put of that peer landed. */
  ncclResult_t (*netHandler)(void* arg, int peer, const struct portMsg* m);
  void* netHandlerArg;
  uint64_t curSeq; /* the trigger a custom handler runs for */
};

/* proxy.c */
/* A trigger as the proxy takes it (w1 without the commit bit), decoded and
 * checked against the service's channels and memories (pure: fuzz/fuzz_port.c).
 * ncclSuccess: a custom trigger (only t->type set), or a known channel whose
 * put lies inside both memories. Else ncclInvalidArgument with *what, *value,
 * *limit naming the bad part; the proxy drops it and nothing is written. */
struct portTrigger {
  uint32_t type, chan;
  uint64_t bytes, srcOff, dstOff;
};
ncclResult_t portTriggerDecode(const struct anycclProxyService* s, uint64_t w0, uint64_t w1, struct portTrigger* t,
                               const char** what, uint64_t* value, uint64_t* limit);
void portSetState(struct anycclProxyService* s, ncclResult_t err);
void portSetError(struct anycclProxyService* s, ncclResult_t err);
/* Add 1 to a slot in this process's view (cpu: atomic add and wake; cuda:
 * the new value copied on the proxy stream). */
ncclResult_t portBumpSlot(struct anycclProxyService* s, struct anycclSemSlot* slot, uint64_t* sent);

/* registry.c */
/* A memory a peer registered, as it describes it to us (anycclMemorySend /
 * AllGather, through the bootstrap). */
struct memWire {
  int32_t id, owner;
  uint64_t size, ptr, off;
  int32_t ipcOk, pad;
  cudaIpcMemHandle_t ipc;
};
/* Pure (fuzz/fuzz_port.c): ncclSuccess if it is peer's memory of 1..2^37-1
 * bytes at an offset below 2^37; else an error with why. */
ncclResult_t portParseMemWire(const void* bytes, size_t len, int peer, struct memWire* w, char* why, size_t whyLen);
/* The peer's half of a semaphore: 0 if slot lies in its slots (LOCAL/IPC;
 * a network peer checks its own), else -1. */
static inline int portCheckPeerSlot(const struct portConn* c, int slot) {
  return c->kind == CONN_NET || (slot >= 0 && slot < c->peerNslots) ? 0 : -1;
}
int portTag(struct anycclProxyService* s, int kind, int count);
ncclResult_t portExportAlloc(void* p, cudaIpcMemHandle_t* h, uint64_t* off, int* ok);
ncclResult_t portFreeTables(struct anycclProxyService* s);
void portFreeHostSems(struct anycclProxyService* s); /* proxy.c: own counters and peers' mappings */

/* port_net.c */
/* A message header from peer's proxy (got: the bytes that arrived). Pure
 * (fuzz/fuzz_port.c): PUT: its m->size bytes land at *ptr, inside memory
 * registered here; DISCARD: a put to memory or bytes not registered here
 * (received into the discard buffer and dropped; *why says what); SIGNAL:
 * semaphore *slot, one of peer's; BAD: the connection fails (*why). */
enum { PORT_MSG_PUT = 0, PORT_MSG_DISCARD, PORT_MSG_SIGNAL, PORT_MSG_BAD, PORT_MSG_CUSTOM };
/* In a custom message's type as its handler gets it: the last put before it
 * on that connection was dropped (its bytes went nowhere). */
#define PORT_MSG_AFTER_DROP 0x10000u
/* A received header message of `got` bytes: how many headers it holds (1
 * to PORT_BATCH), the last of which may be a put flagged PORT_MSG_INLINE
 * whose size (1 to PORT_INLINE) is exactly what follows it (*inlineBytes;
 * else 0), or -1 with the reason in why. */
int portNetBatchCount(const void* msg, size_t got, size_t* inlineBytes, char* why, size_t whyLen);
int portNetParseMsg(const struct anycclProxyService* s, int peer, const void* bytes, size_t got, struct portMsg* m,
                    char** ptr, int* slot, char* why, size_t whyLen);
ncclResult_t portNetConnect(struct anycclProxyService* s, int peer);
ncclResult_t portNetPut(struct anycclProxyService* s, int peer, int remoteId, uint64_t dstOff, const char* src,
                        uint64_t bytes, uint64_t seq);
ncclResult_t portNetSignal(struct anycclProxyService* s, int peer, int remoteSlot, uint64_t seq);
/* A custom message (type ANYCCL_TRIG_CUSTOM) for the peer's netHandler; bump: see netSendEntry. */
ncclResult_t portNetCustom(struct anycclProxyService* s, int peer, const struct portMsg* m, uint64_t seq);
/* The put's last message raises *bump once it completed (the source was read). */
ncclResult_t portNetPutBump(struct anycclProxyService* s, int peer, int remoteId, uint64_t dstOff, const char* src,
                            uint64_t bytes, uint64_t seq, uint64_t* bump);
/* A put of at most 8 bytes whose source is copied now (GIN's put-value). */
ncclResult_t portNetPutInline(struct anycclProxyService* s, int peer, int remoteId, uint64_t dstOff, const void* src,
                              uint64_t bytes, uint64_t seq);
/* Queue one message (bounded wait while the queue is full). */
ncclResult_t portNetQueue(struct anycclProxyService* s, int peer, const struct portMsg* m, const char* data,
                          uint64_t seq, int stageBuf, void* event, uint64_t* bump);

/* port_bounce.c: puts to and from another host through pinned host bounce
 * buffers (a bounded pool), copies on streams of the proxy, completion by
 * events; signals behind a put are applied after its copy completed. */
int portStageWanted(const struct anycclProxyService* s); /* GPUs, or ANYCCL_PORT_STAGE=1 */
ncclResult_t portStageInit(struct anycclProxyService* s);  /* once, at the first network connection */
void portStageFree(struct anycclProxyService* s);
/* Send side: copy the source into a bounce buffer (waits, bounded, for one) and queue the message. */
ncclResult_t portStagePut(struct anycclProxyService* s, int peer, int remoteId, uint64_t dstOff, const char* src,
                          uint64_t bytes, uint64_t seq, uint64_t* bump);
/* Send side: the entry's copy completed (1), not yet (0), failed (-1). */
int portStageSendReady(struct anycclProxyService* s, struct netSendEntry* e);
void portStageSendDone(struct anycclProxyService* s, struct netSendEntry* e);
/* Receive side: a header arrived. PUT: *buf and *entry say where its data goes
 * (0), or no room now (1: hold the header); SIGNAL, CUSTOM: queued behind the
 * puts before it (0) or no room (1). -1: error (*err). */
int portStageHeader(struct anycclProxyService* s, int peer, int kind, const struct portMsg* m, char* dst, int slot,
                    char** buf, uint64_t* entry, ncclResult_t* err);
/* Receive side: the data of entry arrived in its bounce buffer: copy it out. */
ncclResult_t portStageData(struct anycclProxyService* s, uint64_t entry);
/* Received puts still being copied out (their signals wait): the proxy must not sleep. */
int portStageBusy(struct anycclProxyService* s);
/* Retire completed copies and apply the signals behind them; 1 if anything moved. */
int portStageProgress(struct anycclProxyService* s, ncclResult_t* err);
/* Apply a signal to my semaphore slot now (cpu: the slot; GPUs: its host counter). */
void portSignalSlot(struct anycclProxyService* s, int slot);
/* Moves messages; returns 1 if anything moved. *oldest: lowest trigger still in flight. */
int portNetProgress(struct anycclProxyService* s, uint64_t* oldest, ncclResult_t* err);
void portNetClose(struct anycclProxyService* s);

#endif
