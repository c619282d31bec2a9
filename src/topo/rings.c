/* Rings that follow the topology.
 *
 * Every host is one contiguous segment of every ring (so a ring crosses each
 * host boundary exactly once). Channel c picks, on each host, a NIC among
 * those closest to the host's GPUs, spread so that channels use different
 * NICs; the segment starts at the GPU closest to that NIC (where the ring
 * comes in from the previous host) and ends at the next closest (where it
 * leaves), and visits the other GPUs in the order that maximises the
 * narrowest link, then the sum of the links (exact search over subsets up to
 * 12 GPUs a host, greedy beyond). A ring on one host is a cycle and is
 * optimised as one.
 *
 * Without any topology (no NCCL_TOPO_FILE; the sim backend) a host's ranks are
 * taken as GPUs 0..n-1 of one NVSwitch, GPU i on rail (NIC) i's share, and
 * the rings follow the rails: channel c leaves one host and enters the next
 * through GPUs of the same local index, a_c on one hop and b_c = a_c + 1 on
 * the next (hosts alternate: enter a, leave b; enter b, leave a), so no hop
 * between hosts crosses rails (but the closing one of an odd host count),
 * and channels spread a_c over the GPUs, hence over the NICs. A host
 * without a topology among hosts with one keeps rank order. */
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "debug.h"
#include "topo.h"

#define EXACT_MAX 12

/* One scalar per link that orders by path type first, then bandwidth. */
static double linkScore(struct anycclTopoPath p) {
  double bw = p.bw < 999999.0 ? p.bw : 999999.0;
  return (double)(TOPO_PATH_DIS - p.type) * 1e6 + bw;
}

struct segment {
  int n;           /* ranks on the host */
  const int* gpu;  /* their GPU index in the host */
  double* w;       /* [i * n + j]: score of the link i -> j */
};

/* Order the members: a path s -> ... -> t (t < 0: a cycle through s).
 * Exact: first the best narrowest link B, then the best sum using links >= B. */
static ncclResult_t orderExact(const struct segment* sg, int s, int t, int* out) {
  int n = sg->n, full = (1 << n) - 1;
  double *bott = NULL, *sum = NULL;
  signed char* from = NULL;
  ncclResult_t res = ncclSuccess;
  size_t cells = (size_t)(full + 1) * n;
  bott = malloc(cells * sizeof(*bott));
  sum = malloc(cells * sizeof(*sum));
  from = calloc(cells, 1);
  if (!bott || !sum || !from) {
    WARN("Rings: out of memory ordering %d GPUs", n);
    res = ncclSystemError;
    goto out;
  }
  const double NONE = -1.0;
  /* Phase 1: the best narrowest link of a path from s covering mask, ending at j. */
  for (size_t i = 0; i < cells; i++) bott[i] = NONE;
  bott[(size_t)(1 << s) * n + s] = 1e300;
  for (int mask = 1; mask <= full; mask++) {
    if (!(mask & (1 << s))) continue;
    for (int j = 0; j < n; j++) {
      double b = bott[(size_t)mask * n + j];
      if (b == NONE) continue;
      for (int k = 0; k < n; k++) {
        if (mask & (1 << k)) continue;
        if (k == t && (mask | (1 << k)) != full) continue; /* t comes last */
        double nb = b < sg->w[j * n + k] ? b : sg->w[j * n + k];
        double* cell = bott + (size_t)(mask | (1 << k)) * n + k;
        if (nb > *cell) *cell = nb;
      }
    }
  }
  double B = NONE;
  for (int j = 0; j < n; j++) {
    double b = bott[(size_t)full * n + j];
    if (b == NONE || (t >= 0 && j != t)) continue;
    if (t < 0 && n > 1 && sg->w[j * n + s] < b) b = sg->w[j * n + s]; /* closing link of the cycle */
    if (b > B) B = b;
  }
  /* Phase 2: the best sum over links >= B. */
  for (size_t i = 0; i < cells; i++) sum[i] = NONE;
  sum[(size_t)(1 << s) * n + s] = 0;
  for (int mask = 1; mask <= full; mask++) {
    if (!(mask & (1 << s))) continue;
    for (int j = 0; j < n; j++) {
      double v = sum[(size_t)mask * n + j];
      if (v == NONE) continue;
      for (int k = 0; k < n; k++) {
        if ((mask & (1 << k)) || sg->w[j * n + k] < B) continue;
        if (k == t && (mask | (1 << k)) != full) continue;
        /* ties (e.g. all GPUs on one NVSwitch) go to ascending order: 0 1 2 ... */
        double nv = v + sg->w[j * n + k] - 1e-6 * ((k - j + n) % n);
        size_t c = (size_t)(mask | (1 << k)) * n + k;
        if (nv > sum[c]) sum[c] = nv, from[c] = (signed char)j;
      }
    }
  }
  int end = -1;
  double bestV = NONE;
  for (int j = 0; j < n; j++) {
    double v = sum[(size_t)full * n + j];
    if (v == NONE || (t >= 0 && j != t)) continue;
    if (t < 0 && n > 1) {
      if (sg->w[j * n + s] < B) continue;
      v += sg->w[j * n + s] - 1e-6 * ((s - j + n) % n);
    }
    if (v > bestV) bestV = v, end = j;
  }
  if (end < 0) { /* cannot happen: every link has a score */
    WARN("Rings: no order found for %d GPUs", n);
    res = ncclInternalError;
    goto out;
  }
  for (int pos = n - 1, mask = full, j = end; pos >= 0; pos--) {
    out[pos] = j;
    int prev = from[(size_t)mask * n + j];
    mask &= ~(1 << j);
    j = prev;
  }
out:
  free(bott);
  free(sum);
  free(from);
  return res;
}

/* Greedy for large hosts: always the best next link; t last. */
static void orderGreedy(const struct segment* sg, int s, int t, int* out) {
  int n = sg->n;
  char* used = calloc(n, 1);
  if (used == NULL) {
    for (int i = 0; i < n; i++) out[i] = i;
    return;
  }
  out[0] = s;
  used[s] = 1;
  if (t >= 0) used[t] = 1;
  int last = n - (t >= 0 && t != s);
  for (int pos = 1; pos < last; pos++) {
    int cur = out[pos - 1], best = -1;
    for (int k = 0; k < n; k++)
      if (!used[k] && (best < 0 || sg->w[cur * n + k] > sg->w[cur * n + best])) best = k;
    out[pos] = best;
    used[best] = 1;
  }
  if (t >= 0 && t != s) out[n - 1] = t;
  free(used);
}

/* Better NIC path for a GPU: lower type, then more bandwidth. */
static int netBetter(struct anycclTopoPath x, struct anycclTopoPath y) {
  return x.type < y.type || (x.type == y.type && x.bw > y.bw);
}

/* NICs closest to some GPU of the segment, in the host's NIC order. */
static int candidateNics(const struct anycclTopoHost* h, const struct segment* sg, int* cand) {
  int k = 0;
  for (int n = 0; n < h->nNets; n++) {
    int useful = 0;
    for (int i = 0; i < sg->n && !useful; i++) {
      int g = sg->gpu[i];
      if (g < 0) continue;
      struct anycclTopoPath p = anycclTopoNetPath(h, g, n);
      int isBest = 1;
      for (int m = 0; m < h->nNets && isBest; m++)
        if (netBetter(anycclTopoNetPath(h, g, m), p)) isBest = 0;
      useful = isBest;
    }
    if (useful) cand[k++] = n;
  }
  return k;
}

/* The ends of a segment for NIC nic: s the member closest to it (ties rotate
 * with round, so channels sharing a NIC start at different GPUs), t the
 * closest of the others. */
static void pickEnds(const struct anycclTopoHost* h, const struct segment* sg, int nic, int round, int* s, int* t) {
  int n = sg->n, best = 0, tied = 0;
  for (int i = 1; i < n; i++)
    if (netBetter(anycclTopoNetPath(h, sg->gpu[i], nic), anycclTopoNetPath(h, sg->gpu[best], nic))) best = i;
  struct anycclTopoPath pb = anycclTopoNetPath(h, sg->gpu[best], nic);
  for (int i = 0; i < n; i++) tied += !netBetter(pb, anycclTopoNetPath(h, sg->gpu[i], nic));
  for (int i = 0, k = round % tied; i < n; i++) {
    if (netBetter(pb, anycclTopoNetPath(h, sg->gpu[i], nic))) continue;
    if (k-- == 0) {
      *s = i;
      break;
    }
  }
  *t = -1;
  for (int i = 0; i < n; i++) {
    if (i == *s) continue;
    if (*t < 0 || netBetter(anycclTopoNetPath(h, sg->gpu[i], nic), anycclTopoNetPath(h, sg->gpu[*t], nic))) *t = i;
  }
}

void anycclTopoRingsFree(struct anycclTopoRings* r) {
  if (r == NULL) return;
  free(r->order);
  free(r->nic);
  free(r->gpu);
  free(r);
}

ncclResult_t anycclTopoBuildRings(const struct anycclTopoHost* const* hosts, int nHosts,
                                  const struct anycclTopoRank* ranks, int nRanks, int nChannels,
                                  struct anycclTopoRings** out) {
  if (nRanks < 1 || nChannels < 1 || nHosts < 1 || ranks == NULL || hosts == NULL) {
    WARN("Rings: need ranks (%d), channels (%d) and hosts (%d)", nRanks, nChannels, nHosts);
    return ncclInvalidArgument;
  }
  ncclResult_t res = ncclSuccess;
  struct anycclTopoRings* r = calloc(1, sizeof(*r));
  int *hostOrder = NULL, *members = NULL, *start = NULL, *count = NULL, *cand = NULL, *seq = NULL;
  double* w = NULL;
  if (r == NULL) return ncclSystemError;
  r->nRanks = nRanks, r->nHosts = nHosts, r->nChannels = nChannels;
  r->order = malloc(sizeof(int) * nRanks * nChannels);
  r->nic = malloc(sizeof(int) * nHosts * nChannels);
  r->gpu = malloc(sizeof(int) * nRanks);
  hostOrder = malloc(sizeof(int) * nHosts);
  members = malloc(sizeof(int) * nRanks);
  start = calloc(nHosts + 1, sizeof(int));
  count = calloc(nHosts, sizeof(int));
  seq = malloc(sizeof(int) * nRanks);
  if (!r->order || !r->nic || !r->gpu || !hostOrder || !members || !start || !count || !seq) {
    res = ncclSystemError;
    goto fail;
  }
  for (int i = 0; i < nHosts * nChannels; i++) r->nic[i] = -1;
  /* Ranks per host, hosts in the order of their first rank. */
  int nUsed = 0;
  for (int q = 0; q < nRanks; q++) {
    int h = ranks[q].host;
    if (h < 0 || h >= nHosts) {
      WARN("Rings: rank %d says it is on host %d; there are %d hosts", q, h, nHosts);
      res = ncclInvalidArgument;
      goto fail;
    }
    r->gpu[q] = -1;
    if (hosts[h]) {
      r->gpu[q] = anycclTopoFindGpu(hosts[h], ranks[q].busId);
      if (r->gpu[q] < 0) {
        WARN("Rings: rank %d has bus id %s, which is no GPU of host %d (%s) in its topology", q, ranks[q].busId, h,
             hosts[h]->name);
        res = ncclInvalidArgument;
        goto fail;
      }
    }
    if (count[h]++ == 0) hostOrder[nUsed++] = h;
  }
  for (int i = 0, off = 0; i < nUsed; i++) start[hostOrder[i]] = off, off += count[hostOrder[i]];
  memset(count, 0, sizeof(int) * nHosts);
  for (int q = 0; q < nRanks; q++) {
    int h = ranks[q].host;
    members[start[h] + count[h]++] = q;
  }
  int maxNets = 1, anyTopo = 0;
  for (int h = 0; h < nHosts; h++) {
    if (hosts[h] && hosts[h]->nNets > maxNets) maxNets = hosts[h]->nNets;
    anyTopo |= hosts[h] != NULL;
  }
  cand = malloc(sizeof(int) * maxNets);
  if (cand == NULL) {
    res = ncclSystemError;
    goto fail;
  }
  for (int u = 0; u < nUsed; u++) {
    int h = hostOrder[u], n = count[h], *mem = members + start[h];
    const struct anycclTopoHost* host = hosts[h];
    if (!anyTopo && n > 1 && nUsed > 1) { /* rails, above */
      for (int c = 0; c < nChannels; c++) {
        int a = nChannels >= n ? c % n : c * n / nChannels, b = (a + 1) % n;
        int* o = r->order + c * nRanks + start[h];
        o[0] = mem[u % 2 ? b : a];
        for (int j = 0; j < n - 2; j++) o[1 + j] = mem[(a + 2 + j) % n];
        o[n - 1] = mem[u % 2 ? a : b];
      }
      continue;
    }
    if (host == NULL || n == 1) { /* rank order */
      for (int c = 0; c < nChannels; c++) memcpy(r->order + c * nRanks + start[h], mem, sizeof(int) * n);
      if (host && nUsed > 1 && host->nNets > 0) {
        int gpuArr[1] = {r->gpu[mem[0]]};
        struct segment one = {1, gpuArr, NULL};
        int k = candidateNics(host, &one, cand);
        for (int c = 0; c < nChannels; c++) r->nic[c * nHosts + h] = cand[k >= nChannels ? c * k / nChannels : c % k];
      }
      continue;
    }
    int* gpus = malloc(sizeof(int) * n);
    free(w);
    w = malloc(sizeof(double) * n * n);
    if (gpus == NULL || w == NULL) {
      free(gpus);
      res = ncclSystemError;
      goto fail;
    }
    for (int i = 0; i < n; i++) gpus[i] = r->gpu[mem[i]];
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) w[i * n + j] = linkScore(anycclTopoGpuPath(host, gpus[i], gpus[j]));
    struct segment sg = {n, gpus, w};
    int k = nUsed > 1 ? candidateNics(host, &sg, cand) : 0;
    for (int c = 0; c < nChannels; c++) {
      int s = 0, t = -1;
      if (k > 0) {
        int idx = k >= nChannels ? c * k / nChannels : c % k;
        int nic = cand[idx];
        r->nic[c * nHosts + h] = nic;
        pickEnds(host, &sg, nic, k >= nChannels ? 0 : c / k, &s, &t);
      } else if (nUsed > 1) {
        s = 0, t = n - 1; /* no NIC known: any two ends */
      }
      if (n <= EXACT_MAX) res = orderExact(&sg, s, t, seq);
      else orderGreedy(&sg, s, t, seq);
      if (res != ncclSuccess) {
        free(gpus);
        goto fail;
      }
      for (int i = 0; i < n; i++) r->order[c * nRanks + start[h] + i] = mem[seq[i]];
    }
    free(gpus);
  }
  free(w);
  free(hostOrder);
  free(members);
  free(start);
  free(count);
  free(cand);
  free(seq);
  *out = r;
  return ncclSuccess;
fail:
  free(w);
  free(hostOrder);
  free(members);
  free(start);
  free(count);
  free(cand);
  free(seq);
  anycclTopoRingsFree(r);
  return res;
}
