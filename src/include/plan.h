/* Schedules: an algorithm emits, once per operation, a small program of
 * steps as data; each executor interprets it (cpu: host loop; sim: timed
 * flows; cuda: one block per lane). See docs/architecture.md.
 *
 * A plan is a sequence of phases run one after the other; a phase is a set
 * of lanes that progress concurrently; a lane is either
 *   - a STEP lane: a step program repeated over slices of a block range
 *     (rings, chains, direct one-shot), or
 *   - a P2P lane: a queue of contiguous transfers to or from one peer. */
#ifndef ANYCCL_PLAN_H
#define ANYCCL_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "reduce.h"
#include "transport.h"

enum { BUF_NONE = 0, BUF_IN, BUF_OUT, BUF_SCRATCH };

/* One step moves one slice of block `chunk`:
 *   v   = (recv >= 0 ? recv slot : in0) [OP in1]
 *   out = v            (if out != BUF_NONE)
 *   send slot = v      (if send >= 0)
 * Reading BUF_IN under a PreMulSum op applies the scalar (own contribution);
 * writing BUF_OUT under SumPostDiv divides (final result). */
struct anycclStep {
  int8_t recv;   /* lane conn index, or -1 */
  int8_t send;   /* lane conn index, or -1 */
  uint8_t in0;   /* buffer when recv < 0 */
  uint8_t in1;   /* second operand, or BUF_NONE */
  uint8_t out;
  uint8_t pad;
  int16_t chunk;    /* block whose length bounds the step (lane geometry) */
  int16_t inChunk;  /* block of BUF_IN read */
  int16_t outChunk; /* block of BUF_OUT read or written */
};

#define ANYCCL_MAX_LANE_CONNS 64

struct anycclP2pOp {
  char* ptr;
  size_t bytes;
};

enum { LANE_STEPS = 0, LANE_P2P_SEND, LANE_P2P_RECV, LANE_COPY };

struct anycclLane {
  int kind;
  /* --- LANE_STEPS --- */
  int nsteps;
  struct anycclStep* steps;      /* one slice's program */
  struct anycclConn* conns[ANYCCL_MAX_LANE_CONNS];
  /* Geometry: the data is cut into blocks of lenStride elements (the last
   * ones shorter or empty: len(c) = clamp(lenTotal - c*lenStride, 0,
   * lenStride)). The lane covers offsets [begin, end) within every block,
   * `slice` elements per step. Block c of BUF_IN starts at c*inStride, of
   * BUF_OUT at c*outStride. */
  size_t lenTotal, lenStride, inStride, outStride;
  size_t begin, end, slice;
  char* scratch;                 /* slice-sized, for BUF_SCRATCH */
  /* --- P2P lanes and LANE_COPY --- */
  struct anycclConn* conn;
  int nops;
  struct anycclP2pOp* ops;       /* LANE_COPY: ops[2i] = src, ops[2i+1] = dst */
  /* --- executor state --- */
  size_t pos;                    /* STEPS: current slice offset; P2P: op index */
  size_t sub;                    /* P2P: byte offset within op */
  int cur;                       /* STEPS: current step */
  int done;
  /* receiving into the user's buffer (cpu executor): the next message of
   * the lane's network receive end not yet bound, and the step (bcur, bpos)
   * or op (bpos, bsub) that will take it; bind: 1 active, 0 off, 2 active
   * but not over the phase's input (an in-place all-gather) */
  int bind, bcur;
  size_t bpos, bsub;
  uint64_t bmsg;
  /* --- ANYCCL_TRACE (cpu executor) --- */
  double trWaitT;                /* when a step first found its slot not ready (us), or 0 */
  int trWaitRecv;                /* ... waiting for the peer's data (else for a free slot) */
  int trSends, trRecvs;          /* sends and receives done (the trace's step numbers) */
};

struct anycclPhase {
  /* operation data common to the lanes */
  anycclRedOp op;
  const void* scalarPtr;         /* device-resident PreMulSum scalar: read when the phase runs */
  int reduce;                    /* 1 if steps with in1/recv+in reduce */
  size_t elemSize;
  char* in;
  char* out;
  int nlanes;
  struct anycclLane* lanes;
  struct anycclStep* steps;      /* owned step program (shared by lanes) */
  struct anycclP2pOp* p2pOps;    /* owned op array (shared by lanes) */
  const char* what;              /* for logs */
  /* Single-copy ("peer") form of the phase: when every rank's buffers can be
   * reached, the executor runs it instead of the lanes (which stay as the
   * fallback, so that all ranks agree at run time). */
  int peerFunc;                  /* FUNC_* + 1, or 0 */
  int root;
  size_t count;
  int func;                      /* FUNC_* (FUNC_SEND: a send/recv phase) */
  uint32_t tag;                  /* slot tag of a collective phase (executor) */
};

struct ncclComm;
struct anycclPlan {
  struct ncclComm* comm;
  int nphases;
  struct anycclPhase* phases;
  uint64_t seq;                  /* per-comm launch number */
};

void anycclPlanFree(struct anycclPlan* plan);

/* The all-reduce, reduce-scatter and all-gather ring programs a
 * communicator keeps (algo/schedule.c: they depend on nothing but the
 * rings; plans' lanes point into them): freed with the communicator. */
struct ncclComm;
void anycclRingProgsFree(struct ncclComm* comm);

struct anycclTask;
/* Algorithms (algo/schedule.c): one collective task -> one phase; all the
 * send/recv tasks of a group -> one phase. */
/* Connections a STEPS lane's program uses (1 + the largest index). */
int anycclLaneConns(const struct anycclLane* l);
ncclResult_t anycclAlgoPhase(struct ncclComm* comm, const struct anycclTask* t, struct anycclPhase* ph);
ncclResult_t anycclP2pPhase(struct ncclComm* comm, struct anycclTask** tasks, int ntasks, struct anycclPhase* ph);
const char* anycclFuncName(int func);

/* Single-copy phases (backend/cpu_peer.c): 1 if it ran, 0 if the ranks'
 * buffers cannot all be reached (run the lanes instead); errors in *res. */
int anycclCpuPeerPhase(struct ncclComm* comm, struct anycclPhase* ph, ncclResult_t* res);
void anycclPeerFree(struct ncclComm* comm);
/* Executor helpers shared by the cpu executor files. */
void anycclBellWait(struct anycclBell* b, uint32_t seen); /* futex sleep, 20 ms at most */
double anycclNowSec(void);                               /* CLOCK_MONOTONIC seconds */
/* A spin-wait's pause (x86 pause, arm yield). */
static inline void anycclCpuRelax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}
/* Ranks that call different operations (backend/cpu_mismatch.c). Detection
 * rides on what the ranks exchange anyway: slot size words carry a tag of
 * the operation, every collective publishes its signature in the exchange
 * entry, and waits compare them on their slow path only. */
void anycclOpPublish(struct ncclComm* comm, struct anycclPhase* ph); /* at a phase's start: ph->tag, record */
uint32_t anycclP2pTag(size_t bytes);                                  /* tag of a send of `bytes` bytes */
uint64_t anycclMix64(uint64_t x);                                     /* a 64-bit hash mix */
/* Hash of a collective phase's signature (func, count, type, op, root). */
uint64_t anycclSigHash(const struct ncclComm* comm, const struct anycclPhase* ph);
/* Slow path of a wait: ncclInvalidUsage (after one WARN) if a local peer
 * reported a mismatch, runs the same collective with other arguments, or a
 * FIFO holds data of this collective number with another signature. */
ncclResult_t anycclMismatchPoll(struct ncclComm* comm, const struct anycclPhase* ph);
/* A lane found a slot whose size word is not `want`: 1 if it is a remote
 * peer's signature that agrees (consume it and go on), else 0 after one
 * WARN and the report. */
int anycclMismatchSlot(struct ncclComm* comm, const struct anycclPhase* ph, const struct anycclConn* c,
                       uint64_t want, uint64_t got);
/* A collective stalled: send my signature to my remote peers (once a phase),
 * whose slow path compares it (all of them may be waiting, no data moving). */
void anycclSigSend(struct ncclComm* comm, const struct anycclPhase* ph);
/* Single-copy: 1 if every rank's entry describes the same collective as
 * mine (and none left the exchange), else 0 after one WARN. */
int anycclPeerAgree(struct ncclComm* comm, const struct anycclPhase* ph, uint64_t seq);
/* The proxy received a mismatch report from a remote peer. */
void anycclMismatchRemote(struct ncclComm* comm, int peer, const char* text, size_t len);
/* ncclCommGetAsyncError: ncclInvalidUsage once a local peer reported one. */
ncclResult_t anycclCpuAsyncError(struct ncclComm* comm);
/* ncclRemoteError (with a WARN) if a same-host peer's process is gone. */
ncclResult_t anycclCheckPeers(struct ncclComm* comm, const char* what);

/* The cpu executor: run a plan to completion (called on the stream). */
void anycclCpuExecute(void* plan);

#endif
