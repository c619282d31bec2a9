/* The dataflow form of the time model (calibration `model dataflow`, or
 * ANYCCL_SIM_MODEL=dataflow; docs/simulation.md, "The time model").
 *
 * The flows and their rates are the lock-step model's: round k of a phase
 * is step k of every lane, and its flows share links max-min fairly
 * (model.c, flows.c), which gives each lane's step a step latency and a
 * route latency + transfer (none for a step that sends nothing). What
 * changes is when a step starts. Each lane runs its steps in order, and
 * step k moves its data (route latency + transfer) once
 *   - the lane's previous step ended and its step latency passed (the
 *     latency overlaps a wait for input: a block polling its FIFO has done
 *     its setup),
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

/* One connection's FIFO, kept at its receiving lane: a header and, per
 * slot, when the message in it arrived and when it was taken out (the slot
 * free again), in one record (S slots). */
struct dfQueue {
  int recvLane, sendLane; /* global lane ids; sendLane -1 until a sender is matched */
  int64_t sent, taken;    /* messages sent into it and taken out */
  int sentAt, takenAt;    /* sent % S, taken % S */
  int64_t pub;            /* messages the receiver sees (arrived): sent less a pending group */
  double pendEnd;         /* when the pending group's last message would have arrived alone */
  int net;                /* the connection crosses hosts: groups of up to netChannels messages */
};
#define DFQ_HEAD ((sizeof(struct dfQueue) + sizeof(double) - 1) / sizeof(double))
#define DFQ_DOUBLES(S) (DFQ_HEAD + 2 * (size_t)(S)) /* a queue record in doubles: header, arrive[S], free[S] */

/* A lane's hot state, in one record. */
struct dfLane {
  double tEnd;                     /* when its latest step ended */
  const struct anycclStep* steps;  /* STEPS lanes' program, else NULL */
  int nsteps, done, last;          /* steps: in the program, run, and runnable now */
  int rank, qBase, nconn, blockQ;  /* blockQ: the queue it waits on, or -1 */
  int inStack;
  int pendQ, inPend;               /* the queue holding its pending group (or -1); in pendList */
  double postT;                    /* when the executor reached its latest step (inputs there; no transfer) */
};

/* A lane's step in a run of equal rounds: its duration and its flow (dst
 * -1: none). */
struct dfStep {
  double lat, dur, bytes; /* lat: its step latency, which overlaps the wait for its input; dur: the rest */
  int dst;
};
#ifndef DF_TABLE_BYTES
#define DF_TABLE_BYTES (128 << 20) /* the table of runs at most; past it, windows of rounds */
#endif

struct dfState {
  struct anycclSimWorld* w;
  struct anycclPlan** plans;
  int p, n, S;
  int K; /* calib netChannels */
  const int* laneBase;
  int nl, nq;
  struct dfLane* ln;             /* [nl] */
  double* qmem;                  /* [nq * DFQ_DOUBLES(S)]: the queues */
  int *sendMap, *stack;
  int nstack;
  int *pendList, npend; /* lanes that may hold a pending group */
  double* rankArr;               /* [n]: latest arrival of a flow sent to the rank */
  const int* lr;                 /* [nl]: each lane's steps */
  const struct anycclLane** lanes; /* [nl] */
  int kEnd;                      /* steps below it are in the table */
  int kBase;                     /* the table's first round */
  const int* runOf;              /* [rounds]: run of round k, relative to the table */
  const uint16_t* rs;            /* [rounds]: every STEPS lane's recv/send at round k (simPhaseSigs) */
  const struct dfStep* table;    /* [runs * nl] */
  /* flow file and trace */
  int tracks, tracing;
  int64_t *lastFlow, *msgFlow;
  struct simTrace* st;
  const char* what;
};

static struct dfQueue* queue(const struct dfState* s, int q) {
  return (struct dfQueue*)(s->qmem + (size_t)q * DFQ_DOUBLES(s->S));
}
static double* arriveAt(const struct dfState* s, int q) { return s->qmem + (size_t)q * DFQ_DOUBLES(s->S) + DFQ_HEAD; }
static double* freeAt(const struct dfState* s, int q) { return arriveAt(s, q) + s->S; }

static int isRecvConn(const struct anycclSimWorld* w, const struct ncclComm* comm, const struct anycclConn* c) {
  uintptr_t p = (uintptr_t)c, base = (uintptr_t)w->p2pConns, sz = sizeof(*c);
  if (p >= base + (size_t)w->n * sz && p < base + 2 * (size_t)w->n * sz) return 1;
  uintptr_t r = (uintptr_t)comm->ringRecv;
  return p >= r && p < r + sizeof(comm->ringRecv);
}

/* The queue that lane L's connection si sends into (-1: no receiver found). */
static int sendQueue(struct dfState* s, int L, int si) {
  int* m = &s->sendMap[s->ln[L].qBase + si];
  if (*m != -2) return *m;
  int r = s->ln[L].rank;
  const struct anycclLane* l = s->lanes[L];
  const struct ncclComm* comm = s->plans[r]->comm;
  int li = L - s->laneBase[r], dst = simConnPeer(s->w, comm, l->conns[si]);
  *m = -1;
  if (dst == r || dst < 0 || dst >= s->n || li >= s->laneBase[dst + 1] - s->laneBase[dst]) return -1;
  int Ld = s->laneBase[dst] + li;
  const struct anycclLane* ld = s->lanes[Ld];
  const struct ncclComm* dcomm = s->plans[dst]->comm;
  if (ld->kind != LANE_STEPS) return -1;
  for (int c = 0; c < s->ln[Ld].nconn; c++)
    if (ld->conns[c] && isRecvConn(s->w, dcomm, ld->conns[c]) && simConnPeer(s->w, dcomm, ld->conns[c]) == r) {
      *m = s->ln[Ld].qBase + c;
      queue(s, *m)->sendLane = L;
      queue(s, *m)->net = simCrossHost(&s->w->fabric, r, dst);
      break;
    }
  return *m;
}

static void push(struct dfState* s, int L) {
  if (L < 0 || s->ln[L].inStack) return;
  s->ln[L].inStack = 1;
  s->stack[s->nstack++] = L;
}

static void wake(struct dfState* s, int L, int q) {
  if (L >= 0 && s->ln[L].blockQ == q) {
    s->ln[L].blockQ = -1;
    push(s, L);
  }
}

static double dmax(double a, double b) { return a > b ? a : b; }

/* The receiver sees the pending group of queue q: every message in it
 * arrives when its last one does. */
static void publish(struct dfState* s, int q) {
  struct dfQueue* Q = queue(s, q);
  if (Q->pub == Q->sent) return;
  for (int64_t m = Q->pub; m < Q->sent; m++) arriveAt(s, q)[m % s->S] = Q->pendEnd;
  Q->pub = Q->sent;
  if (Q->sendLane >= 0 && s->ln[Q->sendLane].pendQ == q) s->ln[Q->sendLane].pendQ = -1;
  wake(s, Q->recvLane, q);
}

/* Run lane L's steps while their inputs and slots are there (force: run
 * them anyway, a plan whose connections did not pair up).
 *
 * A connection across hosts is dealt over netChannels network channels
 * (the P2P engine's TCP channels, round-robin): a message sent while the
 * previous one is still in flight (its input and slot were there before
 * that one arrived) shares the link with it, and the group of up to
 * netChannels such messages arrives when its last one would have alone
 * (the same throughput, a later arrival). A message posted after the
 * previous one arrived starts a new group; so does a full one. Groups
 * still open when no lane can run are then seen (drain): which messages
 * group does not depend on the order lanes run in. */
static void runLane(struct dfState* s, int L, int force) {
  struct dfLane* ln = &s->ln[L];
  int S = s->S, nl = s->nl, r = ln->rank;
  while (ln->done < ln->last) {
    int k = ln->done, qin = -1, qout = -1;
    const struct dfStep* e = &s->table[(size_t)s->runOf[k - s->kBase] * nl + L];
    if (ln->steps) {
      int recv, send;
      uint16_t rs = s->rs[k];
      if (rs != 0xffff) { /* every lane's step k receives and sends alike (rings): no need to read the program */
        recv = (int)(rs & 0xff) - 1, send = (int)(rs >> 8) - 1;
      } else {
        const struct anycclStep* st = &ln->steps[k % ln->nsteps];
        recv = st->recv, send = st->send;
      }
      if (recv >= 0 && recv < ln->nconn) qin = ln->qBase + recv;
      if (send >= 0 && send < ln->nconn && e->dst >= 0) qout = sendQueue(s, L, send);
    }
    double ready = ln->tEnd + e->lat, inReady = -INFINITY; /* inReady: when its input and slot were there */
    struct dfQueue *in = NULL, *out = NULL;
    int64_t jin = 0, jout = 0;
    if (qin >= 0) {
      in = queue(s, qin);
      jin = in->taken;
      if (in->pub > jin) inReady = arriveAt(s, qin)[in->takenAt], ready = dmax(ready, inReady);
      else if (!force) {
        ln->blockQ = qin;
        return;
      } else {
        in = NULL;
      }
    }
    if (qout >= 0) {
      out = queue(s, qout);
      jout = out->sent;
      if (jout >= S) { /* the slot of message jout - S, the same slot */
        if (out->taken > jout - S) {
          inReady = dmax(inReady, freeAt(s, qout)[out->sentAt]);
          ready = dmax(ready, inReady);
        }
        else if (!force) {
          ln->blockQ = qout;
          return;
        } else {
          out = NULL;
        }
      }
    }
    double end = ready + e->dur;
    double post = dmax(ln->postT, inReady); /* an executor runs its steps in order, a send as soon as posted */
    ln->postT = post;
    if (e->dst >= 0) s->rankArr[e->dst] = dmax(s->rankArr[e->dst], end);
    if (s->tracks && e->dst >= 0) {
      uint64_t id = s->w->nextFlowId++;
      int64_t p2 = in ? s->msgFlow[(size_t)qin * S + in->takenAt] : -1;
      int links[8];
      double lat;
      int nlinks = e->dst == r ? 0 : simRoute(&s->w->fabric, r, e->dst, links, &lat);
      simWriteFlow(s->w, id, s->lastFlow[L], p2, s->plans[0]->seq, s->what, r, e->dst, e->bytes,
                   L - s->laneBase[r], k, links, nlinks, ready, end);
      s->lastFlow[L] = (int64_t)id;
      if (out) s->msgFlow[(size_t)qout * S + out->sentAt] = (int64_t)id;
    }
    if (s->tracing) simTraceStep(s->st, s->laneBase, r, e->dst, L - s->laneBase[r], e->bytes, ready, end);
    if (in) {
      freeAt(s, qin)[in->takenAt] = end;
      in->taken++;
      if (++in->takenAt == S) in->takenAt = 0;
      wake(s, in->sendLane, qin);
    }
    if (out) {
      int K = out->net ? s->K : 1;
      if (ln->pendQ >= 0 && ln->pendQ != qout) publish(s, ln->pendQ);
      if (out->sent > out->pub && !(post < out->pendEnd && out->sent - out->pub < K)) publish(s, qout);
      arriveAt(s, qout)[out->sentAt] = end;
      out->sent++;
      out->pendEnd = end;
      ln->pendQ = qout;
      if (!ln->inPend) ln->inPend = 1, s->pendList[s->npend++] = L;
      if (++out->sentAt == S) out->sentAt = 0;
      if (out->sent - out->pub >= K) publish(s, qout);
    }
    ln->tEnd = end;
    ln->done++;
  }
}

static void drain(struct dfState* s) {
  for (;;) {
    while (s->nstack > 0) {
      int L = s->stack[--s->nstack];
      s->ln[L].inStack = 0;
      runLane(s, L, 0);
    }
    if (s->npend == 0) return;
    int n = s->npend; /* no lane can run: the open groups are seen */
    s->npend = 0;
    for (int i = 0; i < n; i++) {
      int L = s->pendList[i];
      s->ln[L].inPend = 0;
      if (s->ln[L].pendQ >= 0) publish(s, s->ln[L].pendQ);
    }
  }
}

static void stateFree(struct dfState* s) {
  free(s->lanes), free(s->ln), free(s->qmem), free(s->sendMap), free(s->stack), free(s->pendList);
  free(s->lastFlow), free(s->msgFlow);
}

/* Phase p's lanes and queues; lanes start at ps[r]. */
static ncclResult_t stateInit(struct dfState* s, const double* ps) {
  int n = s->n, nl = s->nl;
  s->ln = calloc(nl + 1, sizeof(*s->ln));
  s->stack = malloc(sizeof(int) * (nl + 1));
  s->pendList = malloc(sizeof(int) * (nl + 1));
  s->lanes = malloc(sizeof(*s->lanes) * (nl + 1));
  if (!s->ln || !s->stack || !s->lanes || !s->pendList) return ncclSystemError;
  int nq = 0;
  for (int r = 0; r < n; r++) {
    const struct anycclPhase* ph = &s->plans[r]->phases[s->p];
    for (int li = 0; li < ph->nlanes; li++) {
      int L = s->laneBase[r] + li, c = 0;
      const struct anycclLane* l = &ph->lanes[li];
      struct dfLane* ln = &s->ln[L];
      s->lanes[L] = l;
      ln->rank = r;
      ln->blockQ = -1;
      ln->pendQ = -1;
      ln->postT = ps[r];
      ln->tEnd = ps[r];
      ln->qBase = nq;
      if (l->kind == LANE_STEPS && l->nsteps > 0) {
        ln->steps = l->steps, ln->nsteps = l->nsteps;
        for (int i = 0; i < ANYCCL_MAX_LANE_CONNS; i++)
          if (l->conns[i]) c = i + 1;
      }
      ln->nconn = c;
      nq += c;
    }
  }
  s->nq = nq;
  size_t slots = (size_t)nq * s->S + 1;
  s->qmem = calloc((size_t)nq * DFQ_DOUBLES(s->S) + 1, sizeof(double));
  s->sendMap = malloc(sizeof(int) * (nq + 1));
  if (!s->qmem || !s->sendMap) return ncclSystemError;
  for (int L = 0; L < nl; L++)
    for (int c = 0; c < s->ln[L].nconn; c++) {
      int q = s->ln[L].qBase + c;
      *queue(s, q) = (struct dfQueue){L, -1, 0, 0, 0, 0, 0, 0, 0};
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
  for (int L = s->nl - 1; L >= 0; L--) {
    s->ln[L].last = s->lr[L] < kEnd ? s->lr[L] : kEnd;
    if (s->ln[L].blockQ < 0) push(s, L);
  }
  drain(s);
}

/* Lanes that still wait before round kEnd wait on a peer that never sends
 * (connections that did not pair up) or, past a window of rounds, on a step
 * the table no longer holds: run them without that wait. */
static void unstick(struct dfState* s, int kEnd) {
  int stuck = 0;
  for (int L = 0; L < s->nl; L++)
    if (s->ln[L].done < s->ln[L].last) stuck++, s->ln[L].blockQ = -1, runLane(s, L, 1);
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
  uint16_t* rs = NULL;
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
  rs = malloc(sizeof(uint16_t) * (rounds + 1));
  if (sigs == NULL || lats == NULL || runOf == NULL || rs == NULL) {
    res = ncclSystemError;
    goto out;
  }
  simPhaseSigs(cal, s->plans, n, p, s->laneBase, lr, rounds, sigs, lats, rs);
  for (int k = 0; k < rounds; k++)
    if (rs[k] == 0xfffe) rs[k] = 0xffff;
  s->rs = rs;
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
      int r = s->ln[L].rank;
      col[L] = (struct dfStep){simStepLat(cal, s->plans[r]->comm, &s->plans[r]->phases[p], s->lanes[L], k), 0, 0, -1};
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
    for (int L = s->laneBase[r]; L < s->laneBase[r + 1]; L++) e = dmax(e, s->ln[L].tEnd);
    pe[r] = e;
  }
out:
  free(lr), free(sigs), free(lats), free(runOf), free(rs), free(table);
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
    struct anycclSymmChoice sc;
    int sy = simSymmPath(w, plans, p, &sc);
    if (sy != ANYCCL_SYMM_NONE) { /* one kernel, ranks waiting for each other's lines or barriers */
      double t0 = 0, d = 0;
      for (int r = 0; r < n; r++) t0 = dmax(t0, pe[r]);
      NCCLCHECKGOTO(simSymmRun(w, plans, p, sy, &sc, &run.acc, t0, &d), res, out);
      for (int r = 0; r < n; r++) pe[r] = t0 + d;
      tmax = t0 + d;
      continue;
    }
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
    s.K = cal->netChannels >= 1 ? cal->netChannels : 1;
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
