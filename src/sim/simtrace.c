/* ANYCCL_TRACE on the sim backend: the modelled collective written as the
 * trace the cpu and cuda backends write from real runs (include/trace.h),
 * plus a utilization counter per link. model.c calls these while it models
 * a collective (the trace file stays locked meanwhile). */
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "comm.h"
#include "plan.h"
#include "sim.h"
#include "trace.h"

static void rec(struct simTrace* st, int pid, int kind, double t0, double t1, int lane, int peer, int step,
                double bytes, int func, int net) {
  struct anycclTraceRec r = {t0 * 1e6, t1 * 1e6, st->seq, bytes, lane, peer, step, (uint8_t)kind, (uint8_t)func,
                             (uint8_t)net, 0};
  anycclTraceRecWrite(st->f, pid, &r);
}

int simTraceBegin(struct anycclSimWorld* w, struct simTrace* st, uint64_t seq) {
  memset(st, 0, sizeof(*st));
  if (!w->tracing) return 0;
  FILE* f = anycclTraceLock();
  return f ? simTraceOpen(w, st, seq, f) : 0;
}

int simTraceOpen(struct anycclSimWorld* w, struct simTrace* st, uint64_t seq, FILE* f) {
  memset(st, 0, sizeof(*st));
  if (!w->tracing || f == NULL) return 0;
  st->f = f;
  st->w = w;
  st->seq = seq;
  if (!w->traceNamed) {
    w->traceNamed = 1;
    w->traceMaxLane = -1;
    for (int r = 0; r < w->n; r++) {
      char name[96];
      int g = simGpuOf(&w->fabric, r);
      snprintf(name, sizeof(name), "rank %d (simhost%d gpu%d)", r, g / w->fabric.gpusPerHost, g % w->fabric.gpusPerHost);
      anycclTraceProcess(st->f, w->tracePid + r, name, w->tracePid + r);
    }
    anycclTraceProcess(st->f, w->tracePid + TRACE_LINKS_PID, "links (utilization %)", w->tracePid + TRACE_LINKS_PID);
  }
  return 1;
}

void simTraceEnd(struct simTrace* st) {
  if (st->f) anycclTraceUnlock(st->f);
  free(st->sendEnd), free(st->recvEnd), free(st->laneEnd), free(st->linkUsed), free(st->sends), free(st->recvs);
  memset(st, 0, sizeof(*st));
}

ncclResult_t simTracePhase(struct simTrace* st, const int* laneBase, int n, double tPhase, double t) {
  if (st->f == NULL) return ncclSuccess;
  size_t nl = (size_t)laneBase[n];
  free(st->sendEnd), free(st->recvEnd), free(st->laneEnd), free(st->sends), free(st->recvs);
  st->sends = calloc(nl + 1, sizeof(int));
  st->recvs = calloc(nl + 1, sizeof(int));
  st->sendEnd = malloc(sizeof(double) * (nl + 1));
  st->recvEnd = malloc(sizeof(double) * (nl + 1));
  st->laneEnd = malloc(sizeof(double) * (nl + 1));
  if (st->linkUsed == NULL) st->linkUsed = calloc(st->w->fabric.nLinks, 1);
  if (!st->sendEnd || !st->recvEnd || !st->laneEnd || !st->linkUsed || !st->sends || !st->recvs) return ncclSystemError;
  for (size_t i = 0; i < nl; i++) st->sendEnd[i] = st->recvEnd[i] = st->laneEnd[i] = t;
  st->phaseStart = tPhase;
  int maxLanes = 0;
  for (int r = 0; r < n; r++)
    if (laneBase[r + 1] - laneBase[r] > maxLanes) maxLanes = laneBase[r + 1] - laneBase[r];
  if (maxLanes - 1 > st->w->traceMaxLane) { /* name the new lanes' tracks */
    for (int r = 0; r < n; r++) anycclTraceThreads(st->f, st->w->tracePid + r, st->w->traceMaxLane + 1, maxLanes - 1);
    st->w->traceMaxLane = maxLanes - 1;
  }
  return ncclSuccess;
}

void simTraceStep(struct simTrace* st, const int* laneBase, int src, int dst, int lane, double bytes, double t,
                  double end) {
  if (st->f == NULL) return;
  const struct simFabric* fab = &st->w->fabric;
  int pid0 = st->w->tracePid;
  size_t s = (size_t)laneBase[src] + lane;
  if (dst < 0) { /* a step that sends nothing: the lane is busy */
    if (end > st->laneEnd[s]) st->laneEnd[s] = end;
    return;
  }
  int net = simGpuOf(fab, src) / fab->gpusPerHost != simGpuOf(fab, dst) / fab->gpusPerHost;
  if (t > st->sendEnd[s]) rec(st, pid0 + src, TR_BUFWAIT, st->sendEnd[s], t, lane, -1, 0, 0, 0, 0);
  rec(st, pid0 + src, TR_SEND, t, end, lane, dst, st->sends[s]++, bytes, 0, net);
  st->sendEnd[s] = end;
  if (end > st->laneEnd[s]) st->laneEnd[s] = end;
  if (dst != src && lane < laneBase[dst + 1] - laneBase[dst]) {
    size_t d = (size_t)laneBase[dst] + lane;
    if (t > st->recvEnd[d]) rec(st, pid0 + dst, TR_RECVWAIT, st->recvEnd[d], t, lane, -1, 0, 0, 0, 0);
    rec(st, pid0 + dst, TR_RECV, t, end, lane, src, st->recvs[d]++, bytes, 0, net);
    st->recvEnd[d] = end;
    if (end > st->laneEnd[d]) st->laneEnd[d] = end;
  }
}

void simTraceRound(struct simTrace* st, const struct simFlow* flows, const struct simRoundFlow* info,
                   const double* lat, int nflows, const int* laneBase, double t, double stepLat,
                   double roundLen) {
  if (st->f == NULL) return;
  const struct simFabric* fab = &st->w->fabric;
  int pid0 = st->w->tracePid;
  double* linkBytes = NULL;
  for (int i = 0; i < nflows; i++)
    simTraceStep(st, laneBase, info[i].src, info[i].dst, info[i].lane, flows[i].bytes, t,
                 t + stepLat + lat[i] + flows[i].end);
  /* link utilization over the round: bytes carried / (capacity x round) */
  if (roundLen <= 0 || nflows == 0) return;
  linkBytes = calloc(fab->nLinks, sizeof(double));
  if (linkBytes == NULL) return;
  for (int i = 0; i < nflows; i++)
    for (int q = 0; q < flows[i].nlinks; q++) linkBytes[flows[i].links[q]] += flows[i].bytes;
  for (int l = 0; l < fab->nLinks; l++) {
    if (linkBytes[l] == 0 && !st->linkUsed[l]) continue;
    char name[128];
    simLinkName(fab, l, name, sizeof(name));
    anycclTraceCounter(st->f, pid0 + TRACE_LINKS_PID, name, t * 1e6, 100 * linkBytes[l] / (fab->linkBps[l] * roundLen));
    st->linkUsed[l] = linkBytes[l] > 0;
  }
  free(linkBytes);
}

void simTracePhaseEnd(struct simTrace* st, struct anycclPlan** plans, int p, const int* laneBase, int n, double t) {
  if (st->f == NULL) return;
  const struct simFabric* fab = &st->w->fabric;
  for (int r = 0; r < n; r++) {
    const struct anycclPhase* ph = &plans[r]->phases[p];
    rec(st, st->w->tracePid + r, TR_COLL, st->phaseStart, t, 0, -1, 0, (double)ph->count * ph->elemSize, ph->func, 0);
    for (int li = 0; li < ph->nlanes; li++)
      rec(st, st->w->tracePid + r, TR_LANE, st->phaseStart, st->laneEnd[laneBase[r] + li], li, -1, 0, 0, 0, 0);
  }
  /* the links fall idle */
  for (int l = 0; l < fab->nLinks; l++)
    if (st->linkUsed[l]) {
      char name[128];
      simLinkName(fab, l, name, sizeof(name));
      anycclTraceCounter(st->f, st->w->tracePid + TRACE_LINKS_PID, name, t * 1e6, 0);
      st->linkUsed[l] = 0;
    }
}
