/* The communicator. */
#ifndef ANYCCL_COMM_H
#define ANYCCL_COMM_H

#include <pthread.h>
#include <stdint.h>
#include "nccl.h"
#include "plan.h"
#include "reduce.h"
#include "transport.h"

#define ANYCCL_MAX_CHANNELS 128
#define ANYCCL_MAX_USER_OPS 64

enum { COMM_INITIALIZING = 0, COMM_READY, COMM_FINALIZED, COMM_FAILED };

/* What a collective or point-to-point call asked for. */
typedef enum {
  FUNC_ALLREDUCE = 0, FUNC_BROADCAST, FUNC_REDUCE, FUNC_ALLGATHER, FUNC_REDUCESCATTER,
  FUNC_ALLTOALL, FUNC_GATHER, FUNC_SCATTER, FUNC_SEND, FUNC_RECV, FUNC_COUNT
} anycclFunc;

struct anycclTask {
  anycclFunc func;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root; /* root or peer */
  cudaStream_t stream;
  anycclRedOp redop;       /* resolved when the call was made (the op may be destroyed before the group ends) */
  const void* scalarPtr;   /* device-resident PreMulSum scalar, read when the op runs */
  struct anycclTask* next;
};

struct anycclUserOp {
  int used;
  ncclDataType_t type;
  ncclScalarResidence_t residence;
  uint64_t scalar;       /* host-immediate value */
  const void* devScalar; /* device-resident scalar, read when the op runs */
};

struct anycclIpcMap {
  int peer;
  cudaIpcMemHandle_t handle;
  char* base;
};

struct anycclExec;
struct ncclComm {
  int rank, nRanks, cudaDev;
  const struct anycclExec* exec; /* the backend's executor (exec.h) */
  char busId[32];
  ncclConfig_t config;
  int blocking;

  struct bootstrapState* bootstrap;
  uint32_t abortFlag;            /* set by ncclCommAbort; watched by every wait */
  uint32_t revoked;              /* ncclCommRevoke / shrink-abort: pending work ends */
  uint64_t execNext;             /* seq of the next plan allowed to run (atomic) */
  int state;                     /* COMM_* (atomic) */
  ncclResult_t asyncResult;      /* atomic: ncclInProgress while initialising */
  pthread_t initThread;
  int initThreadStarted;

  /* peers and connections */
  struct anycclPeerInfo* peerInfo;
  int localRanks;                /* ranks on this host */
  int localRank;                 /* my index among them */
  int nHosts;                    /* distinct hosts among the ranks */
  int nvlinkAll;                 /* one host, NVLink between every pair of GPUs (cuda: anycclCudaNvlinkAll; sim: 1) */
  int nChannels;
  int* ringOrder;                /* [c * nRanks + i]: rank at position i of ring c (same on all ranks) */
  int ringPos[ANYCCL_MAX_CHANNELS]; /* my position in ring c */
  signed char ringLikeFirst[ANYCCL_MAX_CHANNELS]; /* ring c is ring 0: 1, is not: -1, not compared yet: 0 */
  struct anycclRingProgs* ringProgs; /* the ring programs built so far (algo/schedule.c), or NULL */
  int nslots;
  size_t slotBytes;
  struct anycclSegment* segment;
  struct anycclBell* bell;       /* mine, inside my segment */
  void** peerMaps;               /* transport handle per peer */
  const struct anycclTransport** peerTransport;
  struct anycclConn ringSend[ANYCCL_MAX_CHANNELS];
  struct anycclConn ringRecv[ANYCCL_MAX_CHANNELS];
  struct anycclConn* p2pSend;    /* [nRanks] */
  struct anycclConn* p2pRecv;    /* [nRanks] */
  char* scratch;                 /* slot-sized scratch, one per channel */
  struct anycclProxy* proxy;     /* network progress (NULL when no peer is remote) */
  char** peerBase;               /* [nRanks]: mapped segment of each local peer (NULL for remote) */
  uint64_t peerSeq;              /* peer phases run so far (executor side) */
  struct anycclIpcMap* ipcMaps;  /* peers' buffers opened through IPC, cached */
  int nIpcMaps, capIpcMaps;
  size_t peerThreshold;          /* bytes from which single-copy phases are used */
  uint64_t collNum;              /* collective phases run so far (executor side) */
  uint32_t mismatchWarned;       /* this rank printed its mismatch WARN (atomic) */

  /* work */
  struct anycclTask* taskHead;   /* tasks of the open group */
  struct anycclTask* taskTail;
  struct ncclComm* groupNext;    /* comms with tasks in the open group */
  struct ncclComm* launchNext;   /* group end: the next comm of the same device */
  int inGroupList;
  uint64_t launches;
  int inflight;                  /* plans launched, not yet finished (atomic) */
  int running;                   /* of those, plans a stream has started (under lock) */
  int orphaned;                  /* aborted with plans still queued: the last one frees the comm */
  pthread_mutex_t lock;
  pthread_cond_t idle;           /* signalled when inflight or running drops to 0 */

  struct anycclUserOp userOps[ANYCCL_MAX_USER_OPS];
  int64_t opTimeoutSec;
  int64_t peerCheckMs;
  int spinCount;
  int yieldSpin;                 /* more ranks on this host than cores: spin by yielding */
  int64_t zcopyMin;              /* cpu: smallest slice sent to another host from user memory (-1: never) */
  size_t directThreshold;
  size_t meshAgMax;              /* all-gather bytes up to which the mesh form runs (GPUs) */
  int forceAlgo;                 /* -1 auto, else ANYCCL_ALGO_* */

  /* cuda backend (backend/cuda_backend.c) */
  int cuda;                      /* this communicator runs on GPUs */
  char* devSeg;                  /* my device segment (heads + receive FIFOs) */
  size_t devSegSize;
  char** devPeerBase;            /* [nRanks]: each rank's segment as mapped here */
  int* devPeerIpc;               /* [nRanks]: mapped through CUDA IPC (close on free) */
  struct acuConn* devConns;      /* device connection table */
  int nDevConns;
  size_t sliceBytes;             /* simple-protocol step size cap */
  size_t p2pSliceBytes;          /* send/recv and all-to-all: bytes a FIFO step moves at most */
  /* How many ring channels a collective uses (ringLanes): blockBytes /
   * channelBytes, at least baseChannels, and never so many that a channel
   * gets less than minChannelBytes of each block. */
  size_t minChannelBytes;
  size_t channelBytes;
  size_t chainBytes, chainBytesPast64; /* the same for broadcast/reduce chains beyond 2 ranks */
  int baseChannels;
  size_t llThreshold;            /* messages up to this many bytes use the LL protocol */
  int p2pChannels;               /* FIFOs (and GPU blocks) per peer pair for p2p and direct lanes */
  char* devScratch;              /* device twin of scratch */
  struct acuShared* cuShared;    /* host-mapped abort/error words */
  struct acuShared* cuSharedDev;
  struct acuTimeline* cuTimeline;    /* ANYCCL_CUDA_TIMELINE: host view ... */
  struct acuTimeline* cuTimelineDev; /* ... and device view, or NULL */
  int cuErrReported;
  uint32_t cuCollSeq;             /* collective phases launched (the op word's number; never 0 once used) */
  uint32_t cuCurCollSeq;          /* the phase being encoded: its number, 0 for send/recv */
  uint32_t cuPendTag;             /* network proxy: the latest collective tag from another host, unchecked */
  int cuPendPeer;                 /* ... and its sender */
  void* cuMbxStream;             /* private non-blocking stream: async reads of the mismatch mailbox */
  void* cuMbxEvent;
  void* cuP2pStream;             /* side stream: a group's LL messages beside its FIFO ones */
  void* cuP2pFork, *cuP2pJoin;   /* events of the fork and join */
  int cuMbxPending;              /* a mailbox read is in flight */
  uint32_t cuMbxBusy;            /* a thread is polling (atomic) */
  double cuMbxLast;              /* when the last read was issued (anycclNowSec) */
  int cuFlags;                   /* ACU_FLAG_* for every phase */
  cudaStream_t checkedStream;    /* last stream found to be on cudaDev */
  unsigned char* blob;           /* ACU_BLOB_LARGE bytes: a phase being encoded */
  struct encoder* encoder;       /* the arrays of a phase being encoded (cuda_backend.c) */
  void* cuLastStream;            /* the stream of the last launch */
  void* cuOrderEvent;            /* recorded after each launch: orders the next one on another stream */
  int cuEventValid;              /* cuOrderEvent marks the last launch (it was not captured) */
  struct anycclWin* windows;     /* device API windows (backend/cuda_devcomm.c) */
  struct anycclSymmMap* symmMaps; /* peers' ncclMemAlloc allocations mapped here (backend/cuda_symm_map.c) */
  struct anycclDevRec* devComms; /* device communicators */
  struct anycclGinHost* gin;     /* GIN to other hosts: the proxy of the device communicators (backend/cuda_gin.c) */
  int nDevCommsMade;             /* device communicators made so far (their GIN numbers) */
  struct anycclSimWorld* sim;    /* sim backend: the process-wide world of this communicator */
  struct anycclSimPlace* simPlace; /* sim: where a split's or shrink's ranks sit, until its setup takes it */
  struct anycclSimShrinks* simShrinks; /* sim: ncclCommShrink calls made on it, per excluded set (names new worlds) */
  struct anycclTraceBuf* trace;  /* ANYCCL_TRACE records (cpu, cuda), written at destroy; or NULL */
  int tracePid;                  /* this rank's pid in the trace */
  struct anycclConn* cuNetConns; /* network connection ends (the proxy's view), pinned host FIFOs */
  int cuNetCount;
  char* cuNetStaging;            /* one pinned, device-mapped block: cuNetCount FIFOs */
  int portServices;              /* one-sided proxy services made on it so far (src/onesided; atomic) */
};

/* Host-time profile of launches (ANYCCL_PROFILE_HOST=1; group.c). A
 * section's nanoseconds are added with anycclProfAdd(section, since). */
enum {
  PROF_SUBMIT, PROF_GROUPEND, PROF_BUILD, PROF_SETDEV, PROF_ENCODE, PROF_KERNEL, PROF_ORDER, PROF_FREE, PROF_ASYNCERR,
  /* the one-sided proxy (src/onesided): its loop's parts, and a network
   * message's life: staged copy into a bounce buffer, queued to sent,
   * arrived to copied out of a bounce buffer */
  PROF_PORT_TRIG, PROF_PORT_NET, PROF_PORT_CUDA, PROF_PORT_SLEEP, PROF_PORT_D2H, PROF_PORT_SEND, PROF_PORT_H2D,
  PROF_COUNT
};
uint64_t anycclProfNow(void);
void anycclProfAdd(int section, uint64_t since);
void anycclProfInit(void);

/* cuda backend entry points (backend/cuda_backend.c) */
struct acuConn;
struct acuShared;
ncclResult_t anycclCudaSetup(struct ncclComm* comm);
void anycclCudaFree(struct ncclComm* comm);
/* device API (backend/cuda_devcomm.c) */
ncclResult_t anycclWindowRegister(struct ncclComm* comm, void* buff, size_t size, ncclWindow_t* win, int flags);
ncclResult_t anycclWindowDeregister(struct ncclComm* comm, ncclWindow_t win);
void anycclDevFreeAll(struct ncclComm* comm);
struct ncclDevComm;
struct ncclDevCommRequirements;
ncclResult_t anycclDevCommCreate(struct ncclComm* comm, const struct ncclDevCommRequirements* reqs,
                                 struct ncclDevComm* out);
ncclResult_t anycclDevCommDestroy(struct ncclComm* comm, const struct ncclDevComm* devComm);
void anycclLsaTeam(const struct ncclComm* comm, int* lsaSize, int* lsaRank);
/* GIN to other hosts through the proxy (backend/cuda_gin.c): setup is
 * collective (once per communicator); windows are registered in the same
 * order on every rank (*mem -1 while the communicator has no GIN proxy). */
ncclResult_t anycclGinSetup(struct ncclComm* comm);
ncclResult_t anycclGinRegister(struct ncclComm* comm, void* ptr, size_t bytes, int* mem);
void anycclGinUnregister(struct ncclComm* comm, int mem);
ncclResult_t anycclGinAttach(struct ncclComm* comm, int index, int nSignals, int nCounters, struct ncclDevComm* out);
void anycclGinFree(struct ncclComm* comm);
struct anycclProxyService* anycclGinService(struct ncclComm* comm); /* its proxy service, or NULL */
/* [p, p + bytes) inside an NCCL_WIN_COLL_SYMMETRIC window whose team is the
 * whole communicator: peer[q] = the same place on rank q, as mapped here. */
int anycclWinSymmetric(struct ncclComm* comm, const void* p, size_t bytes, char** peer);
/* The path the cuda backend takes for a collective phase when every rank's
 * GPU is on one host and mapped (backend/cuda_symm.c; the sim backend makes
 * the same choice): a function of the call's arguments, the communicator's
 * forced algorithm and protocol and the ANYCCL_CUDA_SYMM* parameters, so
 * every rank decides alike. Buffers in symmetric windows aside (the caller
 * checks them): NONE: the FIFO path; LL: one LL kernel (c->blocks blocks);
 * STAGED: the staged two-barrier kernels; WINDOW_ONLY: the window kernels
 * if the buffers lie in symmetric windows, else the FIFO path. */
enum { ANYCCL_SYMM_NONE = 0, ANYCCL_SYMM_LL = 1, ANYCCL_SYMM_STAGED = 2, ANYCCL_SYMM_WINDOW_ONLY = 3, ANYCCL_SYMM_P2P = 4 };
/* Send/recv (P2P: a send/recv phase with at least one such message): a
 * message of `bytes` goes as LL lines into the receiver's segment (the
 * p2p LL kernel) when this is 1, else through the FIFOs. Both ends of a
 * message decide alike from its size (ANYCCL_CUDA_SYMM_P2P, equal on every
 * rank), whatever else their groups hold. */
int anycclSymmP2pOp(const struct ncclComm* comm, size_t bytes);
/* The cuda backend's cuts (one GPU block each) of a p2p op of `bytes`, and
 * of a direct (one-shot) lane moving `bytes` (backend/cuda_backend.c); the
 * sim backend caps such lanes at that many blocks' rate. */
int anycclP2pCuts(const struct ncclComm* comm, uint64_t bytes);
int anycclDirectCuts(const struct ncclComm* comm, uint64_t bytes);
/* The p2p LL kernel's blocks for one op of a kernel of nops ops (256+
 * lines a block, copies 4 KB a block; at most 32, and 128 in all). */
int anycclSymmP2pBlocks(size_t bytes, int nops, int copy);
struct anycclSymmChoice {
  size_t bytes;            /* per-rank message: the vector, or (all-gather, reduce-scatter) a rank's block */
  size_t inBytes, outBytes;
  int rooted;              /* broadcast or reduce */
  int blocks;              /* LL: the kernel's blocks */
  int twoShot;             /* LL, 3+ ranks: all-reduce as reduce-scatter then all-gather in LL lines;
                              broadcast as scatter then all-gather; reduce as reduce-scatter then gather */
  int ll128;               /* two-shot: in LL128 lines (NVLink) */
  int inPlaceOnly;         /* staged: past the sizes that copy in and out; only on the ranks' own buffers,
                              else the FIFO path */
};
int anycclSymmPath(const struct ncclComm* comm, const struct anycclPhase* ph, struct anycclSymmChoice* c);
/* Symmetric-window collectives (backend/cuda_symm.c): 1 if the phase ran
 * that way (launched, or failed into *res), 0 to take the FIFO path. */
int anycclCudaSymm(struct ncclComm* comm, const struct anycclPhase* ph, void* stream, ncclResult_t* res);
/* Ranks in several processes, a captured staged call (backend/cuda_symm_map.c): the peers' buffers as mapped
 * here, their ncclMemAlloc allocations exchanged and mapped once. 2: peerIn/peerOut filled; 0: stage (every rank
 * decides alike); 1: failed into *res. Collective (a bootstrap all-gather). */
int anycclCudaSymmMapped(struct ncclComm* comm, const void* in, void* out, char** peerIn, char** peerOut,
                         ncclResult_t* res);
void anycclCudaSymmMapsFree(struct ncclComm* comm);
/* A send/recv phase's LL messages (anycclSymmP2pOp): 0 none (the FIFO
 * path for all), 1 all of them ran in the p2p LL kernel (or failed into
 * *res), 2 the LL kernel runs on the communicator's side stream, forked
 * from `stream`, and *rest is the phase without them: launch it on `stream`,
 * then anycclCudaP2pJoin (which frees *rest). */
int anycclCudaP2p(struct ncclComm* comm, const struct anycclPhase* ph, void* stream, struct anycclPhase* rest,
                  ncclResult_t* res);
ncclResult_t anycclCudaP2pJoin(struct ncclComm* comm, void* stream, struct anycclPhase* rest);
/* The device connection (struct acuConn) rank `peer` sends to me through
 * on p2p channel 0, or NULL. */
const void* anycclCudaP2pRecvConn(const struct ncclComm* comm, int peer);
/* The segment's mismatch mailbox (+0), op word (+8) and symmetric-kernel
 * barrier pads (+64) of rank q, as mapped here (cuda_exec.h). */
char* anycclCudaMailbox(const struct ncclComm* comm, int q);
size_t anycclCudaStageBytes(const struct ncclComm* comm); /* ANYCCL_CUDA_SYMM_STAGE for this rank count, rounded: the staging area in each segment, and the sizes that run in place */
size_t anycclCudaStageCopyBytes(const struct ncclComm* comm); /* the sizes that stage (copy in and out) */
size_t anycclCudaSymmLLBytes(const struct ncclComm* comm, int func); /* ANYCCL_CUDA_SYMM_LL for this rank count and collective */
size_t anycclCudaSymmLL2Bytes(const struct ncclComm* comm); /* ANYCCL_CUDA_SYMM_LL2 for this rank count (0: no two-shot) */
size_t anycclCudaSymmLL2RootedBytes(const struct ncclComm* comm, int func); /* ANYCCL_CUDA_SYMM_LL2_ROOTED likewise */
int anycclCudaSymmLL128(const struct ncclComm* comm);             /* two-shot kernels in LL128 lines */
int anycclCudaNvlinkAll(const struct ncclComm* comm);             /* for comm->nvlinkAll */
/* Number phase ph (cuda_backend.c: each collective phase its own number, send/recv 0), then its tag (cuda_exec.h). */
void anycclCudaNumberPhase(struct ncclComm* comm, const struct anycclPhase* ph);
uint32_t anycclCudaPhaseTag(const struct ncclComm* comm, const struct anycclPhase* ph);
/* The network proxy received a slot tagged `tag` from `peer` (0: none, look
 * again at the one kept): a collective tag of the collective number the GPU
 * runs, but another operation, is a mismatch (the kernels stop). */
void anycclCudaSlotTag(struct ncclComm* comm, int peer, uint32_t tag);
void anycclCudaAbort(struct ncclComm* comm);
ncclResult_t anycclCudaAsyncError(struct ncclComm* comm);
/* A remote peer reported a mismatch (proxy thread): the kernels stop as if poisoned by `peer`. */
void anycclCudaPoisoned(struct ncclComm* comm, int peer);
ncclResult_t anycclCudaLaunchPlan(struct ncclComm* comm, struct anycclPlan* plan, cudaStream_t stream);
ncclResult_t anycclCudaEncodeForTest(struct ncclComm* comm, const struct anycclPhase* ph, unsigned char* buf,
                                     size_t cap, int* planLane, int* cut);

enum { ANYCCL_ALGO_RING = 0, ANYCCL_ALGO_DIRECT = 1 };

/* A rank's exchange entry (single-copy buffers, current collective, mismatch
 * report) in its segment, as mapped here; only for local peers (peerBase[q]
 * is NULL for a remote one). */
static inline struct anycclXchg* anycclXchgOf(struct ncclComm* comm, int q) {
  return (struct anycclXchg*)(comm->peerBase[q] + 64);
}


/* Live communicator registry: a destroyed or bogus pointer is caught. */
void anycclCommRegister(struct ncclComm* comm);
void anycclCommUnregister(struct ncclComm* comm);
int anycclCommIsLive(const struct ncclComm* comm);

/* Argument check for API entry points: comm live, initialised, not aborted. */
ncclResult_t anycclCommCheck(struct ncclComm* comm, const char* fn, int needReady);

/* Work accounting. A plan is counted from launch (WorkStart) to its end
 * (WorkDone); it runs from RunBegin, called on the stream when it starts. */
void anycclCommWorkStart(struct ncclComm* comm);
void anycclCommRunBegin(struct ncclComm* comm);
void anycclCommWorkDone(struct ncclComm* comm);
void anycclCommWaitIdle(struct ncclComm* comm);
/* Stop without waiting for plans that have not started: wait for the running
 * ones (they see the stop flag within ~20 ms), then free the communicator now,
 * or, while plans are still queued on streams (behind other work), leave that
 * to the last of them (each one ends at once when it starts: it sees the
 * flag and touches no user buffer). The abort or revoke flag must be set. */
void anycclCommStopAndFree(struct ncclComm* comm);
void anycclCommWaitRunning(struct ncclComm* comm);
/* Free everything (init.c). */
void anycclCommFree(struct ncclComm* comm);
void anycclCommSetError(struct ncclComm* comm, ncclResult_t err);
/* Init finished with res: success only if no error arrived meanwhile. */
void anycclCommInitDone(struct ncclComm* comm, ncclResult_t res);
/* All-gather comm->peerInfo (this rank's entry filled in) and check what the
 * peers sent (wireCheckPeerInfo): ncclRemoteError, with a WARN, if corrupt. */
ncclResult_t anycclPeerInfoExchange(struct ncclComm* comm);

/* Groups and enqueue (group.c / enqueue.c) */
ncclResult_t anycclEnqueue(struct ncclComm* comm, const struct anycclTask* task);
ncclResult_t anycclGroupStartInternal(void);
ncclResult_t anycclGroupEndInternal(void);
int anycclGroupDepth(void);
/* ncclGroupSimulateEnd: the group ends as ncclGroupEnd, but its tasks are
 * modelled (the estimate into simInfo->estimatedTime) instead of launched. */
ncclResult_t anycclGroupSimulateEndInternal(ncclSimInfo_t* simInfo);
/* The modelled time (us) of the tasks on these communicators (linked by
 * groupNext), on any backend (sim/estimate.c); frees the tasks, launches
 * nothing. */
ncclResult_t anycclSimEstimateGroup(struct ncclComm* comms, float* us);
void anycclGroupSetError(ncclResult_t err);
/* Defer an init to the end of the group (ncclCommInitRank inside a group). */
ncclResult_t anycclGroupAddInit(struct ncclComm* comm, void* (*fn)(void*), void* arg);
/* Run fn(arg) now, or inside a group at its end (one thread per communicator,
 * each communicator's jobs in call order); fn owns arg. */
ncclResult_t anycclGroupAddJob(struct ncclComm* comm, ncclResult_t (*fn)(void*), void* arg);
ncclResult_t anycclLaunchPlan(struct ncclComm* comm, struct anycclPlan* plan, cudaStream_t stream);
ncclResult_t anycclBuildPlan(struct ncclComm* comm, struct anycclTask* tasks, struct anycclPlan** plan);

/* Pieces of init shared by the backends' setups (init.c). */
struct anycclPeerInfo;
void anycclCommPeerDefaults(struct anycclPeerInfo* me); /* channels and FIFO shape this rank asks for */
void anycclCommGeometry(struct ncclComm* comm);         /* FIFO shape, channels: from comm->peerInfo */
void anycclCommNetChannels(struct ncclComm* comm);      /* cap channels of GPU comms spanning hosts */
void anycclCommTuning(struct ncclComm* comm);           /* timeouts, thresholds, NCCL_ALGO */

/* The sim backend's init (sim/): one process holds every rank. */
ncclResult_t anycclSimUniqueId(ncclUniqueId* out);
ncclResult_t anycclSimCommSetup(struct ncclComm* comm, const ncclUniqueId* id);
/* ncclCommSplit and ncclCommShrink on the sim backend: the new world's id,
 * size, this rank's rank in it and where its ranks sit (the parent's GPUs),
 * for anycclSimCommSetup (through comm->simPlace). Split meets the parent's
 * other ranks (bounded by ANYCCL_BOOTSTRAP_TIMEOUT, ends on abort); shrink
 * needs no one. *place is NULL for NCCL_SPLIT_NOCOLOR. */
struct anycclSimPlace;
ncclResult_t anycclSimSplit(struct ncclComm* parent, int color, int key, int* nNew, int* newRank, ncclUniqueId* id,
                            struct anycclSimPlace** place);
ncclResult_t anycclSimShrink(struct ncclComm* parent, const char* excluded, ncclUniqueId* id,
                             struct anycclSimPlace** place);
void anycclSimPlaceFree(struct anycclSimPlace* p);
void anycclSimShrinksFree(struct ncclComm* comm);

/* Resolve op/type to the device op (user ops included). */
ncclResult_t anycclResolveOp(struct ncclComm* comm, ncclRedOp_t op, ncclDataType_t type, anycclRedOp* out);

#endif
