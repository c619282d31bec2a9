/* Internals of the time model shared by its two forms: model.c (lock-step
 * rounds: every round waits for its slowest flow) and dataflow.c (a lane's
 * step waits only for its own input and a free FIFO slot). Both cut a phase
 * into the same rounds of flows and share links the same way. */
#ifndef ANYCCL_SIM_MODEL_H
#define ANYCCL_SIM_MODEL_H

#include "plan.h"
#include "sim.h"

/* The flows of one round. */
struct simBuilder {
  struct simFlow* flows;
  struct simRoundFlow* info;
  double* lat; /* route latency of each flow */
  int n, cap;
};

/* Per-link traffic of the latest distinct round, added `repeat` times to
 * the world's totals when the rounds change. */
struct simLinkAcc {
  double* bytes;
  double* busy;
  int* touched;
  int ntouched;
};

/* What both forms of the model hold while they model a collective. */
struct simRun {
  struct simBuilder b;
  struct simLinkAcc acc;
  struct simTrace st;
  int tracing;
  int* laneBase; /* [n + 1]: each rank's first lane in the current phase */
};
ncclResult_t simRunBegin(struct anycclSimWorld* w, struct anycclPlan** plans, struct simRun* run);
void simRunEnd(struct simRun* run);

/* Steps (rounds) a lane runs in its phase. */
int simLaneRounds(const struct anycclLane* l);
/* 1 when step k of the lane runs the LL protocol (as a GPU would choose). */
int simIsLL(const struct ncclComm* comm, const struct anycclPhase* ph, const struct anycclLane* l, int k);
/* The step latency of step k of the lane (LL or simple). */
double simStepLat(const struct simCalib* cal, const struct ncclComm* comm, const struct anycclPhase* ph,
                  const struct anycclLane* l, int k);
/* Every round's signature and largest step latency in phase p (rounds
 * whose signatures and latencies are equal move the same flows). lr: each
 * lane's rounds, laneBase: each rank's first lane. rs (NULL: not wanted):
 * per round, (recv + 1) | (send + 1) << 8 of the step every step lane runs
 * in it when they all agree (rings), else 0xffff (or 0xfffe: none). */
void simPhaseSigs(const struct simCalib* cal, struct anycclPlan** plans, int n, int p, const int* laneBase,
                  const int* lr, int rounds, uint64_t* sigs, double* lats, uint16_t* rs);
/* Seconds a p2p op of `bytes` adds after its last byte arrived: its
 * receiver's copy out of the FIFO (recv_copy_GBps; 0 when not set). */
double simRecvDrain(const struct simCalib* cal, const struct ncclComm* comm, size_t bytes);
/* Round k's flows into b (b->n = 0 first); their rates are not computed. */
ncclResult_t simRoundBuild(struct anycclSimWorld* w, struct anycclPlan** plans, int p, int k, const int* laneBase,
                           const int* lr, struct simBuilder* b);
ncclResult_t simAccInit(struct simLinkAcc* a, int nLinks);
void simAccFree(struct simLinkAcc* a);
/* Add a round's flows (rates computed) to the accumulator. */
void simAccRound(struct simLinkAcc* a, const struct simBuilder* b);
void simAccFlush(struct anycclSimWorld* w, struct simLinkAcc* a, double repeat);
/* A phase's lanes: laneBase[n + 1] (each rank's first lane), *lr (each
 * lane's rounds, reallocated) and the most of them in *rounds. */
ncclResult_t simPhaseLanes(struct anycclPlan** plans, int n, int p, int* laneBase, int** lr, int* rounds);
/* The flow file's lines of a phase's rounds, with each flow's parents: the
 * latest flows out of and into its lane. */
struct simFlowTrack {
  int64_t *prevOut, *prevIn, *curOut, *curIn;
  size_t nl;
};
ncclResult_t simTrackPhase(struct simFlowTrack* ft, size_t nl);
/* Round k (flows' ends set, relative to t) into the flow file; the caller
 * then adds b->n to w->nextFlowId. */
void simTrackRound(struct anycclSimWorld* w, struct simFlowTrack* ft, const struct simBuilder* b, uint64_t seq,
                   const char* what, int k, double t, double stepLat, const int* laneBase);
void simTrackFree(struct simFlowTrack* ft);
/* One line of the flow file; parents p1, p2 (-1: none). */
void simWriteFlow(struct anycclSimWorld* w, uint64_t id, int64_t p1, int64_t p2, uint64_t seq, const char* what,
                  int src, int dst, double bytes, int lane, int round, const int* links, int nlinks, double start,
                  double end);
/* The cuda backend's one-host kernels (symm.c): the path phase p takes
 * (ANYCCL_SYMM_LL, ANYCCL_SYMM_STAGED, or ANYCCL_SYMM_NONE: its plan), and
 * the time such a phase takes from its start (launch included); its flows
 * go into the link totals and the flow file (starting at t0). */
struct anycclSymmChoice;
int simSymmPath(const struct anycclSimWorld* w, struct anycclPlan** plans, int p, struct anycclSymmChoice* c);
ncclResult_t simSymmRun(struct anycclSimWorld* w, struct anycclPlan** plans, int p, int path,
                        const struct anycclSymmChoice* c, struct simLinkAcc* acc, double t0, double* dur);
/* The dataflow form of simModelRun (dataflow.c). */
ncclResult_t simDataflowRun(struct anycclSimWorld* w, struct anycclPlan** plans, const double* start, double* end,
                            double* rankEnd);

#endif
