/* The sim executor (exec.h). A launch queues a host function on the stream,
 * as the cpu executor does; when it runs (at once, on the launching thread:
 * anyccl-cpu in sim mode), it posts the rank's plan, the virtual time it
 * started at and a deferred end of its stream op into the world's slot for
 * that launch number. The last rank to post models the collective
 * (model.c) with every rank's plan and resolves every rank's end; each one's stream
 * op then ends at the modelled end. Nothing sleeps for modelled time, and
 * no rank's thread waits for another's here (see planRun). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "checks.h"
#include "comm.h"
#include "exec.h"
#include "param.h"
#include "rt.h"
#include "sim.h"

void anycclSimWorldLeave(struct anycclSimWorld* w);

static ncclResult_t simSetup(struct ncclComm* comm) {
  struct anycclSimWorld* w = comm->sim;
  /* The cuda backend's choices (cuda_backend.c), so that the plans are the
   * ones a GPU would run. */
  int k = (int)anycclParamInt(PARAM_CUDA_P2P_CHANNELS);
  comm->p2pChannels = k < 1 ? 1 : k > ANYCCL_MAX_CHANNELS ? ANYCCL_MAX_CHANNELS : k;
  comm->llThreshold = (size_t)anycclParamInt(PARAM_CUDA_LL_THRESHOLD);
  const char* proto = anycclParamStr(PARAM_PROTO);
  if (proto && strcasecmp(proto, "LL") == 0) comm->llThreshold = (size_t)-1;
  else if (proto && strcasecmp(proto, "Simple") == 0) comm->llThreshold = 0;
  if (comm->nHosts > 1) {
    int cap = (int)anycclParamInt(PARAM_CUDA_NET_CHANNELS);
    if (cap < 1) cap = 1;
    if (comm->p2pChannels > cap) comm->p2pChannels = cap;
    comm->llThreshold = 0;
  }
  comm->peerThreshold = (size_t)-1; /* GPUs run the lanes */
  comm->nvlinkAll = comm->nHosts == 1; /* the fabric's GPUs of a host share NVLink */
  comm->p2pSend = w->p2pConns;
  comm->p2pRecv = w->p2pConns + comm->nRanks;
  return ncclSuccess;
}

static void simFree(struct ncclComm* comm) {
  struct anycclSimWorld* w = comm->sim;
  if (w == NULL) return;
  pthread_mutex_lock(&w->lock);
  if (comm->rank < w->n && w->comms[comm->rank] == comm) w->comms[comm->rank] = NULL;
  pthread_mutex_unlock(&w->lock);
  /* shared with the world: not the communicator's to free */
  comm->peerInfo = NULL;
  comm->ringOrder = NULL;
  comm->scratch = NULL;
  comm->p2pSend = comm->p2pRecv = NULL;
  comm->sim = NULL;
  anycclSimWorldLeave(w);
}

static int stopped(struct ncclComm* comm) {
  return __atomic_load_n(&comm->abortFlag, __ATOMIC_ACQUIRE) || __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE);
}

void simSlotFinish(struct anycclSimWorld* w, struct simSlot* s, ncclResult_t res, double e) {
  int n = w->n;
  for (int r = 0; r < n; r++) {
    if (res != ncclSuccess) s->endAt[r] = s->start[r];
    anycclPlanFree(s->plans[r]);
    s->plans[r] = NULL;
  }
  anycclRt.simResolve(s->ends, n, s->endAt);
  pthread_mutex_lock(&w->lock);
  if (res != ncclSuccess)
    for (int r = 0; r < n; r++)
      if (w->comms[r]) anycclCommSetError(w->comms[r], res);
  if (res == ncclSuccess && e > w->lastEnd) w->lastEnd = e;
  s->done = 1;
  s->queued = 0;
  pthread_cond_broadcast(&w->cond);
  pthread_mutex_unlock(&w->lock);
}

/* Launches onto idle streams (the first after the host synchronized: not
 * queued behind earlier kernels, so the launch latency shows) start
 * idle_launch_us later, and one host thread launches one at a time: the
 * k-th of its idle launches here (in rank order) starts k x idle_launch_us
 * after it was queued (docs/simulation.md, "The time model"). s->endAt[r]
 * holds the thread that queued rank r's idle launch (0: not idle). */
static void idleLaunches(struct anycclSimWorld* w, struct simSlot* s) {
  const double idle = w->fabric.calib.idleLaunchUs * 1e-6;
  for (int r = 0; r < w->n; r++) {
    if (idle <= 0 || s->endAt[r] == 0) continue;
    int k = 1;
    for (int q = 0; q < r; q++) k += s->endAt[q] == s->endAt[r];
    s->start[r] += k * idle;
  }
}

/* Post my plan (the slot owns it from here); the last rank to post models
 * the collective (or queues it in its cluster), resolves every rank's
 * deferred end and frees the plans. */
static void simPost(struct ncclComm* comm, struct anycclPlan* plan, double start, void* end, unsigned idleBy) {
  struct anycclSimWorld* w = comm->sim;
  struct simSlot* s = &w->slots[plan->seq & 1];
  int n = w->n;
  pthread_mutex_lock(&w->lock);
  /* the slot's earlier launch waits in the cluster's queue: model it now */
  while (s->seq != plan->seq && s->queued && !s->done && !stopped(comm)) {
    pthread_mutex_unlock(&w->lock);
    simClusterFlush(w->cluster);
    pthread_mutex_lock(&w->lock);
  }
  if (s->seq != plan->seq) {
    if (s->arrived > 0 && !s->done) {
      pthread_mutex_unlock(&w->lock);
      WARN("sim: rank %d launched operation %llu while operation %llu still waits for ranks (%d of %d launched it); "
           "every rank must launch the same operations in the same order",
           comm->rank, (unsigned long long)plan->seq, (unsigned long long)s->seq, s->arrived, n);
      anycclCommSetError(comm, ncclInvalidUsage);
      void* one[1] = {end};
      anycclRt.simResolve(one, 1, &start);
      anycclPlanFree(plan);
      return;
    }
    s->seq = plan->seq;
    s->arrived = s->done = 0;
  }
  s->plans[comm->rank] = plan;
  s->start[comm->rank] = start;
  s->ends[comm->rank] = end;
  s->endAt[comm->rank] = (double)idleBy; /* (scratch until the model fills it) */
  int last = ++s->arrived == n;
  int defer = last && simClusterDefers(w);
  if (defer) s->queued = 1;
  pthread_mutex_unlock(&w->lock);
  if (!last) return;
  /* Every rank posted: nobody else touches the slot until done. */
  idleLaunches(w, s);
  if (defer) {
    simClusterQueue(w, s);
    return;
  }
  double e = 0;
  ncclResult_t res = simModelCollective(w, s->plans, s->start, &e, s->endAt);
  simSlotFinish(w, s, res, e);
}

/* On the stream: no wait here. The stream op ends when the model says
 * (anyccl-cpu waits for that only where the stream's time is needed). */
static void planRun(void* arg) {
  struct anycclPlan* plan = arg;
  struct ncclComm* comm = plan->comm;
  anycclCommRunBegin(comm);
  if (!stopped(comm)) {
    unsigned idleBy = anycclRt.simOpIdle ? anycclRt.simOpIdle() : 0;
    simPost(comm, plan, anycclRt.simOpStart(), anycclRt.simOpDefer(), idleBy);
  } else {
    anycclPlanFree(plan);
  }
  anycclCommWorkDone(comm);
}

static ncclResult_t simLaunch(struct ncclComm* comm, struct anycclPlan* plan, cudaStream_t stream) {
  return anycclExecLaunchHost(comm, plan, stream, planRun);
}

/* Nothing of the executor waits: the stream waits anyccl-cpu makes for
 * deferred ends are bounded (ANYCCL_OP_TIMEOUT) and end when the world goes. */
static void simAbort(struct ncclComm* comm) {}

static ncclResult_t simAsyncError(struct ncclComm* comm) { return ncclSuccess; }

const struct anycclExec anycclExecSim = {
    .name = "sim", .setup = simSetup, .launch = simLaunch, .abort = simAbort, .asyncError = simAsyncError, .free = simFree,
};
