/* The dataflow form of the time model (calibration `model dataflow`, or
 * ANYCCL_SIM_MODEL=dataflow; docs/simulation.md, "The time model").
 *
 * The flows and their rates are the lock-step model's: round k of a phase
 * is step k of every lane, and its flows share links max-min fairly
 * (model.c, flows.c), which gives each lane's step a duration: step
 * latency + route latency + transfer (a step that sends nothing: its step
 * latency). What changes is when a step starts. Each lane runs its steps in
 * order, and step k starts when
 *   - the lane's previous step ended,
 *   - the message it receives (if it receives) has arrived: a connection is
 *     a FIFO, the j-th receive takes the j-th message its peer sent, which
 *     arrives when the sender's step ends, and
 *   - a FIFO slot is free at its receiver (if it sends): the j-th send on a
 *     connection of S slots waits until the receiver's step that took
 *     message j - S ended.
 * So a chain fills and drains, a ring's lanes drift apart where they must,
 * and every rank ends when its own lanes have (a broadcast's root returns
 * before the last rank of the chain has its data): the next launch on a
 * rank starts from that rank's end. Each rank's phases start one kernel
 * launch after its previous phase ended. A rank's end also covers the
 * arrival of every flow sent to it (point-to-point receives).
 *
 * Steps run in dependency order: rounds are cut one after the other; each
 * lane queues its steps' durations and runs them as far as its inputs and
 * slots allow; a lane that waits is woken by the queue it waits on. Memory
 * is per lane and per connection (S times per connection), not per step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "comm.h"
#include "debug.h"
#include "model.h"

/* One connection's FIFO, kept at its receiving lane. */
struct dfQueue {
  int recvLane, sendLane; /* global lane ids; sendLane -1 until a sender is matched */
  int64_t sent, taken;    /* messages sent into it and taken out */
};

/* A step waiting to run: its duration and, for the flow file and trace, its flow. */
struct dfStep {
  double dur, bytes;
  int dst, round, nlinks;
  int links[8];
};

struct dfState {
  struct anycclSimWorld* w;
  struct anycclPlan** plans;
  int p, n, S;
  const int* laneBase;
  int nl, nq;
  int *laneRank, *done, *blockQ, *qBase, *nconn, *sendMap, *stack;
  int nstack;
  char* inStack;
  double *tEnd, *arrive, *taken; /* arrive/taken: [nq * S] */
  double* rankArr;               /* [n]: latest arrival of a flow sent to the rank */
  struct dfStep** pend;          /* per lane: a ring of steps to run */
  int *pendHead, *pendCount, *pendCap;
  struct dfQueue* q;
  /* flow file and trace */
  int tracks, tracing;
  int64_t *lastFlow, *msgFlow;
  struct simTrace* st;
  const char* what;
};

static const struct anycclLane* laneOf(const struct dfState* s, int L, int* r) {
  *r = s->laneRank[L];
  return &s->plans[*r]->phases[s->p].lanes[L - s->laneBase[*r]];
}

static int isRecvConn(const struct anycclSimWorld* w, const struct ncclComm* comm, const struct anycclConn* c) {
  uintptr_t p = (uintptr_t)c, base = (uintptr_t)w->p2pConns, sz = sizeof(*c);
  if (p >= base + (size_t)w->n * sz && p < base + 2 * (size_t)w->n * sz) return 1;
  uintptr_t r = (uintptr_t)comm->ringRecv;
  return p >= r && p < r + sizeof(comm->ringRecv);
}

/* The queue that lane L's connection si sends into (-1: no receiver found). */
static int sendQueue(struct dfState* s, int L, int si) {
  int* m = &s->sendMap[s->qBase[L] + si];
  if (*m != -2) return *m;
  int r;
  const struct anycclLane* l = laneOf(s, L, &r);
  const struct ncclComm* comm = s->plans[r]->comm;
  int li = L - s->laneBase[r], dst = simConnPeer(s->w, comm, l->conns[si]);
  *m = -1;
  if (dst == r || dst < 0 || dst >= s->n || li >= s->laneBase[dst + 1] - s->laneBase[dst]) return -1;
  int Ld = s->laneBase[dst] + li, rd;
  const struct anycclLane* ld = laneOf(s, Ld, &rd);
  const struct ncclComm* dcomm = s->plans[dst]->comm;
  if (ld->kind != LANE_STEPS) return -1;
  for (int c = 0; c < s->nconn[Ld]; c++)
    if (ld->conns[c] && isRecvConn(s->w, dcomm, ld->conns[c]) && simConnPeer(s->w, dcomm, ld->conns[c]) == r) {
      *m = s->qBase[Ld] + c;
      s->q[*m].sendLane = L;
      break;
    }
  return *m;
}

static void push(struct dfState* s, int L) {
  if (L < 0 || s->inStack[L]) return;
  s->inStack[L] = 1;
  s->stack[s->nstack++] = L;
}

static void wake(struct dfState* s, int L, int q) {
  if (L >= 0 && s->blockQ[L] == q) {
    s->blockQ[L] = -1;
    push(s, L);
  }
}

static ncclResult_t pendPush(struct dfState* s, int L, const struct dfStep* e) {
  if (s->pendCount[L] == s->pendCap[L]) {
    int cap = s->pendCap[L] ? 2 * s->pendCap[L] : 2;
    struct dfStep* a = malloc(sizeof(*a) * cap);
    if (a == NULL) return ncclSystemError;
    for (int i = 0; i < s->pendCount[L]; i++) a[i] = s->pend[L][(s->pendHead[L] + i) % s->pendCap[L]];
    free(s->pend[L]);
    s->pend[L] = a;
    s->pendHead[L] = 0;
    s->pendCap[L] = cap;
  }
  s->pend[L][(s->pendHead[L] + s->pendCount[L]) % s->pendCap[L]] = *e;
  s->pendCount[L]++;
  return ncclSuccess;
}

static double dmax(double a, double b) { return a > b ? a : b; }

/* Run lane L's queued steps while their inputs and slots are there (force:
 * run them anyway, a plan whose connections did not pair up). */
static void runLane(struct dfState* s, int L, int force) {
  int r;
  const struct anycclLane* l = laneOf(s, L, &r);
  int S = s->S;
  while (s->pendCount[L] > 0) {
    int k = s->done[L], qin = -1, qout = -1;
    const struct dfStep* e = &s->pend[L][s->pendHead[L]];
    if (l->kind == LANE_STEPS) {
      const struct anycclStep* st = &l->steps[k % l->nsteps];
      if (st->recv >= 0 && st->recv < s->nconn[L]) qin = s->qBase[L] + st->recv;
      if (st->send >= 0 && st->send < s->nconn[L] && e->dst >= 0) qout = sendQueue(s, L, st->send);
    }
    double ready = s->tEnd[L];
    int64_t jin = 0, jout = 0;
    if (qin >= 0) {
      jin = s->q[qin].taken;
      if (s->q[qin].sent > jin) ready = dmax(ready, s->arrive[(size_t)qin * S + jin % S]);
      else if (!force) {
        s->blockQ[L] = qin;
        return;
      } else {
        qin = -1;
      }
    }
    if (qout >= 0) {
      jout = s->q[qout].sent;
      if (jout >= S) {
        if (s->q[qout].taken > jout - S) ready = dmax(ready, s->taken[(size_t)qout * S + (jout - S) % S]);
        else if (!force) {
          s->blockQ[L] = qout;
          return;
        } else {
          qout = -1;
        }
      }
    }
    double end = ready + e->dur;
    if (e->dst >= 0) s->rankArr[e->dst] = dmax(s->rankArr[e->dst], end);
    if (s->tracks && e->dst >= 0) {
      uint64_t id = s->w->nextFlowId++;
      int64_t p2 = qin >= 0 ? s->msgFlow[(size_t)qin * S + jin % S] : -1;
      simWriteFlow(s->w, id, s->lastFlow[L], p2, s->plans[0]->seq, s->what, r, e->dst, e->bytes,
                   L - s->laneBase[r], e->round, e->links, e->nlinks, ready, end);
      s->lastFlow[L] = (int64_t)id;
      if (qout >= 0) s->msgFlow[(size_t)qout * S + jout % S] = (int64_t)id;
    }
    if (s->tracing) simTraceStep(s->st, s->laneBase, r, e->dst, L - s->laneBase[r], e->bytes, ready, end);
    if (qin >= 0) {
      s->taken[(size_t)qin * S + jin % S] = end;
      s->q[qin].taken++;
      wake(s, s->q[qin].sendLane, qin);
    }
    if (qout >= 0) {
      s->arrive[(size_t)qout * S + jout % S] = end;
      s->q[qout].sent++;
      wake(s, s->q[qout].recvLane, qout);
    }
    s->tEnd[L] = end;
    s->done[L]++;
    s->pendHead[L] = (s->pendHead[L] + 1) % s->pendCap[L];
    s->pendCount[L]--;
  }
}

static void drain(struct dfState* s) {
  while (s->nstack > 0) {
    int L = s->stack[--s->nstack];
    s->inStack[L] = 0;
    runLane(s, L, 0);
  }
}

static void stateFree(struct dfState* s) {
  if (s->pend)
    for (int L = 0; L < s->nl; L++) free(s->pend[L]);
  free(s->pend), free(s->pendHead), free(s->pendCount), free(s->pendCap);
  free(s->laneRank), free(s->done), free(s->blockQ), free(s->qBase), free(s->nconn), free(s->sendMap);
  free(s->stack), free(s->inStack), free(s->tEnd), free(s->arrive), free(s->taken), free(s->q);
  free(s->lastFlow), free(s->msgFlow);
}

/* Phase p's lanes and queues; lanes start at ps[r]. */
static ncclResult_t stateInit(struct dfState* s, const double* ps) {
  int n = s->n, nl = s->nl;
  s->laneRank = malloc(sizeof(int) * (nl + 1));
  s->done = calloc(nl + 1, sizeof(int));
  s->blockQ = malloc(sizeof(int) * (nl + 1));
  s->qBase = malloc(sizeof(int) * (nl + 1));
  s->nconn = calloc(nl + 1, sizeof(int));
  s->stack = malloc(sizeof(int) * (nl + 1));
  s->inStack = calloc(nl + 1, 1);
  s->tEnd = malloc(sizeof(double) * (nl + 1));
  s->pend = calloc(nl + 1, sizeof(*s->pend));
  s->pendHead = calloc(nl + 1, sizeof(int));
  s->pendCount = calloc(nl + 1, sizeof(int));
  s->pendCap = calloc(nl + 1, sizeof(int));
  if (!s->laneRank || !s->done || !s->blockQ || !s->qBase || !s->nconn || !s->stack || !s->inStack || !s->tEnd ||
      !s->pend || !s->pendHead || !s->pendCount || !s->pendCap)
    return ncclSystemError;
  int nq = 0;
  for (int r = 0; r < n; r++) {
    const struct anycclPhase* ph = &s->plans[r]->phases[s->p];
    for (int li = 0; li < ph->nlanes; li++) {
      int L = s->laneBase[r] + li, c = 0;
      s->laneRank[L] = r;
      s->blockQ[L] = -1;
      s->tEnd[L] = ps[r];
      s->qBase[L] = nq;
      if (ph->lanes[li].kind == LANE_STEPS)
        for (int i = 0; i < ANYCCL_MAX_LANE_CONNS; i++)
          if (ph->lanes[li].conns[i]) c = i + 1;
      s->nconn[L] = c;
      nq += c;
    }
  }
  s->nq = nq;
  size_t slots = (size_t)nq * s->S + 1;
  s->q = malloc(sizeof(*s->q) * (nq + 1));
  s->sendMap = malloc(sizeof(int) * (nq + 1));
  s->arrive = malloc(sizeof(double) * slots);
  s->taken = malloc(sizeof(double) * slots);
  if (!s->q || !s->sendMap || !s->arrive || !s->taken) return ncclSystemError;
  for (int L = 0; L < nl; L++)
    for (int c = 0; c < s->nconn[L]; c++) {
      int q = s->qBase[L] + c;
      s->q[q] = (struct dfQueue){L, -1, 0, 0};
      s->sendMap[q] = -2;
    }
  if (s->tracks) {
    s->lastFlow = malloc(sizeof(int64_t) * (nl + 1));
    s->msgFlow = malloc(sizeof(int64_t) * slots);
    if (!s->lastFlow || !s->msgFlow) return ncclSystemError;
    for (int L = 0; L < nl; L++) s->lastFlow[L] = -1;
    for (size_t i = 0; i < slots; i++) s->msgFlow[i] = -1;
  }
  return ncclSuccess;
}

/* One phase: every rank's lanes start at ps[r]; each rank's end into pe[r]. */
static ncclResult_t phaseRun(struct dfState* s, struct simLinkAcc* acc, struct simBuilder* b, const double* ps,
                             double* pe) {
  struct anycclSimWorld* w = s->w;
  const struct simFabric* fab = &w->fabric;
  const struct simCalib* cal = &fab->calib;
  int n = s->n, nl = s->nl, p = s->p, rounds = 0;
  ncclResult_t res = ncclSuccess;
  int* lr = malloc(sizeof(int) * (nl + 1));
  struct dfStep* cur = malloc(sizeof(*cur) * (nl + 1));
  uint64_t* sigs = NULL;
  double* lats = NULL;
  if (lr == NULL || cur == NULL) {
    res = ncclSystemError;
    goto out;
  }
  for (int r = 0; r < n; r++) {
    const struct anycclPhase* ph = &s->plans[r]->phases[p];
    for (int li = 0; li < ph->nlanes; li++) {
      int k = simLaneRounds(&ph->lanes[li]);
      lr[s->laneBase[r] + li] = k;
      if (k > rounds) rounds = k;
    }
  }
  sigs = malloc(sizeof(uint64_t) * (rounds + 1));
  lats = calloc(rounds + 1, sizeof(double));
  if (sigs == NULL || lats == NULL) {
    res = ncclSystemError;
    goto out;
  }
  simPhaseSigs(cal, s->plans, n, p, s->laneBase, lr, rounds, sigs, lats);
  int havePrev = 0;
  double repeat = 0;
  for (int k = 0; k < rounds; k++) {
    int same = havePrev && sigs[k] == sigs[k - 1] && lats[k] == lats[k - 1];
    if (same && !s->tracks && !s->tracing) {
      repeat++; /* the previous round's steps again */
    } else {
      simAccFlush(w, acc, repeat);
      NCCLCHECKGOTO(simRoundBuild(w, s->plans, p, k, s->laneBase, lr, b), res, out);
      if (!same) NCCLCHECKGOTO(simFlowsRun(b->flows, b->n, fab->linkBps, fab->nLinks), res, out);
      simAccRound(acc, b);
      if (!s->tracks) w->nextFlowId += b->n;
      for (int L = 0; L < nl; L++) {
        if (k >= lr[L]) continue;
        int r;
        const struct anycclLane* l = laneOf(s, L, &r);
        cur[L] = (struct dfStep){simStepLat(cal, s->plans[r]->comm, &s->plans[r]->phases[p], l, k), 0, -1, k, 0, {0}};
      }
      for (int i = 0; i < b->n; i++) {
        const struct simFlow* f = &b->flows[i];
        struct dfStep* e = &cur[s->laneBase[b->info[i].src] + b->info[i].lane];
        e->dur += b->lat[i] + f->end;
        e->bytes = f->bytes;
        e->dst = b->info[i].dst;
        e->nlinks = f->nlinks;
        memcpy(e->links, f->links, sizeof(int) * f->nlinks);
      }
      repeat = 1;
      havePrev = 1;
    }
    for (int L = 0; L < nl; L++) {
      if (k >= lr[L]) continue;
      cur[L].round = k;
      NCCLCHECKGOTO(pendPush(s, L, &cur[L]), res, out);
      if (s->blockQ[L] < 0) push(s, L);
    }
    drain(s);
  }
  simAccFlush(w, acc, repeat);
  /* whatever still waits waits on a peer that never sends (connections that
   * did not pair up): run it without that wait */
  int stuck = 0;
  for (int L = 0; L < nl; L++)
    if (s->pendCount[L] > 0) stuck++, runLane(s, L, 1);
  if (stuck) INFO(NCCL_COLL, "sim: %d lanes of launch %llu waited on peers that never send", stuck,
                  (unsigned long long)s->plans[0]->seq);
  drain(s);
  for (int r = 0; r < n; r++) {
    double e = dmax(ps[r], s->rankArr[r]);
    for (int L = s->laneBase[r]; L < s->laneBase[r + 1]; L++) e = dmax(e, s->tEnd[L]);
    pe[r] = e;
  }
out:
  free(lr), free(cur), free(sigs), free(lats);
  return res;
}

ncclResult_t simDataflowRun(struct anycclSimWorld* w, struct anycclPlan** plans, const double* start, double* end,
                            double* rankEnd) {
  const struct simCalib* cal = &w->fabric.calib;
  int n = w->n, nph = plans[0]->nphases;
  struct simRun run;
  ncclResult_t res = simRunBegin(w, plans, &run);
  int tracing = run.tracing, *laneBase = run.laneBase;
  double* ps = malloc(sizeof(double) * (n + 1));
  double* pe = malloc(sizeof(double) * (n + 1));
  double* arr = malloc(sizeof(double) * (n + 1));
  double tmax = 0;
  for (int r = 0; r < n; r++) tmax = dmax(tmax, start[r]);
  if (res == ncclSuccess && (!ps || !pe || !arr)) res = ncclSystemError;
  if (res != ncclSuccess) goto out;
  for (int r = 0; r < n; r++) pe[r] = start[r];
  for (int p = 0; p < nph && res == ncclSuccess; p++) {
    double tmin = INFINITY;
    for (int r = 0; r < n; r++) {
      ps[r] = pe[r] + cal->launchUs * 1e-6;
      arr[r] = ps[r];
      if (ps[r] < tmin) tmin = ps[r];
    }
    laneBase[0] = 0;
    for (int r = 0; r < n; r++) laneBase[r + 1] = laneBase[r] + plans[r]->phases[p].nlanes;
    NCCLCHECKGOTO(simTracePhase(&run.st, laneBase, n, tmin - cal->launchUs * 1e-6, tmin), res, out);
    struct dfState s = {.w = w, .plans = plans, .p = p, .n = n, .laneBase = laneBase, .nl = laneBase[n],
                        .rankArr = arr, .tracks = w->flowFile != NULL, .tracing = tracing, .st = &run.st};
    s.S = plans[0]->comm->nslots >= 1 ? plans[0]->comm->nslots : 1;
    s.what = plans[0]->phases[p].what ? plans[0]->phases[p].what : "phase";
    res = stateInit(&s, ps);
    if (res == ncclSuccess) res = phaseRun(&s, &run.acc, &run.b, ps, pe);
    stateFree(&s);
    tmax = 0;
    for (int r = 0; r < n; r++) tmax = dmax(tmax, pe[r]);
    if (tracing && res == ncclSuccess) simTracePhaseEnd(&run.st, plans, p, laneBase, n, tmax);
  }
  if (rankEnd)
    for (int r = 0; r < n; r++) rankEnd[r] = res == ncclSuccess ? pe[r] : start[r];
out:
  simRunEnd(&run);
  free(ps), free(pe), free(arr);
  *end = tmax;
  return res;
}
