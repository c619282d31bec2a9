/* The memo of modelled collectives: a program repeats the same collective
 * (the perf tools time 20 and more of each size), and the same plans on the
 * same fabric take the same time. The key hashes, for every rank and phase,
 * the lanes' kinds, geometry, step programs, operation sizes and peers,
 * everything the model reads; a hit adds the remembered duration to the
 * latest start and the remembered traffic to the link totals. Off when a
 * flow file is written (every flow must be listed) or ANYCCL_SIM_MEMO=0.
 * Under the dataflow model the ranks' ends differ and the next launch's
 * starts with them: the key also hashes every rank's start relative to the
 * latest (to the nanosecond), and an entry keeps every rank's end relative
 * to it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "comm.h"
#include "plan.h"
#include "sim.h"

#define MEMO_ENTRIES 32

struct memoEntry {
  uint64_t key, key2;
  double duration;
  double* rankEnd; /* [n], relative to the latest start; NULL: every rank ends at duration */
  uint64_t flows;
  int nlinks;
  int* links;
  double *bytes, *busy;
  uint64_t used;
};

struct simMemo {
  struct memoEntry e[MEMO_ENTRIES];
  uint64_t clock;
  double *bytes0, *busy0; /* link totals before a modelled collective */
};

static uint64_t h64(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t hashBytes(uint64_t h, const void* p, size_t len) {
  const unsigned char* b = p;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t v;
    memcpy(&v, b + i, 8);
    h = h64(h, v);
  }
  uint64_t v = 0;
  memcpy(&v, b + i, len - i);
  return h64(h, v ^ len);
}

/* Two independent hashes of everything the model reads from the plans. */
static void planKey(const struct anycclSimWorld* w, struct anycclPlan** plans, uint64_t* k1, uint64_t* k2) {
  uint64_t a = 0x6a09e667f3bcc909ull, b = 0xbb67ae8584caa73bull;
  for (int r = 0; r < w->n; r++) {
    const struct anycclPlan* pl = plans[r];
    const struct ncclComm* comm = pl->comm;
    a = h64(a, (uint64_t)pl->nphases << 32 | (uint32_t)r);
    for (int p = 0; p < pl->nphases; p++) {
      const char* what = pl->phases[p].what ? pl->phases[p].what : "";
      a = hashBytes(a, what, strlen(what));
    }
    a = h64(a, comm->llThreshold ^ (uint64_t)comm->p2pChannels << 48);
    for (int p = 0; p < pl->nphases; p++) {
      const struct anycclPhase* ph = &pl->phases[p];
      a = h64(a, (uint64_t)ph->nlanes << 40 ^ ph->count ^ (uint64_t)ph->elemSize << 56);
      const struct anycclStep* lastSteps = NULL;
      for (int li = 0; li < ph->nlanes; li++) {
        const struct anycclLane* l = &ph->lanes[li];
        a = h64(a, (uint64_t)l->kind << 56 ^ (uint64_t)l->nsteps << 32 ^ (uint64_t)l->nops);
        a = h64(a, l->lenTotal), a = h64(a, l->lenStride), a = h64(a, l->begin);
        a = h64(a, l->end), a = h64(a, l->slice);
        if (l->kind == LANE_STEPS) {
          /* The step program follows from the algorithm, the geometry and
           * the peers hashed here; its ends and every 61st step are hashed
           * too (all of it would cost as much as building it). */
          if (l->steps != lastSteps)
            for (int i = 0; i < l->nsteps; i += (i < 4 || i >= l->nsteps - 4) ? 1 : 61)
              b = hashBytes(b, &l->steps[i], sizeof(*l->steps));
          lastSteps = l->steps;
          for (int c = 0; c < ANYCCL_MAX_LANE_CONNS; c++) /* lanes are zeroed: unused conns are NULL */
            if (l->conns[c]) a = h64(a, (uint64_t)c << 32 | (uint32_t)simConnPeer(w, comm, l->conns[c]));
        } else {
          if (l->conn) a = h64(a, (uint64_t)simConnPeer(w, comm, l->conn) + 1);
          for (int o = 0; o < l->nops; o++) b = h64(b, l->ops[o].bytes);
        }
      }
    }
    b = h64(b, a);
  }
  *k1 = a;
  *k2 = b;
}

void simMemoFree(struct anycclSimWorld* w) {
  struct simMemo* m = w->memo;
  if (m == NULL) return;
  for (int i = 0; i < MEMO_ENTRIES; i++)
    free(m->e[i].links), free(m->e[i].bytes), free(m->e[i].busy), free(m->e[i].rankEnd);
  free(m->bytes0), free(m->busy0);
  free(m);
  w->memo = NULL;
}

static void endsAt(int n, double t0, const double* rel, double duration, double* rankEnd) {
  if (rankEnd)
    for (int r = 0; r < n; r++) rankEnd[r] = t0 + (rel ? rel[r] : duration);
}

ncclResult_t simModelCollective(struct anycclSimWorld* w, struct anycclPlan** plans, const double* start,
                                double* end, double* rankEnd) {
  const char* env = getenv("ANYCCL_SIM_MEMO");
  int nLinks = w->fabric.nLinks;
  if (w->flowFile || w->tracing || (env && atoi(env) == 0)) {
    w->modelled++;
    return simModelRun(w, plans, start, end, rankEnd);
  }
  if (w->memo == NULL) {
    w->memo = calloc(1, sizeof(*w->memo));
    if (w->memo == NULL) return ncclSystemError;
    w->memo->bytes0 = malloc(sizeof(double) * nLinks);
    w->memo->busy0 = malloc(sizeof(double) * nLinks);
    if (!w->memo->bytes0 || !w->memo->busy0) return ncclSystemError;
  }
  struct simMemo* m = w->memo;
  double t0 = 0;
  for (int r = 0; r < w->n; r++)
    if (start[r] > t0) t0 = start[r];
  uint64_t k1, k2;
  planKey(w, plans, &k1, &k2);
  int dataflow = w->fabric.calib.model == SIM_MODEL_DATAFLOW;
  if (dataflow)
    for (int r = 0; r < w->n; r++) k1 = h64(k1, (uint64_t)llround((t0 - start[r]) * 1e9));
  m->clock++;
  for (int i = 0; i < MEMO_ENTRIES; i++) {
    struct memoEntry* e = &m->e[i];
    if (e->used == 0 || e->key != k1 || e->key2 != k2) continue;
    e->used = m->clock;
    for (int j = 0; j < e->nlinks; j++) {
      w->linkBytes[e->links[j]] += e->bytes[j];
      w->linkBusy[e->links[j]] += e->busy[j];
    }
    w->nextFlowId += e->flows;
    w->reused++;
    *end = t0 + e->duration;
    endsAt(w->n, t0, e->rankEnd, e->duration, rankEnd);
    return ncclSuccess;
  }
  memcpy(m->bytes0, w->linkBytes, sizeof(double) * nLinks);
  memcpy(m->busy0, w->linkBusy, sizeof(double) * nLinks);
  uint64_t flows0 = w->nextFlowId;
  w->modelled++;
  double* ends = rankEnd;
  if (dataflow && ends == NULL) {
    ends = malloc(sizeof(double) * w->n);
    if (ends == NULL) return ncclSystemError;
  }
  ncclResult_t res = simModelRun(w, plans, start, end, ends);
  if (res != ncclSuccess) {
    if (ends != rankEnd) free(ends);
    return res;
  }
  /* remember it, in the least recently used entry */
  struct memoEntry* e = &m->e[0];
  for (int i = 1; i < MEMO_ENTRIES; i++)
    if (m->e[i].used < e->used) e = &m->e[i];
  int changed = 0;
  for (int l = 0; l < nLinks; l++) changed += w->linkBytes[l] != m->bytes0[l] || w->linkBusy[l] != m->busy0[l];
  free(e->links), free(e->bytes), free(e->busy), free(e->rankEnd);
  memset(e, 0, sizeof(*e));
  if (dataflow) { /* the ends relative to the latest start */
    e->rankEnd = malloc(sizeof(double) * w->n);
    if (e->rankEnd)
      for (int r = 0; r < w->n; r++) e->rankEnd[r] = ends[r] - t0;
    if (ends != rankEnd) free(ends);
    if (e->rankEnd == NULL) return ncclSuccess; /* not remembered */
  }
  e->links = malloc(sizeof(int) * (changed + 1));
  e->bytes = malloc(sizeof(double) * (changed + 1));
  e->busy = malloc(sizeof(double) * (changed + 1));
  if (!e->links || !e->bytes || !e->busy) return ncclSuccess; /* not remembered */
  for (int l = 0; l < nLinks; l++)
    if (w->linkBytes[l] != m->bytes0[l] || w->linkBusy[l] != m->busy0[l]) {
      e->links[e->nlinks] = l;
      e->bytes[e->nlinks] = w->linkBytes[l] - m->bytes0[l];
      e->busy[e->nlinks] = w->linkBusy[l] - m->busy0[l];
      e->nlinks++;
    }
  e->key = k1;
  e->key2 = k2;
  e->duration = *end - t0;
  e->flows = w->nextFlowId - flows0;
  e->used = m->clock;
  return ncclSuccess;
}
