/* ANYCCL_TRACE: a Chrome/Perfetto trace (JSON object format) of what the
 * executors did, one format for all three backends (docs/simulation.md, "The
 * trace"): the sim backend writes its modelled times, the cpu backend host
 * times it takes around its steps, the cuda backend its kernels'
 * %globaltimer timeline (ANYCCL_CUDA_TIMELINE records) converted at destroy.
 *
 * Per rank (pid = rank; a process's later communicators or sim worlds: +
 * 1000000 * their index), tracks (tid):
 *   0          "collectives": one event per collective (phase) of a launch,
 *              named by the function (AllReduce, SendRecv...), args opCount
 *              (the launch number) and bytes
 *   1 + 2*l    "ch<l> send": the lane's span ("Lane"), with its sends
 *              "Send-<peer>-<step>" and the waits for a free slot before
 *              them ("BufferWait"), as NCCL's proxy profiler names them
 *   2 + 2*l    "ch<l> recv": "Recv-<peer>-<step>", and "RecvWait" (waiting
 *              for the peer's data) before them
 * step: the lane's step number within the operation. Args of sends and
 * receives: opCount, bytes, net (1 when the step crosses hosts). The sim
 * backend adds a process "links" (pid TRACE_LINKS_PID) with one counter per
 * link carrying traffic: its utilization in % of capacity.
 * Times: microseconds; sim: virtual time from 0; cpu: CLOCK_MONOTONIC;
 * cuda: %globaltimer (GPU clock). */
#ifndef ANYCCL_TRACE_H
#define ANYCCL_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "nccl.h"

#define TRACE_LINKS_PID 999999

enum { TR_COLL = 0, TR_LANE, TR_SEND, TR_RECV, TR_BUFWAIT, TR_RECVWAIT };

struct anycclTraceRec {
  double t0, t1;  /* microseconds */
  uint64_t op;    /* launch number (opCount) */
  double bytes;
  int32_t lane, peer, step;
  uint8_t kind;   /* TR_* */
  uint8_t func;   /* FUNC_* (TR_COLL) */
  uint8_t net;
  uint8_t pad;
};

/* The cuda backend: what GPU lane (block) `lane` of phase `phase` of launch
 * `seq` does, noted by the encoder at launch so that the kernels' timeline
 * records (seq, block, program step, when) can be named at destroy. */
struct anycclTraceGpuLane {
  uint32_t seq;
  uint16_t phase, lane;
  uint8_t func;
  uint8_t kind;        /* LANE_* */
  uint16_t nsteps;     /* STEPS lanes: the program's steps (their peers in peers[peerOff...]) */
  uint32_t peerOff;    /* 2 * nsteps entries: send peer, receive peer of each step (-1: none) */
  int32_t peer;        /* P2P lanes: the peer */
  double bytes;        /* the phase's bytes */
  double stepBytes;    /* bytes a step moves at most (STEPS), or the lane's bytes (P2P) */
};
/* One record of the kernels' timeline: the layout of cuda_exec.h's acuTimeRec. */
struct anycclTraceTl {
  uint64_t t;          /* ns */
  uint32_t seq;
  uint16_t lane;
  uint8_t step;        /* 254: a whole LL slice posted; 255: lane start/end */
  uint8_t what;        /* 0 start, 1 step's wait done, 2 step posted, 3 end */
};

/* A communicator's records (cpu and cuda backends), written at destroy. */
struct anycclTraceBuf {
  struct anycclTraceRec* rec;
  size_t n, cap;
  uint64_t dropped;
  int maxLane;
  /* cuda backend */
  struct anycclTraceGpuLane* gl;
  size_t ngl, capgl;
  int32_t* peers;
  size_t npeers, cappeers;
};

struct ncclComm;
/* ANYCCL_TRACE is set. */
int anycclTraceOn(void);
/* comm->trace, when the trace is on (cap: ANYCCL_TRACE_RECORDS); key: a
 * hash of the unique id (anycclTracePidBase). */
ncclResult_t anycclTraceAlloc(struct ncclComm* comm, uint64_t key);
/* A record slot of the buffer, or NULL when full (counted as dropped). */
static inline struct anycclTraceRec* anycclTraceNew(struct anycclTraceBuf* b) {
  if (b->n == b->cap) {
    b->dropped++;
    return NULL;
  }
  return &b->rec[b->n++];
}
void anycclTraceAddRec(struct anycclTraceBuf* b, int kind, double t0, double t1, uint64_t op, int lane, int peer,
                       int step, double bytes, int func, int net);
/* The cuda encoder: note a GPU lane of a launch (peers: 2 * nsteps entries,
 * send and receive peer of each step; NULL for P2P lanes). */
void anycclTraceGpuLaneAdd(struct anycclTraceBuf* b, const struct anycclTraceGpuLane* l, const int32_t* peers);
/* The kernels' timeline -> records (TR_COLL per phase, TR_LANE, sends and
 * receives between a step's wait and its post, the waits before them). */
void anycclTraceFromTimeline(struct anycclTraceBuf* b, const struct anycclTraceTl* tl, size_t n);
/* Write the communicator's records into the process's trace file and free
 * them (at destroy). */
void anycclTraceFlush(struct ncclComm* comm);

/* The process's trace file (opened at the first use; ANYCCL_TRACE with %h
 * and %p expanded), locked; NULL when the trace is off or the file cannot
 * be written (one WARN). Events written between lock and unlock; unlock
 * closes the JSON so that the file is complete after every unlock. */
FILE* anycclTraceLock(void);
void anycclTraceUnlock(FILE* f);
/* The pid of rank 0 of the communicator (or sim world) whose ranks share
 * `key` (a hash of the unique id): 0 for the process's first, 1000000 for
 * its second, and so on. */
int anycclTracePidBase(uint64_t key);
uint64_t anycclTraceKey(const void* id, size_t len); /* FNV-1a of the unique id */
/* Writers (between lock and unlock). */
void anycclTraceRecWrite(FILE* f, int pid, const struct anycclTraceRec* r);
void anycclTraceProcess(FILE* f, int pid, const char* name, int sortIndex);
/* names of the tracks of lanes fromLane..toLane (and of "collectives" when fromLane <= 0) */
void anycclTraceThreads(FILE* f, int pid, int fromLane, int toLane);
void anycclTraceCounter(FILE* f, int pid, const char* name, double ts, double value);

#endif
