/* Max-min fair sharing of links by flows, by progressive filling: every
 * unfrozen flow's bound is the smallest of its own cap and, over its links,
 * the link's remaining capacity divided by its unfrozen flows; the flows at
 * the smallest bound are frozen at it and their links' capacity goes down;
 * repeat until all are frozen. The rates hold until the next flow ends;
 * then they are computed again for the flows left. */
#include <math.h>
#include <stdlib.h>
#include "sim.h"

/* A flow's bound now: its cap, or its tightest link's fair share. */
static double bound(const struct simFlow* f, const double* cap, const int* cnt) {
  double b = f->cap > 0 ? f->cap : INFINITY;
  for (int k = 0; k < f->nlinks; k++) {
    double s = cap[f->links[k]] / cnt[f->links[k]];
    if (s < b) b = s;
  }
  return b;
}

void simFlowsFill(const struct simFlow* flows, const int* act, int nact, const double* linkBps, double* cap, int* cnt,
                  double* rate) {
  for (int a = 0; a < nact; a++) {
    const struct simFlow* f = &flows[act[a]];
    for (int k = 0; k < f->nlinks; k++) {
      cap[f->links[k]] = linkBps[f->links[k]];
      cnt[f->links[k]] = 0;
    }
  }
  for (int a = 0; a < nact; a++) {
    const struct simFlow* f = &flows[act[a]];
    for (int k = 0; k < f->nlinks; k++) cnt[f->links[k]]++;
    rate[act[a]] = -1;
  }
  int unfrozen = nact;
  while (unfrozen > 0) {
    double best = INFINITY;
    for (int a = 0; a < nact; a++) {
      int i = act[a];
      if (rate[i] >= 0) continue;
      double b = bound(&flows[i], cap, cnt);
      if (b < best) best = b;
    }
    if (!isfinite(best)) best = 1e30; /* no link, no cap: instant */
    double tol = best * (1 + 1e-12);
    for (int a = 0; a < nact; a++) {
      int i = act[a];
      if (rate[i] >= 0) continue;
      double b = bound(&flows[i], cap, cnt);
      if (b > tol) continue;
      rate[i] = best;
      unfrozen--;
      for (int k = 0; k < flows[i].nlinks; k++) {
        int l = flows[i].links[k];
        cap[l] -= best;
        if (cap[l] < 0) cap[l] = 0;
        cnt[l]--;
      }
    }
  }
}

ncclResult_t simFlowsRun(struct simFlow* flows, int nflows, const double* linkBps, int nLinks) {
  double* cap = malloc(sizeof(double) * nLinks);
  int* cnt = calloc(nLinks, sizeof(int));
  double* rem = malloc(sizeof(double) * (nflows + 1));
  double* rate = malloc(sizeof(double) * (nflows + 1));
  int* act = malloc(sizeof(int) * (nflows + 1));
  if (!cap || !cnt || !rem || !rate || !act) {
    free(cap), free(cnt), free(rem), free(rate), free(act);
    return ncclSystemError;
  }
  int nact = 0;
  for (int i = 0; i < nflows; i++) {
    flows[i].end = 0;
    rem[i] = flows[i].bytes;
    if (flows[i].bytes > 0) act[nact++] = i;
  }
  double t = 0;
  while (nact > 0) {
    simFlowsFill(flows, act, nact, linkBps, cap, cnt, rate);
    /* the next end */
    double dt = INFINITY;
    for (int a = 0; a < nact; a++) {
      double d = rem[act[a]] / rate[act[a]];
      if (d < dt) dt = d;
    }
    t += dt;
    int kept = 0;
    for (int a = 0; a < nact; a++) {
      int i = act[a];
      rem[i] -= rate[i] * dt;
      if (rem[i] <= flows[i].bytes * 1e-12) flows[i].end = t;
      else act[kept++] = i;
    }
    nact = kept;
  }
  free(cap), free(cnt), free(rem), free(rate), free(act);
  return ncclSuccess;
}
