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
 * Steps run in dependency order, lane by lane: the rounds' flows and
 * durations are cut first (a run of equal rounds once: a table of each
 * lane's step for every distinct run), then each lane runs its steps as far
 * as its inputs and slots allow (reading its own step program in order, which
 * keeps thousands of ranks cache-friendly) and a lane that waits is woken by
 * the queue it waits on. Memory is per lane and connection (S times per
 * connection) and per lane and distinct run, not per step; when a phase has
 * more distinct runs than DF_TABLE_BYTES hold, it goes a window of rounds
 * at a time. */
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

/* A lane's step in a run of equal rounds: its duration and its flow (dst
 * -1: none). */
struct dfStep {
  double dur, bytes;
  int dst;
};
#define DF_TABLE_BYTES (128 << 20)

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
  const int* lr;                 /* [nl]: each lane's steps */
  const struct anycclLane** lanes; /* [nl] */
  int kEnd;                      /* steps below it are in the table */
  int kBase;                     /* the table's first round */
  const int* runOf;              /* [rounds]: run of round k, relative to the table */
  const struct dfStep* table;    /* [runs * nl] */
  struct dfQueue* q;
  /* flow file and trace */
  int tracks, tracing;
  int64_t *lastFlow, *msgFlow;
  struct simTrace* st;
  const char* what;
};

static const struct anycclLane* laneOf(const struct dfState* s, int L, int* r) {
  *r = s->laneRank[L];
  return s->lanes[L];
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

static double dmax(double a, double b) { return a > b ? a : b; }

/* Run lane L's steps while their inputs and slots are there (force: run
 * them anyway, a plan whose connections did not pair up). */
static void runLane(struct dfState* s, int L, int force) {
  int r;
  const struct anycclLane* l = laneOf(s, L, &r);
  int S = s->S, nl = s->nl, last = s->lr[L] < s->kEnd ? s->lr[L] : s->kEnd;
  const struct anycclStep* steps = l->kind == LANE_STEPS ? l->steps : NULL;
  while (s->done[L] < last) {
    int k = s->done[L], qin = -1, qout = -1;
    const struct dfStep* e = &s->table[(size_t)s->runOf[k - s->kBase] * nl + L];
    if (steps) {
      const struct anycclStep* st = &steps[k % l->nsteps];
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
      int links[8];
      double lat;
      int nlinks = e->dst == r ? 0 : simRoute(&s->w->fabric, r, e->dst, links, &lat);
      simWriteFlow(s->w, id, s->lastFlow[L], p2, s->plans[0]->seq, s->what, r, e->dst, e->bytes,
                   L - s->laneBase[r], k, links, nlinks, ready, end);
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
  free(s->lanes);
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
  s->lanes = malloc(sizeof(*s->lanes) * (nl + 1));
  if (!s->laneRank || !s->done || !s->blockQ || !s->qBase || !s->nconn || !s->stack || !s->inStack || !s->tEnd ||
      !s->lanes)
    return ncclSystemError;
  int nq = 0;
  for (int r = 0; r < n; r++) {
    const struct anycclPhase* ph = &s->plans[r]->phases[s->p];
    for (int li = 0; li < ph->nlanes; li++) {
      int L = s->laneBase[r] + li, c = 0;
      s->laneRank[L] = r;
      s->lanes[L] = &ph->lanes[li];
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

/* Run every lane up to round kEnd (the table's rounds). */
static void runTo(struct dfState* s, int kEnd) {
  s->kEnd = kEnd;
  for (int L = s->nl - 1; L >= 0; L--)
    if (s->blockQ[L] < 0) push(s, L);
  drain(s);
}

/* Lanes that still wait before round kEnd wait on a peer that never sends
 * (connections that did not pair up) or, past a window of rounds, on a step
 * the table no longer holds: run them without that wait. */
static void unstick(struct dfState* s, int kEnd) {
  int stuck = 0;
  for (int L = 0; L < s->nl; L++)
    if (s->done[L] < (s->lr[L] < kEnd ? s->lr[L] : kEnd)) stuck++, s->blockQ[L] = -1, runLane(s, L, 1);
  if (stuck)
    INFO(NCCL_COLL, "sim: %d lanes of launch %llu waited on peers that never send", stuck,
         (unsigned long long)s->plans[0]->seq);
  drain(s);
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
  uint64_t* sigs = NULL;
  double* lats = NULL;
  int* runOf = NULL;
  struct dfStep* table = NULL;
  size_t maxRuns = DF_TABLE_BYTES / (sizeof(struct dfStep) * (size_t)(nl + 1));
  if (maxRuns < 2) maxRuns = 2;
  if (lr == NULL) {
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
  s->lr = lr;
  sigs = malloc(sizeof(uint64_t) * (rounds + 1));
  lats = calloc(rounds + 1, sizeof(double));
  runOf = malloc(sizeof(int) * (rounds + 1));
  if (sigs == NULL || lats == NULL || runOf == NULL) {
    res = ncclSystemError;
    goto out;
  }
  simPhaseSigs(cal, s->plans, n, p, s->laneBase, lr, rounds, sigs, lats);
  size_t nruns = 0;
  for (int k = 0; k < rounds; k++) nruns += k == 0 || sigs[k] != sigs[k - 1] || lats[k] != lats[k - 1];
  if (nruns > maxRuns) nruns = maxRuns;
  table = malloc(sizeof(*table) * (nruns * nl + 1));
  if (table == NULL) {
    res = ncclSystemError;
    goto out;
  }
  s->table = table, s->runOf = runOf, s->kBase = 0;
  int run = -1;
  double repeat = 0;
  for (int k = 0; k < rounds; k++) {
    int same = k > 0 && sigs[k] == sigs[k - 1] && lats[k] == lats[k - 1];
    if (same) {
      repeat++;
      runOf[k - s->kBase] = run;
      continue;
    }
    if ((size_t)run + 1 == nruns) { /* the table is full: run the lanes this far, then start it again */
      runTo(s, k);
      unstick(s, k);
      s->kBase = k, run = -1;
    }
    simAccFlush(w, acc, repeat);
    NCCLCHECKGOTO(simRoundBuild(w, s->plans, p, k, s->laneBase, lr, b), res, out);
    NCCLCHECKGOTO(simFlowsRun(b->flows, b->n, fab->linkBps, fab->nLinks), res, out);
    simAccRound(acc, b);
    if (!s->tracks) w->nextFlowId += b->n;
    struct dfStep* col = table + (size_t)(++run) * nl;
    for (int L = 0; L < nl; L++) {
      if (k >= lr[L]) continue;
      int r = s->laneRank[L];
      col[L] = (struct dfStep){simStepLat(cal, s->plans[r]->comm, &s->plans[r]->phases[p], s->lanes[L], k), 0, -1};
    }
    for (int i = 0; i < b->n; i++) {
      struct dfStep* e = &col[s->laneBase[b->info[i].src] + b->info[i].lane];
      e->dur += b->lat[i] + b->flows[i].end;
      e->bytes = b->flows[i].bytes;
      e->dst = b->info[i].dst;
    }
    runOf[k - s->kBase] = run;
    repeat = 1;
  }
  simAccFlush(w, acc, repeat);
  runTo(s, rounds);
  unstick(s, rounds);
  for (int r = 0; r < n; r++) {
    double e = dmax(ps[r], s->rankArr[r]);
    for (int L = s->laneBase[r]; L < s->laneBase[r + 1]; L++) e = dmax(e, s->tEnd[L]);
    pe[r] = e;
  }
out:
  free(lr), free(sigs), free(lats), free(runOf), free(table);
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
