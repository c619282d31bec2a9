/* The time model, lock-step form (dataflow.c has the other; model.h): a
 * collective's plans (one per rank, the very plans the
 * cpu and cuda executors run) become rounds of flows.
 *
 * Every phase of the plan starts when the previous one ended on every rank
 * (the first one at the latest rank's start), after a kernel launch. Round k
 * of a phase is step k of every lane of every rank: a STEPS lane's step that
 * sends is a flow of its slice to the peer of its send connection; a P2P
 * send lane's k-th operation is a flow to its peer; a copy lane's is a flow
 * on no link at the copy rate. Every flow is capped at its lane's rate (one
 * GPU block; p2p and direct lanes run as many blocks as the cuda backend
 * cuts them into: anycclP2pCuts, anycclDirectCuts), LL flows carry
 * 1/ll_efficiency wire bytes per byte; flows share links max-min fairly
 * (flows.c). A round ends when its last flow arrived (start + step latency +
 * route latency + transfer); the next round starts then. Rounds whose flows
 * are the same as the previous round's (ring steps) reuse its result. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "comm.h"
#include "plan.h"
#include "model.h"
#include "sim.h"

static size_t blockLen(size_t total, size_t stride, size_t chunk) {
  size_t start = chunk * stride;
  if (start >= total) return 0;
  return total - start < stride ? total - start : stride;
}

/* The peer a connection of rank r's lanes leads to. */
int simConnPeer(const struct anycclSimWorld* w, const struct ncclComm* comm, const struct anycclConn* c) {
  int n = w->n;
  uintptr_t p = (uintptr_t)c, base = (uintptr_t)w->p2pConns;
  if (p >= base && p < base + 2 * (size_t)n * sizeof(*c)) return (int)((p - base) / sizeof(*c)) % n;
  uintptr_t s = (uintptr_t)comm->ringSend, r = (uintptr_t)comm->ringRecv;
  if (p >= s && p < s + sizeof(comm->ringSend)) {
    int ch = (int)((p - s) / sizeof(*c));
    return w->ringOrder[ch * n + (comm->ringPos[ch] + 1) % n];
  }
  if (p >= r && p < r + sizeof(comm->ringRecv)) {
    int ch = (int)((p - r) / sizeof(*c));
    return w->ringOrder[ch * n + (comm->ringPos[ch] + n - 1) % n];
  }
  return comm->rank;
}

int simLaneRounds(const struct anycclLane* l) {
  switch (l->kind) {
    case LANE_STEPS: {
      if (l->nsteps == 0) return 0;
      size_t span = l->end > l->begin ? l->end - l->begin : 0;
      size_t slices = l->slice ? (span + l->slice - 1) / l->slice : 1;
      if (slices == 0) slices = 1;
      return (int)slices * l->nsteps;
    }
    case LANE_P2P_SEND:
    case LANE_P2P_RECV: return l->nops;
    case LANE_COPY: return l->nops / 2;
  }
  return 0;
}

static int addFlow(struct simBuilder* b) {
  if (b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 1024;
    struct simFlow* f = realloc(b->flows, sizeof(*f) * cap);
    if (f) b->flows = f;
    struct simRoundFlow* i = realloc(b->info, sizeof(*i) * cap);
    if (i) b->info = i;
    double* l = realloc(b->lat, sizeof(*l) * cap);
    if (l) b->lat = l;
    if (!f || !i || !l) return -1;
    b->cap = cap;
  }
  return b->n++;
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

void simWriteFlow(struct anycclSimWorld* w, uint64_t id, int64_t p1, int64_t p2, uint64_t seq, const char* what,
                  int src, int dst, double bytes, int lane, int round, const int* links, int nlinks, double start,
                  double end) {
  char parents[64] = "", route[128] = "";
  if (p1 >= 0 && p2 >= 0 && p2 != p1) snprintf(parents, sizeof(parents), "%lld %lld", (long long)p1, (long long)p2);
  else if (p1 >= 0 || p2 >= 0) snprintf(parents, sizeof(parents), "%lld", (long long)(p1 >= 0 ? p1 : p2));
  for (int k = 0, off = 0; k < nlinks && off < (int)sizeof(route) - 12; k++)
    off += snprintf(route + off, sizeof(route) - off, k ? " %d" : "%d", links[k]);
  fprintf(w->flowFile, "%llu,%s,%llu,%s,%d,%d,%.0f,%d,%d,%s,%.6f,%.6f\n", (unsigned long long)id, parents,
          (unsigned long long)seq, what, src, dst, bytes, lane, round, route, start * 1e6, end * 1e6);
}

/* Flow file: one line per flow of a round. */
static void writeFlows(struct anycclSimWorld* w, const struct simBuilder* b, uint64_t seq, const char* what, int round,
                       double t0, double stepLat, uint64_t firstId, const int64_t* prevOut, const int64_t* prevIn,
                       const int* laneBase) {
  for (int i = 0; i < b->n; i++) {
    const struct simFlow* f = &b->flows[i];
    const struct simRoundFlow* r = &b->info[i];
    int64_t p1 = prevOut[laneBase[r->src] + r->lane];
    int64_t p2 = r->recvFrom >= 0 ? prevIn[laneBase[r->src] + r->lane] : -1;
    simWriteFlow(w, firstId + i, p1, p2, seq, what, r->src, r->dst, f->bytes, r->lane, round, f->links, f->nlinks, t0,
                 t0 + stepLat + b->lat[i] + f->end);
  }
}

void simTrackFree(struct simFlowTrack* ft) {
  free(ft->prevOut), free(ft->prevIn), free(ft->curOut), free(ft->curIn);
  memset(ft, 0, sizeof(*ft));
}

ncclResult_t simTrackPhase(struct simFlowTrack* ft, size_t nl) {
  simTrackFree(ft);
  ft->prevOut = malloc(sizeof(int64_t) * (nl + 1)), ft->prevIn = malloc(sizeof(int64_t) * (nl + 1));
  ft->curOut = malloc(sizeof(int64_t) * (nl + 1)), ft->curIn = malloc(sizeof(int64_t) * (nl + 1));
  if (!ft->prevOut || !ft->prevIn || !ft->curOut || !ft->curIn) return ncclSystemError;
  ft->nl = nl;
  for (size_t i = 0; i < nl; i++) ft->prevOut[i] = ft->prevIn[i] = -1;
  return ncclSuccess;
}

void simTrackRound(struct anycclSimWorld* w, struct simFlowTrack* ft, const struct simBuilder* b, uint64_t seq,
                   const char* what, int k, double t, double stepLat, const int* laneBase) {
  size_t nl = ft->nl;
  memcpy(ft->curOut, ft->prevOut, sizeof(int64_t) * nl);
  memcpy(ft->curIn, ft->prevIn, sizeof(int64_t) * nl);
  writeFlows(w, b, seq, what, k, t, stepLat, w->nextFlowId, ft->prevOut, ft->prevIn, laneBase);
  for (int i = 0; i < b->n; i++) {
    const struct simRoundFlow* rf = &b->info[i];
    ft->curOut[laneBase[rf->src] + rf->lane] = (int64_t)(w->nextFlowId + i);
    if (rf->dst != rf->src && rf->lane < laneBase[rf->dst + 1] - laneBase[rf->dst])
      ft->curIn[laneBase[rf->dst] + rf->lane] = (int64_t)(w->nextFlowId + i);
  }
  int64_t* x = ft->prevOut;
  ft->prevOut = ft->curOut, ft->curOut = x;
  x = ft->prevIn, ft->prevIn = ft->curIn, ft->curIn = x;
}

ncclResult_t simPhaseLanes(struct anycclPlan** plans, int n, int p, int* laneBase, int** lr, int* rounds) {
  laneBase[0] = 0;
  for (int r = 0; r < n; r++) laneBase[r + 1] = laneBase[r] + plans[r]->phases[p].nlanes;
  size_t nl = (size_t)laneBase[n];
  free(*lr);
  *lr = malloc(sizeof(int) * (nl + 1));
  *rounds = 0;
  if (*lr == NULL) return ncclSystemError;
  for (int r = 0; r < n; r++) {
    const struct anycclPhase* ph = &plans[r]->phases[p];
    for (int li = 0; li < ph->nlanes; li++) {
      int k = simLaneRounds(&ph->lanes[li]);
      (*lr)[laneBase[r] + li] = k;
      if (k > *rounds) *rounds = k;
    }
  }
  return ncclSuccess;
}

/* The protocol a GPU would use: LL up to llThreshold bytes, by the
 * collective's size, or by the operation's for send/receive lanes. */
int simIsLL(const struct ncclComm* comm, const struct anycclPhase* ph, const struct anycclLane* l, int k) {
  double bytes = (double)ph->count * ph->elemSize;
  if (l->kind == LANE_P2P_SEND || l->kind == LANE_P2P_RECV) bytes = (double)l->ops[k].bytes;
  return bytes <= (double)comm->llThreshold;
}

double simStepLat(const struct simCalib* cal, const struct ncclComm* comm, const struct anycclPhase* ph,
                  const struct anycclLane* l, int k) {
  return (simIsLL(comm, ph, l, k) ? cal->llStepUs : cal->simpleStepUs) * 1e-6;
}

ncclResult_t simAccInit(struct simLinkAcc* a, int nLinks) {
  a->bytes = calloc(nLinks, sizeof(double));
  a->busy = calloc(nLinks, sizeof(double));
  a->touched = malloc(sizeof(int) * (nLinks + 1));
  a->ntouched = 0;
  return a->bytes && a->busy && a->touched ? ncclSuccess : ncclSystemError;
}

void simAccFree(struct simLinkAcc* a) {
  free(a->bytes), free(a->busy), free(a->touched);
  memset(a, 0, sizeof(*a));
}

void simAccRound(struct simLinkAcc* a, const struct simBuilder* b) {
  for (int i = 0; i < b->n; i++) {
    const struct simFlow* f = &b->flows[i];
    for (int q = 0; q < f->nlinks; q++) {
      int l = f->links[q];
      if (a->bytes[l] == 0 && a->busy[l] == 0) a->touched[a->ntouched++] = l;
      a->bytes[l] += f->bytes;
      if (f->end > a->busy[l]) a->busy[l] = f->end;
    }
  }
}

void simAccFlush(struct anycclSimWorld* w, struct simLinkAcc* a, double repeat) {
  for (int i = 0; i < a->ntouched; i++) {
    int l = a->touched[i];
    w->linkBytes[l] += a->bytes[l] * repeat;
    w->linkBusy[l] += a->busy[l] * repeat;
    a->bytes[l] = a->busy[l] = 0;
  }
  a->ntouched = 0;
}

/* What a lane does in round k, as far as the flows go: its kind of step
 * (send and receive connections) and its size. Rounds whose lanes all do
 * the same are the same round. */
static uint64_t laneSig(const struct anycclPhase* ph, const struct anycclLane* l, int k, size_t* elems, int* sendIdx,
                        int* recvIdx) {
  *sendIdx = *recvIdx = -1;
  *elems = 0;
  if (l->kind == LANE_STEPS) {
    const struct anycclStep* st = &l->steps[k % l->nsteps];
    size_t pos = l->begin + (size_t)(k / l->nsteps) * l->slice;
    size_t len = blockLen(l->lenTotal, l->lenStride, st->chunk);
    if (len > l->end) len = l->end;
    size_t e = len > pos ? len - pos : 0;
    *elems = e > l->slice ? l->slice : e;
    *sendIdx = st->send;
    *recvIdx = st->recv;
  } else if (l->kind == LANE_P2P_SEND) {
    *elems = l->ops[k].bytes;
    *sendIdx = 0;
  } else if (l->kind == LANE_COPY) {
    *elems = l->ops[2 * k].bytes;
  }
  return (uint64_t)*elems << 20 ^ (uint64_t)(*sendIdx + 1) << 10 ^ (uint64_t)(*recvIdx + 1) ^ (uint64_t)l->kind << 60;
}

/* Every round's signature and step latency, lane by lane (each lane's
 * steps are read in order: thousands of ranks stay cache-friendly). */
void simPhaseSigs(const struct simCalib* cal, struct anycclPlan** plans, int n, int p, const int* laneBase,
                  const int* lr, int rounds, uint64_t* sigs, double* lats, uint16_t* rs) {
  for (int k = 0; k < rounds; k++) sigs[k] = 0x243f6a8885a308d3ull, lats[k] = 0;
  if (rs)
    for (int k = 0; k < rounds; k++) rs[k] = 0xfffe; /* no step lane yet */
  for (int r = 0; r < n; r++) {
    const struct anycclPhase* ph = &plans[r]->phases[p];
    const struct ncclComm* comm = plans[r]->comm;
    for (int li = 0; li < ph->nlanes; li++) {
      int m = lr[laneBase[r] + li];
      for (int k = 0; k < m; k++) {
        size_t e;
        int si, ri, ll = simIsLL(comm, ph, &ph->lanes[li], k);
        double lat = (ll ? cal->llStepUs : cal->simpleStepUs) * 1e-6;
        sigs[k] = mix(sigs[k], laneSig(ph, &ph->lanes[li], k, &e, &si, &ri) ^ (uint64_t)ll << 62 ^
                                   (uint64_t)li << 40 ^ (uint64_t)r << 44);
        if (lat > lats[k]) lats[k] = lat;
        if (rs && ph->lanes[li].kind == LANE_STEPS) {
          uint16_t v = (uint16_t)((ri + 1) | (si + 1) << 8);
          rs[k] = rs[k] == 0xfffe || rs[k] == v ? v : 0xffff;
        }
      }
    }
  }
}

/* The receiver's drain of a p2p op (recv_copy_GBps): each of the blocks
 * the op is cut into copies its piece out of its FIFO slot into the user's
 * buffer after the slot arrived; with pieces larger than a slot the copies
 * of earlier slots overlap the transfer and only the last slot's is left. */
double simRecvDrain(const struct simCalib* cal, const struct ncclComm* comm, size_t bytes) {
  if (cal->recvCopyGBps <= 0 || bytes == 0) return 0;
  double piece = (double)bytes / anycclP2pCuts(comm, bytes);
  if (comm->slotBytes > 0 && piece > (double)comm->slotBytes) piece = (double)comm->slotBytes;
  return piece / (cal->recvCopyGBps * 1e9);
}

ncclResult_t simRoundBuild(struct anycclSimWorld* w, struct anycclPlan** plans, int p, int k, const int* laneBase,
                           const int* lr, struct simBuilder* b) {
  const struct simFabric* fab = &w->fabric;
  const struct simCalib* cal = &fab->calib;
  int n = w->n;
  b->n = 0;
  for (int r = 0; r < n; r++) {
    const struct ncclComm* comm = plans[r]->comm;
    const struct anycclPhase* ph = &plans[r]->phases[p];
    for (int li = 0; li < ph->nlanes; li++) {
      const struct anycclLane* l = &ph->lanes[li];
      if (k >= lr[laneBase[r] + li]) continue;
      double wire = simIsLL(comm, ph, l, k) ? 1 / cal->llEfficiency : 1;
      size_t e;
      int si, ri, dst = -1, recvFrom = -1;
      laneSig(ph, l, k, &e, &si, &ri);
      double bytes = 0, cap = cal->blockGBps * 1e9;
      if (l->kind == LANE_STEPS) {
        if (si < 0) continue;
        bytes = (double)e * ph->elemSize * wire;
        dst = simConnPeer(w, comm, l->conns[si]);
        /* a direct (one-shot) lane runs over the peer connections: the
         * cuda backend cuts it into blocks by its size, as it does */
        uintptr_t c = (uintptr_t)l->conns[si], base = (uintptr_t)w->p2pConns;
        if (c >= base && c < base + 2 * (size_t)n * sizeof(struct anycclConn))
          cap *= anycclDirectCuts(comm, (uint64_t)(l->end > l->begin ? l->end - l->begin : 0) * ph->elemSize);
        if (ri >= 0) recvFrom = simConnPeer(w, comm, l->conns[ri]);
      } else if (l->kind == LANE_P2P_SEND) {
        bytes = (double)e * wire;
        dst = simConnPeer(w, comm, l->conn);
        cap *= anycclP2pCuts(comm, l->ops[k].bytes); /* the blocks the cuda backend cuts the op into */
      } else if (l->kind == LANE_COPY) {
        bytes = (double)e;
        dst = r;
        cap = cal->copyGBps * 1e9;
      } else {
        continue;
      }
      int i = addFlow(b);
      if (i < 0) return ncclSystemError;
      struct simFlow* f = &b->flows[i];
      f->bytes = bytes;
      f->cap = cap;
      f->nlinks = simRoute(fab, r, dst, f->links, &b->lat[i]);
      if (l->kind == LANE_P2P_SEND) b->lat[i] += simRecvDrain(cal, comm, l->ops[k].bytes);
      b->info[i] = (struct simRoundFlow){r, dst, li, recvFrom};
    }
  }
  return ncclSuccess;
}

ncclResult_t simRunBegin(struct anycclSimWorld* w, struct anycclPlan** plans, struct simRun* run) {
  memset(run, 0, sizeof(*run));
  run->tracing = simTraceBegin(w, &run->st, plans[0]->seq);
  run->laneBase = malloc(sizeof(int) * (w->n + 1));
  if (run->laneBase == NULL || simAccInit(&run->acc, w->fabric.nLinks) != ncclSuccess) return ncclSystemError;
  return ncclSuccess;
}

void simRunEnd(struct simRun* run) {
  simTraceEnd(&run->st);
  free(run->b.flows), free(run->b.info), free(run->b.lat), free(run->laneBase);
  simAccFree(&run->acc);
}

static ncclResult_t lockstepRun(struct anycclSimWorld* w, struct anycclPlan** plans, const double* start,
                                double* end) {
  const struct simFabric* fab = &w->fabric;
  const struct simCalib* cal = &fab->calib;
  int n = w->n;
  int nph = plans[0]->nphases;
  double t = 0;
  for (int r = 0; r < n; r++)
    if (start[r] > t) t = start[r];
  struct simRun run;
  ncclResult_t res = simRunBegin(w, plans, &run);
  struct simBuilder* b = &run.b;
  struct simLinkAcc* acc = &run.acc;
  struct simTrace* st = &run.st;
  int tracing = run.tracing, *laneBase = run.laneBase;
  int* lr = NULL;
  struct simFlowTrack ft = {0};
  uint64_t* sigs = NULL;
  double* lats = NULL;
  if (res != ncclSuccess) goto out;
  int tracks = w->flowFile != NULL;
  for (int p = 0; p < nph && res == ncclSuccess; p++) {
    struct anycclSymmChoice sc;
    int sy = simSymmPath(w, plans, p, &sc);
    if (sy != ANYCCL_SYMM_NONE) { /* the cuda backend's one-host kernel, not the plan */
      double d = 0;
      NCCLCHECKGOTO(simSymmRun(w, plans, p, sy, &sc, acc, t, &d), res, out);
      t += d;
      continue;
    }
    double tPhase = t;
    t += cal->launchUs * 1e-6;
    int rounds = 0;
    NCCLCHECKGOTO(simPhaseLanes(plans, n, p, laneBase, &lr, &rounds), res, out);
    size_t nl = (size_t)laneBase[n];
    NCCLCHECKGOTO(simTracePhase(st, laneBase, n, tPhase, t), res, out);
    if (tracks) NCCLCHECKGOTO(simTrackPhase(&ft, nl), res, out);
    const char* what = plans[0]->phases[p].what ? plans[0]->phases[p].what : "phase";
    free(sigs), free(lats);
    sigs = malloc(sizeof(uint64_t) * (rounds + 1));
    lats = calloc(rounds + 1, sizeof(double));
    if (sigs == NULL || lats == NULL) {
      res = ncclSystemError;
      break;
    }
    simPhaseSigs(cal, plans, n, p, laneBase, lr, rounds, sigs, lats, NULL);
    uint64_t prevSig = 0;
    int havePrev = 0;
    double repeat = 0, prevRound = 0, prevLat = 0;
    for (int k = 0; k < rounds; k++) {
      uint64_t sig = sigs[k];
      double stepLat = lats[k];
      if (havePrev && sig == prevSig && stepLat == prevLat && !tracks && !tracing) {
        repeat++;
        t += prevRound;
        continue;
      }
      simAccFlush(w, acc, repeat);
      int same = havePrev && sig == prevSig && stepLat == prevLat;
      NCCLCHECKGOTO(simRoundBuild(w, plans, p, k, laneBase, lr, b), res, out);
      /* the same round again: the flows, rebuilt in the same places, keep their ends */
      if (!same) NCCLCHECKGOTO(simFlowsRun(b->flows, b->n, fab->linkBps, fab->nLinks), res, out);
      double roundEnd = stepLat;
      for (int i = 0; i < b->n; i++) {
        double e = stepLat + b->lat[i] + b->flows[i].end;
        if (e > roundEnd) roundEnd = e;
      }
      simAccRound(acc, b);
      if (tracks) simTrackRound(w, &ft, b, plans[0]->seq, what, k, t, stepLat, laneBase);
      w->nextFlowId += b->n;
      if (tracing) simTraceRound(st, b->flows, b->info, b->lat, b->n, laneBase, t, stepLat, roundEnd);
      t += roundEnd;
      prevSig = sig, prevLat = stepLat, prevRound = roundEnd, havePrev = 1, repeat = 1;
    }
    simAccFlush(w, acc, repeat);
    if (tracing) simTracePhaseEnd(st, plans, p, laneBase, n, t);
  }
out:
  simRunEnd(&run);
  free(sigs), free(lats), free(lr);
  simTrackFree(&ft);
  *end = t;
  return res;
}

ncclResult_t simModelRun(struct anycclSimWorld* w, struct anycclPlan** plans, const double* start, double* end,
                         double* rankEnd) {
  int n = w->n;
  int nph = plans[0]->nphases;
  for (int r = 1; r < n; r++)
    if (plans[r]->nphases != nph) {
      WARN("sim: rank %d launched %d phases and rank 0 %d for launch %llu: the ranks called different operations",
           r, plans[r]->nphases, nph, (unsigned long long)plans[0]->seq);
      return ncclInvalidUsage;
    }
  if (w->fabric.calib.model == SIM_MODEL_DATAFLOW) return simDataflowRun(w, plans, start, end, rankEnd);
  ncclResult_t res = lockstepRun(w, plans, start, end);
  if (rankEnd)
    for (int r = 0; r < n; r++) rankEnd[r] = *end;
  return res;
}

void simLinkSummary(struct anycclSimWorld* w, FILE* out, int top) {
  const struct simFabric* f = &w->fabric;
  int* idx = malloc(sizeof(int) * f->nLinks);
  if (idx == NULL) return;
  int m = 0;
  for (int l = 0; l < f->nLinks; l++)
    if (w->linkBytes[l] > 0) idx[m++] = l;
  /* selection of the `top` busiest (ties: lower id first) */
  if (top > m) top = m;
  for (int i = 0; i < top; i++) {
    int best = i;
    for (int j = i + 1; j < m; j++)
      if (w->linkBusy[idx[j]] > w->linkBusy[idx[best]] ||
          (w->linkBusy[idx[j]] == w->linkBusy[idx[best]] && idx[j] < idx[best]))
        best = j;
    int x = idx[i];
    idx[i] = idx[best];
    idx[best] = x;
  }
  fprintf(out, "# sim link summary (%s): %d links carried traffic; busiest %d (modelled time %.3f us)\n", f->name, m,
          top, w->lastEnd * 1e6);
  fprintf(out, "# %6s  %-36s %14s %12s %9s %10s\n", "id", "link", "bytes", "busy_us", "busy_%", "GB/s_cap");
  for (int i = 0; i < top; i++) {
    char name[128];
    int l = idx[i];
    simLinkName(f, l, name, sizeof(name));
    fprintf(out, "  %6d  %-36s %14.0f %12.3f %9.1f %10.1f\n", l, name, w->linkBytes[l], w->linkBusy[l] * 1e6,
            w->lastEnd > 0 ? 100 * w->linkBusy[l] / w->lastEnd : 0, f->linkBps[l] / 1e9);
  }
  free(idx);
}
