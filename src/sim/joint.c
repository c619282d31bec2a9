/* Collectives of several communicators of one cluster, modelled together
 * (docs/simulation.md, "Communicators of one cluster"): the lock-step model
 * of model.c, with the collectives' rounds on one virtual clock and their
 * flows sharing the fabric's links max-min fairly.
 *
 * Each collective runs its phases and rounds as lockstepRun does: a phase
 * starts a kernel launch after the previous one ended (the first at its
 * latest rank's start), round k's flows all start when round k-1 ended, and
 * a round ends at start + step latency + max(route latency + transfer). Here
 * a round's transfers share the links with whatever flows of the other
 * collectives are in flight meanwhile: the rates are the max-min fair ones
 * (flows.c) of every flow in flight, recomputed whenever a flow starts or
 * ends. Rounds are not taken from the previous one (their rates change with
 * the others), and the cuda backend's one-host kernels (symm.c) take the
 * time they take alone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "comm.h"
#include "model.h"
#include "plan.h"
#include "trace.h"

enum { J_PHASE, J_ROUND, J_FLIGHT, J_DONE };

struct jColl {
  struct simJob* job;
  struct anycclSimWorld* w;
  struct anycclPlan** plans;
  int n, nph, p, k, rounds, state, tracks, pending;
  struct simRun run;
  struct simFlowTrack ft;
  int* lr;
  uint64_t* sigs;
  double* lats;
  const char* what;
  double roundT, stepLat, nextAt;
  double* rem; /* [b.n]: bytes left of each flow of the round */
  int remCap;
};

struct jFlight {
  int c, i; /* collective, flow of its round */
};

struct jState {
  struct jColl* c;
  int nc;
  const struct simFabric* fab;
  struct jFlight* act; /* flows in flight */
  int nact, actCap;
  struct simFlow* af;  /* their copies, for simFlowsFill */
  int* ident;
  double *rate, *cap;
  int* cnt;
};

static ncclResult_t addFlight(struct jState* s, int c, int i) {
  if (s->nact == s->actCap) {
    int cap = s->actCap ? 2 * s->actCap : 256;
    struct jFlight* a = realloc(s->act, sizeof(*a) * cap);
    if (a) s->act = a;
    struct simFlow* f = realloc(s->af, sizeof(*f) * cap);
    if (f) s->af = f;
    int* id = realloc(s->ident, sizeof(int) * cap);
    if (id) s->ident = id;
    double* r = realloc(s->rate, sizeof(double) * cap);
    if (r) s->rate = r;
    if (!a || !f || !id || !r) return ncclSystemError;
    for (int k = s->actCap; k < cap; k++) s->ident[k] = k;
    s->actCap = cap;
  }
  s->act[s->nact++] = (struct jFlight){c, i};
  return ncclSuccess;
}

/* The round in flight ended: its length, flows into the totals, the flow file and the trace. */
static void roundFinish(struct jColl* c) {
  struct simBuilder* b = &c->run.b;
  double roundEnd = c->stepLat;
  for (int i = 0; i < b->n; i++) {
    double e = c->stepLat + b->lat[i] + b->flows[i].end;
    if (e > roundEnd) roundEnd = e;
  }
  simAccRound(&c->run.acc, b);
  simAccFlush(c->w, &c->run.acc, 1);
  if (c->tracks)
    simTrackRound(c->w, &c->ft, b, c->plans[0]->seq, c->what, c->k, c->roundT, c->stepLat, c->run.laneBase);
  c->w->nextFlowId += b->n;
  if (c->run.tracing)
    simTraceRound(&c->run.st, b->flows, b->info, b->lat, b->n, c->run.laneBase, c->roundT, c->stepLat, roundEnd);
  c->nextAt = c->roundT + roundEnd;
  c->k++;
  c->state = J_ROUND;
}

/* What collective ci does at time `now` (its nextAt): begin a phase, start
 * a round, or end. */
static ncclResult_t step(struct jState* s, int ci, double now) {
  struct jColl* c = &s->c[ci];
  const struct simCalib* cal = &c->w->fabric.calib;
  int n = c->n, *laneBase = c->run.laneBase;
  if (c->state == J_PHASE) {
    if (++c->p == c->nph) {
      c->state = J_DONE;
      c->job->end = now;
      return ncclSuccess;
    }
    struct anycclSymmChoice sc;
    int sy = simSymmPath(c->w, c->plans, c->p, &sc);
    if (sy != ANYCCL_SYMM_NONE) {
      double d = 0;
      NCCLCHECK(simSymmRun(c->w, c->plans, c->p, sy, &sc, &c->run.acc, now, &d));
      c->nextAt = now + d;
      return ncclSuccess;
    }
    c->nextAt = now + cal->launchUs * 1e-6;
    NCCLCHECK(simPhaseLanes(c->plans, n, c->p, laneBase, &c->lr, &c->rounds));
    NCCLCHECK(simTracePhase(&c->run.st, laneBase, n, now, c->nextAt));
    if (c->tracks) NCCLCHECK(simTrackPhase(&c->ft, (size_t)laneBase[n]));
    const struct anycclPhase* ph = &c->plans[0]->phases[c->p];
    c->what = ph->what ? ph->what : "phase";
    free(c->sigs), free(c->lats);
    c->sigs = malloc(sizeof(uint64_t) * (c->rounds + 1));
    c->lats = calloc(c->rounds + 1, sizeof(double));
    if (c->sigs == NULL || c->lats == NULL) return ncclSystemError;
    simPhaseSigs(cal, c->plans, n, c->p, laneBase, c->lr, c->rounds, c->sigs, c->lats, NULL);
    c->k = 0;
    c->state = J_ROUND;
    return ncclSuccess;
  }
  /* J_ROUND */
  if (c->k == c->rounds) {
    if (c->run.tracing) simTracePhaseEnd(&c->run.st, c->plans, c->p, laneBase, n, now);
    c->state = J_PHASE;
    return ncclSuccess; /* nextAt stays now: the next phase begins at once */
  }
  struct simBuilder* b = &c->run.b;
  NCCLCHECK(simRoundBuild(c->w, c->plans, c->p, c->k, laneBase, c->lr, b));
  if (b->n > c->remCap) {
    double* r = realloc(c->rem, sizeof(double) * b->n);
    if (r == NULL) return ncclSystemError;
    c->rem = r, c->remCap = b->n;
  }
  c->roundT = now;
  c->stepLat = c->lats[c->k];
  c->pending = 0;
  c->state = J_FLIGHT;
  for (int i = 0; i < b->n; i++) {
    b->flows[i].end = 0;
    c->rem[i] = b->flows[i].bytes;
    if (b->flows[i].bytes > 0) {
      NCCLCHECK(addFlight(s, ci, i));
      c->pending++;
    }
  }
  if (c->pending == 0) roundFinish(c);
  return ncclSuccess;
}

/* Every collective from its start until it ended, on one clock. */
static ncclResult_t runAll(struct jState* s) {
  double now = INFINITY;
  for (int ci = 0; ci < s->nc; ci++)
    if (s->c[ci].nextAt < now) now = s->c[ci].nextAt;
  for (;;) {
    for (int ci = 0; ci < s->nc; ci++) {
      struct jColl* c = &s->c[ci];
      while ((c->state == J_PHASE || c->state == J_ROUND) && c->nextAt <= now) NCCLCHECK(step(s, ci, now));
    }
    /* the rates of every flow in flight */
    for (int a = 0; a < s->nact; a++) {
      const struct jFlight* f = &s->act[a];
      s->af[a] = s->c[f->c].run.b.flows[f->i];
    }
    if (s->nact) simFlowsFill(s->af, s->ident, s->nact, s->fab->linkBps, s->cap, s->cnt, s->rate);
    double next = INFINITY;
    for (int a = 0; a < s->nact; a++) {
      double e = now + s->c[s->act[a].c].rem[s->act[a].i] / s->rate[a];
      if (e < next) next = e;
    }
    for (int ci = 0; ci < s->nc; ci++)
      if ((s->c[ci].state == J_PHASE || s->c[ci].state == J_ROUND) && s->c[ci].nextAt < next) next = s->c[ci].nextAt;
    if (!isfinite(next)) { /* every collective ended (or a flow can never end: no rate) */
      if (s->nact == 0) return ncclSuccess;
      WARN("sim: a flow of launch %llu has no rate on the fabric's links",
           (unsigned long long)s->c[s->act[0].c].plans[0]->seq);
      return ncclInternalError;
    }
    double dt = next - now;
    now = next;
    int kept = 0;
    for (int a = 0; a < s->nact; a++) {
      struct jFlight f = s->act[a];
      struct jColl* c = &s->c[f.c];
      double moved = s->rate[a] * dt, *rem = &c->rem[f.i];
      double bytes = c->run.b.flows[f.i].bytes;
      if (*rem <= moved * (1 + 1e-12) || *rem - moved <= bytes * 1e-12) { /* it ends now */
        *rem = 0;
        c->run.b.flows[f.i].end = now - c->roundT;
        if (--c->pending == 0) roundFinish(c);
      } else {
        *rem -= moved;
        s->act[kept++] = f;
      }
    }
    s->nact = kept;
  }
}

ncclResult_t simJointRun(struct simJob* jobs, int njobs) {
  struct jState s = {0};
  ncclResult_t res = ncclSuccess;
  FILE* trace = NULL;
  s.fab = &jobs[0].w->fabric;
  s.nc = njobs;
  s.c = calloc(njobs, sizeof(*s.c));
  s.cap = malloc(sizeof(double) * s.fab->nLinks);
  s.cnt = calloc(s.fab->nLinks, sizeof(int));
  if (!s.c || !s.cap || !s.cnt) {
    res = ncclSystemError;
    goto out;
  }
  for (int j = 0; j < njobs; j++) {
    struct jColl* c = &s.c[j];
    struct anycclSimWorld* w = jobs[j].w;
    c->job = &jobs[j];
    c->w = w;
    c->plans = jobs[j].s->plans;
    c->n = w->n;
    c->nph = c->plans[0]->nphases;
    c->p = -1;
    c->state = J_PHASE;
    c->tracks = w->flowFile != NULL;
    c->nextAt = 0;
    for (int r = 0; r < w->n; r++)
      if (jobs[j].s->start[r] > c->nextAt) c->nextAt = jobs[j].s->start[r];
    for (int r = 1; r < w->n; r++)
      if (c->plans[r]->nphases != c->nph) {
        WARN("sim: rank %d launched %d phases and rank 0 %d for launch %llu: the ranks called different operations",
             r, c->plans[r]->nphases, c->nph, (unsigned long long)c->plans[0]->seq);
        res = ncclInvalidUsage;
        goto out;
      }
    c->run.laneBase = malloc(sizeof(int) * (w->n + 1));
    if (c->run.laneBase == NULL || simAccInit(&c->run.acc, w->fabric.nLinks) != ncclSuccess) {
      res = ncclSystemError;
      goto out;
    }
    if (w->tracing) { /* one lock of the trace file for all of them */
      if (trace == NULL) trace = anycclTraceLock();
      c->run.tracing = simTraceOpen(w, &c->run.st, c->plans[0]->seq, trace);
    }
    w->modelled++;
  }
  res = runAll(&s);
out:
  for (int j = 0; s.c && j < njobs; j++) {
    struct jColl* c = &s.c[j];
    c->run.st.f = NULL;
    simRunEnd(&c->run);
    simTrackFree(&c->ft);
    free(c->lr), free(c->sigs), free(c->lats), free(c->rem);
  }
  if (trace) anycclTraceUnlock(trace);
  free(s.c), free(s.act), free(s.af), free(s.ident), free(s.rate), free(s.cap), free(s.cnt);
  return res;
}
