/* Connections between two ranks of a communicator.
 *
 * Every connection is a FIFO of slots living in the receiver's segment
 * (memory the sender can write: the same process's heap for P2P, a memfd
 * mapping for SHM, a proxy-fed staging area for NET later). The sender fills
 * a slot and publishes `tail`; the receiver consumes it and publishes `head`.
 * Both ends ring the other's doorbell so that a sleeping rank wakes up.
 *
 * A transport is a table of functions: how to reach a peer's segment. The
 * executors only ever see struct anycclConn. */
#ifndef ANYCCL_TRANSPORT_H
#define ANYCCL_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include "nccl.h"

#define ANYCCL_MAX_SLOTS 32
#define ANYCCL_CACHELINE 64

/* One rank's doorbell: bumped by anybody who changed something the rank may
 * be waiting for; the rank sleeps on it with a futex. */
struct anycclBell {
  uint32_t bell;
  uint32_t sleepers;
  int32_t eventFd1; /* eventfd + 1 to write on ring (proxy bells only), 0 = none */
  int32_t fdAsleep; /* proxy bells: the proxy sleeps on the eventfd (write it only then) */
  char pad[ANYCCL_CACHELINE - 16];
};

/* A slot's size word: the bytes in the slot (low 32 bits) and a tag (high
 * 32 bits) that names the operation the slot belongs to, so that a receiver
 * sees at once that its peer called something else (cpu_mismatch.c). Tag 0:
 * not checked (the cuda backend's slots). */
#define ANYCCL_TAG_POISON 0x40000000u /* a mismatch report (remote peers) */
#define ANYCCL_TAG_SIG 0x40000001u    /* a stalled rank's collective signature (remote peers; skipped) */
#define ANYCCL_TAG_COLL 0x80000000u   /* | collective number (8 bits) << 22 | signature hash (22 bits) */
#define ANYCCL_TAG_P2P 0xC0000000u    /* | bytes of the send (< 2^29), or 1 << 29 | hash of them */
#define ANYCCL_TAG_KIND(t) ((t) & 0xC0000000u)
static inline uint64_t anycclSizeWord(size_t bytes, uint32_t tag) { return (uint64_t)tag << 32 | (uint32_t)bytes; }

struct anycclFifoCtrl {
  uint64_t tail; /* slots posted by the sender */
  char pad0[ANYCCL_CACHELINE - 8];
  uint64_t head; /* slots consumed by the receiver */
  char pad1[ANYCCL_CACHELINE - 8];
  uint64_t sizes[ANYCCL_MAX_SLOTS]; /* bytes in each slot, written with the data */
};

/* Where a rank publishes its user buffers for single-copy ("peer") phases;
 * lives in its segment right after the doorbell. */
struct anycclXchg {
  uint64_t seq;              /* peer phase number this entry is for */
  /* The collective this rank runs now, published by every collective phase
   * (a seqlock: opVer is odd while the fields change), so that a waiting peer
   * can tell that the ranks disagree (backend/cpu_mismatch.c). In seq's
   * line: the single-copy exchange reads them with seq, at no extra miss. */
  uint64_t opVer;
  uint64_t opNum;            /* 1 + collectives this rank ran before it */
  uint64_t opCount;
  int32_t opFunc, opType, opRed, opRoot;
  uint64_t failSeq;          /* peer phase this rank left without its handshake */
  uint64_t done __attribute__((aligned(ANYCCL_CACHELINE))); /* peer phase number this rank has finished */
  char pad1[ANYCCL_CACHELINE - 8];
  int pid;
  int shareable;             /* handles below are valid (other processes can map) */
  char* in;
  char* out;
  size_t inOff, outOff;      /* offsets of in/out inside their allocations */
  uint64_t scalar;           /* this rank's PreMulSum scalar (ranks may differ) */
  cudaIpcMemHandle_t inH, outH;
  /* Set once this rank found that the ranks called different operations:
   * every local peer adopts it (ncclInvalidUsage). */
  uint32_t reported __attribute__((aligned(ANYCCL_CACHELINE)));
  char report[244];
};
_Static_assert(__builtin_offsetof(struct anycclXchg, failSeq) < ANYCCL_CACHELINE, "seq, the record, failSeq: one line");

_Static_assert(64 + sizeof(struct anycclXchg) <= 4096, "a segment's header (bell, xchg) is 4 KiB");

/* A net receive end's slot, for receiving into the user's buffer (cpu
 * backend, built-in tables): the executor binds message `msg - 1` to user
 * memory it will copy that message to anyway (`word`: the size word it
 * expects); the proxy's pick sends the bytes there when the message's word
 * is that one (taken = msg), else into the slot (cpu_exec.c, net.c). */
struct anycclRecvRef {
  uint64_t msg;    /* message number + 1 this binding is for (release-stored last), 0: none */
  char* ptr;
  uint64_t word;
  uint64_t taken;  /* message number + 1 whose bytes went to ptr */
  uint64_t posted; /* message number the slot's posted receive is for (proxy) */
};

/* One end of a connection, as the executor uses it. */
struct anycclConn {
  struct anycclFifoCtrl* ctrl;
  char* buf;                 /* nslots * slotBytes */
  int nslots;
  size_t slotBytes;
  uint64_t step;             /* sender: slots posted; receiver: slots consumed */
  struct anycclBell* peerBell; /* the other end's doorbell */
  int peer;
  int net;                   /* the peer is reached through the network proxy */
  int fifoIndex;             /* index of the FIFO in the receiver's segment */
  const char* via;           /* transport name, for logs */
  /* Net send ends whose proxy can read any host memory (the built-in
   * tables, cpu backend): per slot, user memory the proxy sends instead of
   * the slot's bytes (NULL: the slot). The executor sets it before posting
   * the slot; the proxy clears it when it isends (cpu_exec.c, net.c). NULL
   * for every other end. */
  char** sendRef;
  struct anycclRecvRef* recvRef; /* net receive ends of the same kind: [nslots]; NULL otherwise */
};

/* A rank's shared segment: its doorbell, then its receive FIFOs. */
struct anycclSegment {
  char* base;
  size_t size;
  int fd;            /* memfd; -1 once closed */
  int refs;          /* in-process users (atomic) */
};

/* What a rank publishes about its segment and itself at init. */
struct anycclPeerInfo {
  int rank;
  int cudaDev;
  int pid;
  uint64_t hostHash;
  uint64_t processToken; /* same value: same process */
  char busId[32];
  char hostId[64];       /* NCCL_HOSTID, "" when unset */
  int maxChannels;       /* this rank's NCCL_MAX_NCHANNELS */
  int nslots;            /* FIFO geometry (rank 0's is used) */
  size_t slotBytes;
  size_t netSlotBytes;   /* FIFO bytes when the communicator spans hosts (0: slotBytes) */
  int segFd;
  size_t segSize;
  struct anycclSegment* segLocal; /* valid only in the same process */
  void* devSeg;          /* cuda backend: device segment (valid in the same process) */
  size_t devSegSize;
  cudaIpcMemHandle_t devIpc; /* ... and its IPC handle for other processes */
};

struct ncclComm;

struct anycclTransport {
  const char* name; /* "P2P", "SHM" */
  /* can this rank reach the peer's segment this way? */
  int (*canConnect)(const struct anycclPeerInfo* self, const struct anycclPeerInfo* peer);
  /* map the peer's segment; returns its base in *base */
  ncclResult_t (*mapPeer)(const struct anycclPeerInfo* peer, char** base, void** handle);
  void (*unmapPeer)(void* handle);
};

extern const struct anycclTransport anycclTransportP2p;
extern const struct anycclTransport anycclTransportShm;
extern const struct anycclTransport anycclTransportNet;

/* The network transport (net.c): a proxy thread per communicator moves the
 * slots of every net connection through the net plugin table. */
ncclResult_t anycclNetSetup(struct ncclComm* comm);
void anycclNetFree(struct ncclComm* comm);
/* The proxy over a given set of connection ends (the cuda backend's, whose
 * FIFOs are pinned host memory the GPU reads and writes). A send end without
 * a FIFO (ctrl NULL) gets one in host memory. The FIFO index of an end in
 * its receiver's numbering (conn->fifoIndex) must be unique per receiver:
 * the two ends meet through it. gpu: the executor cannot ring the proxy's
 * bell, so the proxy polls while work is recent. */
struct anycclNetEnd {
  struct anycclConn* conn;
  int send;
  int channel; /* ring channel, or -1 */
};
ncclResult_t anycclNetStart(struct ncclComm* comm, const struct anycclNetEnd* ends, int count, int gpu);
/* Work is coming (a launch): wake the proxy. */
void anycclNetKick(struct ncclComm* comm);
/* 1 if slots to other hosts carry their operation tag (the built-in sockets;
 * the P2P engine and NCCL plugins send tag 0), or no peer is remote. */
int anycclNetCarriesTags(const struct ncclComm* comm);

/* Create the segment, exchange peer info, map peers, set up every
 * connection (ring channels and the all-pairs p2p mesh). */
/* Shared memory for the ranks of this host: a memfd of `bytes` (*fd),
 * mapped here; NULL with errno on failure. */
void* anycclShmCreate(const char* name, size_t bytes, int* fd);
/* `bytes` of process pid's memfd `fd`, mapped here through /proc (same user,
 * same host). The size came from that process, so it is checked against
 * the file first (a mapping past its end would fault). 0 and *out, else
 * one of these (errno says why): */
enum { ANYCCL_SHM_OPEN = 1, ANYCCL_SHM_SHORT, ANYCCL_SHM_MMAP };
int anycclShmMapPeer(int pid, int fd, size_t bytes, void** out);

ncclResult_t anycclTransportSetup(struct ncclComm* comm);
void anycclTransportFree(struct ncclComm* comm);

/* Doorbells. */
void anycclBellRing(struct anycclBell* b);

#endif
