/* The contract between the C core and the CUDA code (the .cu files in src/cuda): plain
 * fixed-width types only, so that the core never sees the real CUDA headers
 * and the .cu files never see the core's (which carry anyccl-cpu's runtime
 * headers). See docs/architecture.md, "The cuda backend".
 *
 * A phase of a plan travels to the GPU as one kernel-parameter blob: a
 * header, then the lanes, steps, connection indices and p2p ops it points
 * into (offsets). The kernel runs one block per lane. Kernel parameters are
 * copied at launch, so a launch needs no host synchronisation and is
 * captured by CUDA graphs as it is. */
#ifndef ANYCCL_CUDA_EXEC_H
#define ANYCCL_CUDA_EXEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device-side end of a connection (lives in the owner's device memory). A
 * FIFO's slots, tail and sizes are in the receiver's memory, its head in the
 * sender's: each side polls local memory and writes remote memory. */
struct acuConn {
  char* buf;          /* nslots * slotBytes (simple protocol) */
  char* llbuf;        /* nslots * llSlotBytes (LL lines; never simple data) */
  uint64_t* tail;     /* slots posted by the sender */
  uint64_t* sizes;    /* [nslots]: bytes in each slot */
  uint64_t* head;     /* slots consumed by the receiver */
  uint64_t step;      /* sender: posted; receiver: consumed (kept across launches) */
  uint32_t nslots;
  uint32_t slotBytes;
  int32_t peer;
  uint32_t llSlotBytes;
  uint32_t net;       /* a network end (pinned FIFO fed by the proxy): never poisoned by value */
  uint32_t pad;
  uint64_t* mailbox;  /* the peer's mismatch mailbox (its segment), NULL for a network end */
};

/* Host-mapped per-communicator state the kernels watch and report into. */
struct acuShared {
  volatile uint32_t abort;     /* set by ncclCommAbort/Revoke */
  volatile uint32_t err;       /* ACU_ERR_* once a kernel failed */
  volatile int32_t errPeer;
  volatile uint32_t pad;
  volatile uint64_t expected, got; /* size mismatch details */
  volatile uint64_t mailbox;       /* host copy of this rank's device mailbox (polled by the host) */
  volatile uint64_t poisonOut;     /* ACU_POISON | finder: the word the host copies into peers' mailboxes */
  volatile uint64_t opWord;        /* ACU_FLAG_HOST_OPWORD: the op word of the collective the GPU runs */
};
/* FENCE_SC: fence.sc.sys instead of fence.acq_rel.sys before a tail;
 * HOST_OPWORD: block 0 also writes the op word into acuShared, where the
 * network proxy compares it with the tags of slots arriving from other
 * hosts (a peer on another algorithm sends on connections this rank does
 * not read: the same collective number with another tag is a mismatch). */
enum { ACU_FLAG_FENCE_SC = 1, ACU_FLAG_HOST_OPWORD = 2 };
/* SIZE: a slot of another size (expected/got: bytes); MISMATCH: data of
 * another operation (signature tag, LL lines where simple slots were due or
 * the reverse); POISONED: a peer stopped on a mismatch and poisoned its
 * connections (errPeer: the rank that found it). */
enum { ACU_ERR_NONE = 0, ACU_ERR_SIZE = 1, ACU_ERR_TIMEOUT = 2, ACU_ERR_MISMATCH = 3, ACU_ERR_POISONED = 4 };
/* Mismatch detection (docs/failures.md): a simple slot's size word is
 * bytes | tag << 32, an LL line's second flag is its first (step + 1) xor
 * the tag. Collectives: ACU_TAG_COLL | (collective number - 1) % 255 + 1 << 22
 * | 22-bit hash of (func, count, type, op, root), in acuPhase.sig (groups with
 * send/recv: number field 0); send/recv: ACU_TAG_P2P | 24-bit hash of the whole
 * send's bytes, carried in bits 40-63 of each acuOp.bytes. A stopping lane
 * writes ACU_POISON | rank into the tails and heads of its same-host
 * connections, and a 0-byte slot tagged ACU_TAG_POISON into its network
 * send connections (the proxy forwards the tag). */
#define ACU_TAG_COLL 0x80000000u
#define ACU_TAG_P2P 0xC0000000u
#define ACU_TAG_POISON 0x40000000u /* ANYCCL_TAG_POISON (transport.h) */
#define ACU_OP_BYTES_MASK ((1ull << 40) - 1)
#define ACU_POISON (1ull << 63)
/* Each rank's segment holds a mailbox word (after the heads) that a peer's
 * stopping lane also sets to ACU_POISON | finder: a rank whose kernel had
 * already finished (a broadcast root, a sender) learns the mismatch when its
 * host polls the word (ncclCommGetAsyncError, an async copy at most every
 * millisecond). The host of a rank that learnt of a mismatch copies the same
 * word into the mailbox of every same-host peer, so that ranks the operation
 * did not involve (send/recv between two others) learn it too.
 *
 * The next word is the rank's op word: (collective number << 32) | tag of the
 * last collective whose kernel started. The slow path of a same-host wait
 * reads the peer's: the same number with another tag is a mismatch, whatever
 * protocol and connections each side waits on (LL lines on one side, simple
 * slots on the other never meet). */

enum { ACU_LANE_STEPS = 0, ACU_LANE_SEND, ACU_LANE_RECV, ACU_LANE_COPY };

struct acuStep { /* same meaning as struct anycclStep (plan.h) */
  int8_t recv, send;
  uint8_t in0, in1, out, pad;
  int16_t chunk, inChunk, outChunk;
};

/* A lane as the kernel sees it (rebuilt in shared memory at block start). */
struct acuLane {
  uint8_t kind;
  uint8_t nsteps;
  uint16_t nops;
  uint16_t stepOff; /* index into the blob's steps */
  uint16_t connOff; /* index into the blob's conns (STEPS) */
  uint16_t opOff;   /* index into the blob's ops (SEND/RECV/COPY) */
  uint16_t conn;    /* SEND/RECV: connection index */
  uint8_t ll;       /* LL protocol (flags in the data) instead of simple */
  uint8_t pad[3];
  uint64_t lenTotal, lenStride, inStride, outStride, begin, end, slice;
  uint64_t scratch;  /* device scratch for BUF_SCRATCH */
};

/* A lane as it travels in the blob: 40 bytes, its geometry shared with the
 * other lanes of the phase through a shape (lanes of one phase differ only
 * in range, connections and scratch), and its steps shared with every lane
 * running the same step sequence. Kernel parameters above 4 KB cost a
 * launch several microseconds more, so mid-size phases must stay small. */
struct acuLaneWire {
  uint8_t kind;
  uint8_t nsteps;
  uint16_t nops;
  uint16_t stepOff, connOff, opOff, conn;
  uint8_t ll;
  uint8_t shape;    /* index into the blob's shapes */
  uint16_t pad;
  uint64_t begin, end;
  uint64_t scratch;
};
struct acuShape {
  uint64_t lenTotal, lenStride, inStride, outStride, slice;
};

struct acuOp {
  uint64_t ptr, bytes;
};

/* ANYCCL_CUDA_TIMELINE: thread 0 of every block records when its lane
 * starts, when each step's wait ends, when each step is posted and when the
 * lane ends (%globaltimer, ns), in host-mapped memory; written to a file
 * per rank when the communicator is destroyed. */
struct acuTimeRec {
  uint64_t t;
  uint32_t seq;   /* launch number */
  uint16_t lane;  /* block */
  uint8_t step;   /* step of the lane's program (255: lane start/end) */
  uint8_t what;   /* ACU_T_* */
};
enum { ACU_T_START = 0, ACU_T_WAITED = 1, ACU_T_POSTED = 2, ACU_T_END = 3 };
struct acuTimeline {
  unsigned long long next; /* records claimed (may pass cap: those are dropped) */
  unsigned long long cap;
  /* then struct acuTimeRec[cap] */
};

struct acuPhase {
  uint64_t in, out;
  uint64_t scalar;     /* PreMulSum scalar bits (low bytes), if scalarPtr == 0 */
  uint64_t scalarPtr;  /* device pointer to the scalar, or 0 */
  uint64_t divisor;    /* SumPostDiv */
  struct acuConn* conns;  /* the communicator's device connection table */
  struct acuShared* shared;
  uint64_t timeoutNs;  /* 0 = wait forever */
  uint32_t elemSize;
  uint8_t type;        /* ncclDataType_t */
  uint8_t op;          /* anycclDevRedOp */
  uint8_t reduce;
  uint8_t flags;       /* ACU_FLAG_* */
  uint16_t nlanes, nsteps, nconns, nops;
  uint16_t nshapes, pad16;
  uint32_t bytes;      /* header + arrays, as sent */
  uint32_t chunk;      /* p2p simple-protocol chunk bytes */
  int32_t rank;
  struct acuTimeline* timeline; /* or NULL */
  uint32_t seq;        /* launch number (timeline records) */
  uint32_t sig;        /* collective's tag (ACU_TAG_COLL | hash); p2p lanes: per op */
  uint64_t* opWord;    /* this rank's op word (its segment), written by each steps lane at start */
  uint32_t collSeq;    /* collective phase number (1, 2, ...; same on every rank); 0: send/recv */
  uint32_t pad32;
  /* then: struct acuLaneWire[nlanes], struct acuShape[nshapes],
   * struct acuStep[nsteps] (padded to 8), uint16_t conns[nconns] (padded
   * to 8), struct acuOp[nops] */
};

/* Collectives over symmetric windows (symm.cu, backend/cuda_symm.c): every
 * rank's buffers at the same offset of NCCL_WIN_COLL_SYMMETRIC windows that
 * the host's GPUs have mapped; one kernel of `blocks` blocks, no FIFO. The
 * barrier pads sit in each rank's segment after the op word:
 * pad[block * ACU_SYMM_MAX_RANKS + source], then the epochs [block], the LL
 * epochs [block], then the LL lines [block][parity][source][line] that
 * peers store into (16 bytes: two 4-byte halves of data, each with the flag).
 * Small collectives (ACU_SYMM_LL_*) need no barrier: each rank stores its
 * lines into its peers' LL areas and polls its own. */
#define ACU_SYMM_MAX_RANKS 8
#define ACU_SYMM_MAX_BLOCKS 128
#define ACU_SYMM_LL_BLOCKS 128
#define ACU_SYMM_LL_LINES 1024 /* per block, parity and source: 8 KB of data */
#define ACU_SYMM_LL128_LINES (ACU_SYMM_LL_LINES / 8 - 1) /* LL128 lines there, from its first 128-byte boundary */
enum {
  ACU_SYMM_AR1 = 0, ACU_SYMM_AR2, ACU_SYMM_AG, ACU_SYMM_RS, /* over windows, between two barriers */
  ACU_SYMM_ST_AR, ACU_SYMM_ST_AG, ACU_SYMM_ST_RS,           /* any buffers: through the staging areas */
  ACU_SYMM_LL_AR, ACU_SYMM_LL_AG, ACU_SYMM_LL_RS,           /* any buffers: LL lines, no barrier */
  ACU_SYMM_LL_BC, ACU_SYMM_LL_RED,                          /* rooted (broadcast, reduce): LL lines one way */
  ACU_SYMM_LL_A2A,                                          /* all-to-all: block p of my input to peer p */
  ACU_SYMM_LL_AR2,                                          /* all-reduce, two-shot: chunk q to rank q, sums back */
  ACU_SYMM_LL_BC2, ACU_SYMM_LL_RED2                         /* two-shot broadcast (root scatters, all gather), reduce */
};
struct acuSymm {
  char* in[ACU_SYMM_MAX_RANKS];   /* every rank's input, as mapped here */
  char* out[ACU_SYMM_MAX_RANKS];  /* every rank's output */
  char* uin;           /* staged (ACU_SYMM_ST_*): this rank's input and output; in[q] = out[q] = q's staging */
  char* uout;
  uint64_t* pads[ACU_SYMM_MAX_RANKS];
  const uint64_t* mailboxes[ACU_SYMM_MAX_RANKS]; /* peers' mailbox words (op word at +1); mine NULL */
  uint64_t* epoch;     /* this rank's barrier counts per block */
  uint64_t* opWord;    /* this rank's op word */
  struct acuShared* shared;
  uint64_t timeoutNs;  /* 0 = wait forever */
  uint64_t count;      /* all-reduce: elements; reduce-scatter: elements per rank; all-gather: bytes per rank (LL: bytes, all-to-all: per peer) */
  uint64_t chunk;      /* two-shot all-reduce: elements each rank reduces (a whole number of vectors) */
  uint32_t sig, collSeq; /* as acuPhase */
  int32_t nranks, rank;
  uint8_t algo;        /* ACU_SYMM_* */
  uint8_t type;        /* ncclDataType_t: float, half or bfloat16 (reductions) */
  uint8_t vec;         /* every pointer and rank offset a multiple of 16 bytes */
  uint8_t proto;       /* two-shot LL kernels: 0 LL lines, 1 LL128 lines (NVLink only) */
  int32_t root;        /* ACU_SYMM_LL_BC, ACU_SYMM_LL_RED */
  uint8_t xptr;        /* ACU_SYMM_AR2/AG/RS on buffers outside windows, every rank in one process: 1, this
                          rank offers its own buffers, 2, its staging area (buffers its peers cannot reach:
                          copied in and out as the staged kernels do); in[rank] is my staging area, out[q]
                          q's pointer slots (ACU_SYMM_XPTR_OFF), where each block leaves what it offers
                          before the first barrier; the kernel reads every rank's offer after it */
};
#define ACU_SYMM_PAD_BYTES (ACU_SYMM_MAX_BLOCKS * ACU_SYMM_MAX_RANKS * 8 + 2 * ACU_SYMM_MAX_BLOCKS * 8)
#define ACU_SYMM_LL_BYTES ((size_t)ACU_SYMM_LL_BLOCKS * 2 * ACU_SYMM_MAX_RANKS * ACU_SYMM_LL_LINES * 16)

/* Send/recv on one host (symm.cu acuLaunchP2p, backend/cuda_p2p.c): a
 * message of at most ANYCCL_CUDA_SYMM_P2P bytes (ACU_P2P_LL_MAX at most)
 * to a peer whose segment is mapped here goes as LL lines into the
 * receiver's p2p area: [source][parity][ACU_P2P_LINES], line 0 a header
 * {bytes, flag, bytes, flag}, then the data lines. The flag is the
 * message's number on that (sender, receiver) pair, from 1; message u
 * uses parity u & 1, and its sender first waits until the receiver freed
 * message u - 2 of that parity (it stores u into the sender's freed word
 * once every block of it read its lines). The control words (ACU_P2P_*,
 * uint64_t indices) precede the lines; the counters advance on the device,
 * so graph replays stay in step. */
#define ACU_P2P_LL_MAX (1u << 20)
#define ACU_P2P_LINES (ACU_P2P_LL_MAX / 8 + 8)
#define ACU_P2P_MAX_OPS 32
enum {
  ACU_P2P_SENT = 0,                                  /* [peer]: messages sent to peer */
  ACU_P2P_RECVD = ACU_SYMM_MAX_RANKS,                /* [peer]: messages received from peer */
  ACU_P2P_FREED = 2 * ACU_SYMM_MAX_RANKS,            /* [peer][parity]: the receiver peer freed this message */
  ACU_P2P_DONE = 4 * ACU_SYMM_MAX_RANKS,             /* [peer][parity] as uint32_t: blocks done (atomicInc) */
  ACU_P2P_TICKET = 6 * ACU_SYMM_MAX_RANKS,           /* uint32_t: blocks of the kernel done */
  ACU_P2P_CTL_WORDS = 512
};
#define ACU_P2P_BYTES ((size_t)ACU_P2P_CTL_WORDS * 8 + (size_t)ACU_SYMM_MAX_RANKS * 2 * ACU_P2P_LINES * 16)
#define ACU_P2P_OFF ((64 + ACU_SYMM_PAD_BYTES + ACU_SYMM_LL_BYTES + 255) / 256 * 256)
enum { ACU_P2P_OP_SEND = 0, ACU_P2P_OP_RECV, ACU_P2P_OP_COPY };
struct acuP2pOp {
  uint64_t src, dst;   /* send: src; recv: dst; copy: both. recv: src = the peer's FIFO to me
                        * (its struct acuConn in the device table) when the group receives nothing
                        * else from the peer, else 0: a slot there is a mismatch */
  uint32_t bytes;
  int16_t peer;
  uint8_t kind;        /* ACU_P2P_OP_* */
  uint8_t nb;          /* its blocks */
  uint16_t b0;         /* its first block */
  uint16_t idx;        /* earlier ops of this kernel with the same peer and kind (send, recv) */
  uint32_t pad;
};
struct acuP2p {
  uint64_t* ctl;                        /* my control words (my segment + ACU_P2P_OFF) */
  uint64_t* peerCtl[ACU_SYMM_MAX_RANKS]; /* each peer's, as mapped here (NULL: not used) */
  const uint64_t* mailbox;              /* my mismatch mailbox (a peer's poison) */
  struct acuShared* shared;
  uint64_t timeoutNs;
  int32_t rank, nops;
  struct acuP2pOp ops[ACU_P2P_MAX_OPS];
};

/* After the p2p lines, the pointer slots (ACU_SYMM_MAX_BLOCKS x {in, out}):
 * where each block of a kernel that reads its peers' own buffers (acuSymm
 * xptr) leaves the addresses it offers them. Then the staging area
 * (ANYCCL_CUDA_SYMM_STAGE bytes): mid-size collectives on buffers outside
 * windows copy their input there, reduce or gather over the peers' areas,
 * and copy the result out. Offsets from the mailbox. */
#define ACU_SYMM_XPTR_OFF ((ACU_P2P_OFF + ACU_P2P_BYTES + 255) / 256 * 256)
#define ACU_SYMM_XPTR_BYTES (ACU_SYMM_MAX_BLOCKS * 16)
#define ACU_SYMM_STAGE_OFF (ACU_SYMM_XPTR_OFF + ACU_SYMM_XPTR_BYTES)

/* Blob capacities. A launch takes the kernel of the smallest size class that
 * holds its blob (1, 2, 4, 8, 16 or 32 KB: exec.cu): the GPU copies the whole
 * declared parameter size before a kernel starts, about 1 us per KB. Large
 * parameters (over 4 KB) need CUDA 12.1+ on sm_70+. */
#define ACU_BLOB_TINY 1024
#define ACU_BLOB_SMALL 4000
#define ACU_BLOB_LARGE 32000
#define ACU_THREADS 512

/* In C (the core) the functions below are weak references: a libnccl built
 * without nvcc, and the unit-test archive, have none (acuDeviceCount is then
 * NULL and the cuda backend is off). */
#if defined(__cplusplus)
#define ACU_FN
#else
#define ACU_FN __attribute__((weak))
#endif

/* ---- runtime (src/cuda/rt.cu): the real CUDA runtime, linked statically --- */
ACU_FN int acuDeviceCount(void); /* 0 when there is no driver or no GPU */
ACU_FN const char* acuErrorString(int err);
ACU_FN int acuGetDevice(int* dev);
ACU_FN int acuSetDevice(int dev);
ACU_FN int acuCtxGet(void** ctx); /* the thread's current context, NULL if none */
ACU_FN int acuCtxSet(void* ctx);
ACU_FN int acuGetDeviceCount(int* n);
ACU_FN int acuDeviceGetPCIBusId(char* busId, int len, int dev);
ACU_FN int acuLaunchHostFunc(void* stream, void (*fn)(void*), void* arg);
ACU_FN int acuMalloc(void** p, size_t size);
ACU_FN int acuFree(void* p);
ACU_FN int acuStreamSynchronize(void* stream);
ACU_FN int acuEventCreateWithFlags(void** ev, unsigned flags);
ACU_FN int acuEventRecord(void* ev, void* stream);
ACU_FN int acuStreamWaitEvent(void* stream, void* ev, unsigned flags);
ACU_FN int acuEventDestroy(void* ev);
ACU_FN int acuStreamGetDevice(void* stream, int* dev);
ACU_FN int acuStreamIsCapturing(void* stream);              /* 1 while captured into a graph */
ACU_FN int acuIpcGetMemHandle(void* handle64, void* p);
ACU_FN int acuIpcOpenMemHandle(void** p, const void* handle64);
ACU_FN int acuIpcCloseMemHandle(void* p);
/* src/cuda/vmm.cu: ncclMemAlloc's allocations (virtual memory management) and flat maps of peers' ones */
ACU_FN int acuVmmAlloc(void** p, size_t size); /* cudaErrorNotSupported: no VMM here (use cudaMalloc) */
ACU_FN int acuVmmFree(void* p);                /* 1: not an acuVmmAlloc allocation */
ACU_FN int acuVmmFind(const void* p, void** base, size_t* size, int* exportable);
ACU_FN int acuVmmFindId(const void* p, void** base, size_t* size, int* exportable, uint64_t* id);
ACU_FN int acuVmmExport(const void* base, int* fd);
ACU_FN int acuVmmMapFlat(int dev, int n, void* const* bases, const int* fds, const size_t* sizes, size_t stride,
                         void** flat);
ACU_FN void acuVmmUnmapFlat(void* flat, int n, const size_t* sizes, size_t stride);
ACU_FN int acuPtrPeerReachable(const void* p); /* 1: ncclMemAlloc or cudaMalloc memory (peers of one process
                                                   with peer access can use the pointer), 0: other memory */
ACU_FN int acuMemGetAddressRange(const void* p, void** base, size_t* size); /* the allocation p lies in */
ACU_FN int acuMemsetD(void* p, int v, size_t n);                    /* synchronous */
ACU_FN int acuMemcpyHtoD(void* dst, const void* src, size_t n);     /* synchronous */
ACU_FN int acuMemcpyDtoH(void* dst, const void* src, size_t n);     /* synchronous */
ACU_FN int acuHostAllocMapped(void** host, void** dev, size_t n);
ACU_FN int acuFreeHost(void* p);
ACU_FN int acuHostRegister(void* p, size_t n, void** dev);
ACU_FN int acuHostUnregister(void* p);
ACU_FN int acuEnablePeer(int dev, int peerDev);                     /* 0 or already enabled */
ACU_FN int acuCanAccessPeer(int dev, int peerDev);
ACU_FN int acuDeviceSynchronize(void);
ACU_FN int acuPointerIsDevice(const void* p, int* dev);             /* 1 if device/managed memory */
/* for the one-sided layer (src/onesided): copies on a proxy stream */
ACU_FN int acuMemcpy(void* dst, const void* src, size_t n);         /* synchronous, cudaMemcpyDefault */
ACU_FN int acuMemcpyAsync(void* dst, const void* src, size_t n, void* stream);
ACU_FN int acuStreamCreateNonBlocking(void** stream);
ACU_FN int acuStreamDestroy(void* stream);
ACU_FN int acuEventQuery(void* ev);                                 /* 0: complete */
/* cuStreamWriteValue64: `value` stored at addr (device memory, here or a
 * peer's mapped here) once the stream's earlier work completed, after a
 * fence; cudaErrorNotSupported where the driver lacks stream memory ops */
ACU_FN int acuStreamWriteValue64(void* stream, void* addr, uint64_t value);
/* cudaThreadExchangeStreamCaptureMode: sets `mode` (2: relaxed) for this thread, returns the old one */
ACU_FN int acuCaptureModeExchange(int mode);

/* ---- executor (src/cuda/exec.cu) ---------------------------------------- */
/* Launch one phase blob on `stream` with `grid` blocks; returns a CUDA error. */
ACU_FN int acuLaunchPhase(const struct acuPhase* blob, void* stream);
/* Launch a symmetric-window collective (symm.cu). */
ACU_FN int acuLaunchSymm(const struct acuSymm* a, int blocks, int threads, void* stream);
/* Launch the LL send/recv kernel (symm.cu). */
ACU_FN int acuLaunchP2p(const struct acuP2p* a, int blocks, int threads, void* stream);

#ifdef __cplusplus
}
#endif

#endif
