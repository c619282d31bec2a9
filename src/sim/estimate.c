/* ncclGroupSimulateEnd on every backend (docs/simulation.md, "Outputs"):
 * the group's time from the sim's model, nothing launched, nothing sent.
 *
 * Two ways, per communicator of the group:
 *   - a sim communicator whose every rank is in the group (one thread
 *     driving them all): every rank's own plan, modelled together;
 *   - otherwise (a rank per thread or process, and the cpu and cuda
 *     backends) this rank alone: the other ranks' plans are built from
 *     copies of this communicator with their rank put in (their ring
 *     positions from the ring order every rank shares) and this rank's
 *     tasks, which every rank of a collective calls alike; a send or
 *     receive becomes the matching receive or send on its peer (the
 *     peers' own other transfers are not known here and not modelled).
 *     The connections are the sim's: one never-written array whose index
 *     names the peer. The fabric is ANYCCL_SIM_FABRIC, or the default one
 *     shaped like the communicator (its hosts, the most ranks on one); the
 *     calibration is ANYCCL_SIM_CALIB, or the device kind's shipped file
 *     (topologies/sim_{h100,h200,cpu}.calib, built in).
 * The estimate is the latest end over the ranks and over the group's
 * communicators, in microseconds; the tasks are freed as a group end would. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "checks.h"
#include "comm.h"
#include "plan.h"
#include "sim.h"
#include "sim_calibs.h" /* generated from topologies/sim_*.calib (CMakeLists.txt) */

static void freeTaskList(struct anycclTask* t) {
  while (t) {
    struct anycclTask* n = t->next;
    free(t);
    t = n;
  }
}

/* Model the plans on w without leaving a trace: no flows written, the
 * world's link totals kept. */
static ncclResult_t modelQuiet(struct anycclSimWorld* w, struct anycclPlan** plans, const double* start, double* e) {
  size_t bytes = sizeof(double) * w->fabric.nLinks;
  double* saved = malloc(2 * bytes + 1);
  if (saved == NULL) return ncclSystemError;
  memcpy(saved, w->linkBytes, bytes), memcpy(saved + w->fabric.nLinks, w->linkBusy, bytes);
  FILE* flows = w->flowFile;
  uint64_t ids = w->nextFlowId;
  int tracing = w->tracing;
  w->flowFile = NULL;
  w->tracing = 0;
  ncclResult_t res = simModelRun(w, plans, start, e, NULL);
  w->flowFile = flows;
  w->tracing = tracing;
  w->nextFlowId = ids;
  memcpy(w->linkBytes, saved, bytes), memcpy(w->linkBusy, saved + w->fabric.nLinks, bytes);
  free(saved);
  return res;
}

/* Every rank of c's sim world has tasks in the group? */
static int worldInGroup(const struct ncclComm* c, const struct ncclComm* comms) {
  int have = 0;
  for (const struct ncclComm* d = comms; d; d = d->groupNext) have += d->sim == c->sim && d->taskHead != NULL;
  return have == c->sim->n; /* a rank joins its world once: distinct comms are distinct ranks */
}

/* A sim world all in the group: every rank's own plan. */
static ncclResult_t estimateWorld(struct ncclComm* c, struct ncclComm* comms, double* worst) {
  struct anycclSimWorld* w = c->sim;
  struct anycclPlan** plans = calloc(w->n, sizeof(*plans));
  double* start = calloc(w->n, sizeof(double));
  ncclResult_t res = plans && start ? ncclSuccess : ncclSystemError;
  int have = 0;
  for (struct ncclComm* d = comms; d; d = d->groupNext) {
    if (d->sim != w || d->taskHead == NULL) continue;
    struct anycclPlan* p = NULL;
    if (res == ncclSuccess) res = anycclBuildPlan(d, d->taskHead, &p);
    freeTaskList(d->taskHead);
    d->taskHead = d->taskTail = NULL;
    if (p && plans && plans[d->rank] == NULL) plans[d->rank] = p, have++;
    else anycclPlanFree(p);
  }
  double e = 0;
  if (res == ncclSuccess && have == w->n) res = modelQuiet(w, plans, start, &e); /* have < n: only empty tasks */
  if (res == ncclSuccess && e > *worst) *worst = e;
  for (int r = 0; plans && r < w->n; r++) anycclPlanFree(plans[r]);
  free(plans), free(start);
  return res;
}

/* ---- one rank: the others' plans built from copies of its communicator ---- */
static int cmpU64x2(const void* a, const void* b) {
  const uint64_t *x = a, *y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Where c's ranks run: hosts numbered in the order of their first rank,
 * ranks within a host in rank order: gpu[r] = host * *most + index, *most
 * the most ranks one host has. O(n log n). */
static ncclResult_t placeRanks(const struct ncclComm* c, int* gpu, int* most) {
  int n = c->nRanks, nh = 0;
  uint64_t* key = malloc(sizeof(uint64_t) * 2 * n); /* (host hash, rank), sorted */
  uint64_t* run = malloc(sizeof(uint64_t) * 2 * n); /* per host: (its first rank, where its ranks start in key) */
  if (key == NULL || run == NULL) {
    free(key), free(run);
    return ncclSystemError;
  }
  for (int r = 0; r < n; r++) key[2 * r] = c->peerInfo[r].hostHash, key[2 * r + 1] = (uint64_t)r;
  qsort(key, n, 2 * sizeof(uint64_t), cmpU64x2);
  *most = 1;
  for (int i = 0; i < n; i++) {
    if (i == 0 || key[2 * i] != key[2 * i - 2]) run[2 * nh] = key[2 * i + 1], run[2 * nh + 1] = (uint64_t)i, nh++;
    int k = i - (int)run[2 * nh - 1] + 1;
    if (k > *most) *most = k;
  }
  qsort(run, nh, 2 * sizeof(uint64_t), cmpU64x2);
  for (int h = 0; h < nh; h++) {
    int s = (int)run[2 * h + 1];
    for (int i = s; i < n && key[2 * i] == key[2 * s]; i++) gpu[key[2 * i + 1]] = h * *most + (i - s);
  }
  free(key), free(run);
  return ncclSuccess;
}

/* 1 if c's GPU is an H100 (the driver's /proc entry names the model). */
static int isH100(const struct ncclComm* c) {
  char path[128], line[256], bus[32];
  snprintf(bus, sizeof(bus), "%s", c->busId);
  for (char* p = bus; *p; p++) *p = (char)tolower((unsigned char)*p);
  snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%s/information", bus);
  FILE* f = fopen(path, "r");
  int h100 = 0;
  while (f && !h100 && fgets(line, sizeof(line), f)) h100 = strncmp(line, "Model:", 6) == 0 && strstr(line, "H100");
  if (f) fclose(f);
  return h100;
}

/* The fabric c's ranks are placed on (gpu[r]: rank r's GPU there). */
static ncclResult_t rankFabric(const struct ncclComm* c, struct simFabric* f, int* gpu) {
  char err[1024];
  int most = 1;
  ncclResult_t res = placeRanks(c, gpu, &most);
  if (res != ncclSuccess) return res;
  const char* path = getenv("ANYCCL_SIM_FABRIC");
  if (path && path[0]) {
    res = simFabricLoad(path, c->nRanks, f, err, sizeof(err));
  } else {
    struct simShape shape = {c->nHosts > 1 || most > 8 ? most : 8, "cpu", simCalib_cpu};
    if (c->cuda) shape.calibName = isH100(c) ? "h100" : "h200";
    if (c->cuda) shape.calibText = isH100(c) ? simCalib_h100 : simCalib_h200;
    res = simFabricShape(c->nRanks, &shape, f, err, sizeof(err));
  }
  if (res != ncclSuccess) {
    WARN("ncclGroupSimulateEnd: %s", err);
    return res;
  }
  /* hosts of `most` GPUs as the ranks run; a fabric file with smaller or
   * fewer hosts takes rank r as its GPU r */
  int fits = f->gpusPerHost >= most;
  for (int r = 0; r < c->nRanks && fits; r++)
    fits = gpu[r] / most < f->hosts;
  for (int r = 0; r < c->nRanks; r++) gpu[r] = fits ? gpu[r] / most * f->gpusPerHost + gpu[r] % most : r;
  return ncclSuccess;
}

/* Rank r's tasks, from this rank's: collectives alike (in-place stays in
 * place at r's offset), a send to r as r's receive from me and a receive
 * from r as r's send to me (on buffers of their own: no dependency cut). */
static ncclResult_t rankTasks(const struct ncclComm* c, int r, struct anycclTask** out) {
  struct anycclTask *head = NULL, *tail = NULL;
  int me = c->rank;
  for (const struct anycclTask* t = c->taskHead; t; t = t->next) {
    struct anycclTask u = *t;
    u.next = NULL;
    size_t bytes = t->count * anycclTypeSize(t->type);
    if (r == me) {
    } else if (t->func == FUNC_SEND || t->func == FUNC_RECV) {
      if (t->root != r) continue;
      u.func = t->func == FUNC_SEND ? FUNC_RECV : FUNC_SEND;
      u.root = me;
      u.sendbuff = (const void*)(uintptr_t)0x1000;
      u.recvbuff = (void*)((uintptr_t)1 << 46);
    } else if (t->func == FUNC_ALLGATHER && (const char*)t->sendbuff == (const char*)t->recvbuff + me * bytes) {
      u.sendbuff = (const char*)t->recvbuff + r * bytes;
    } else if (t->func == FUNC_REDUCESCATTER && (const char*)t->recvbuff == (const char*)t->sendbuff + me * bytes) {
      u.recvbuff = (char*)t->sendbuff + r * bytes;
    }
    struct anycclTask* n = malloc(sizeof(*n));
    if (n == NULL) {
      freeTaskList(head);
      return ncclSystemError;
    }
    *n = u;
    if (tail) tail->next = n;
    else head = n;
    tail = n;
  }
  *out = head;
  return ncclSuccess;
}

/* Give plan *pp (NULL: none) nph phases, the missing ones empty (a rank
 * without send/recv in the group, or with none at all). */
static ncclResult_t padPlan(struct anycclPlan** pp, struct ncclComm* comm, const struct anycclPlan* like) {
  int nph = like->nphases;
  struct anycclPlan* p = *pp;
  if (p == NULL) {
    p = calloc(1, sizeof(*p));
    if (p == NULL) return ncclSystemError;
    p->comm = comm;
    *pp = p;
  }
  if (p->nphases > nph) {
    WARN("ncclGroupSimulateEnd: a peer's plan has %d phases, this rank's %d", p->nphases, nph);
    return ncclInternalError;
  }
  if (p->nphases == nph) return ncclSuccess;
  struct anycclPhase* ph = realloc(p->phases, sizeof(*ph) * nph);
  if (ph == NULL) return ncclSystemError;
  memset(ph + p->nphases, 0, sizeof(*ph) * (nph - p->nphases));
  for (int i = p->nphases; i < nph; i++) {
    ph[i].func = like->phases[i].func;
    ph[i].what = like->phases[i].what;
    ph[i].elemSize = like->phases[i].elemSize;
  }
  p->phases = ph;
  p->nphases = nph;
  return ncclSuccess;
}

/* Rank r's communicator as the planner and the model see it: c's settings
 * (fixed since init: read while c's own threads run), rank r, the sim's
 * connections; ring positions are the caller's. */
static void shadowOf(const struct ncclComm* c, int r, struct anycclSimWorld* w, struct ncclComm* s) {
  s->rank = r;
  s->nRanks = c->nRanks;
  s->cudaDev = c->cudaDev;
  s->exec = c->exec;
  s->peerInfo = c->peerInfo;
  s->localRanks = c->localRanks;
  s->nHosts = c->nHosts;
  s->nChannels = c->nChannels;
  s->ringOrder = c->ringOrder;
  s->nslots = c->nslots;
  s->slotBytes = c->slotBytes;
  s->scratch = c->scratch;
  s->peerThreshold = c->peerThreshold;
  s->opTimeoutSec = c->opTimeoutSec;
  s->directThreshold = c->directThreshold;
  s->meshAgMax = c->meshAgMax;
  s->forceAlgo = c->forceAlgo;
  s->cuda = c->cuda;
  s->sliceBytes = c->sliceBytes;
  s->p2pSliceBytes = c->p2pSliceBytes;
  s->minChannelBytes = c->minChannelBytes;
  s->channelBytes = c->channelBytes;
  s->chainBytes = c->chainBytes;
  s->chainBytesPast64 = c->chainBytesPast64;
  s->baseChannels = c->baseChannels;
  s->llThreshold = c->llThreshold;
  s->nvlinkAll = c->nvlinkAll;
  s->p2pChannels = c->p2pChannels < 1 ? 1 : c->p2pChannels; /* the cpu backend: one connection per pair */
  s->p2pSend = w->p2pConns;
  s->p2pRecv = w->p2pConns + c->nRanks;
  s->sim = w;
}

static ncclResult_t estimateRank(struct ncclComm* c, double* worst) {
  int n = c->nRanks, me = c->rank, nch = c->nChannels;
  struct anycclSimWorld* w = calloc(1, sizeof(*w));
  if (w == NULL) return ncclSystemError;
  int* gpu = c->sim ? NULL : malloc(sizeof(int) * n);
  ncclResult_t res = c->sim ? ncclSuccess : gpu ? rankFabric(c, &w->fabric, gpu) : ncclSystemError;
  if (res != ncclSuccess) {
    free(gpu), free(w);
    return res;
  }
  if (c->sim) w->fabric = c->sim->fabric; /* its world's, not copied */
  else w->fabric.gpuOf = gpu;
  w->n = n;
  w->noSymm = !c->cuda && !c->sim;
  w->ringOrder = c->ringOrder;
  size_t connBytes = 2 * (size_t)n * sizeof(struct anycclConn);
  void* conns = mmap(NULL, connBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  w->p2pConns = conns == MAP_FAILED ? NULL : conns;
  w->linkBytes = calloc(w->fabric.nLinks + 1, sizeof(double));
  w->linkBusy = calloc(w->fabric.nLinks + 1, sizeof(double));
  struct ncclComm* sh = calloc(n, sizeof(*sh));
  struct anycclPlan** plans = calloc(n, sizeof(*plans));
  double* start = calloc(n, sizeof(double));
  if (!w->p2pConns || !w->linkBytes || !w->linkBusy || !sh || !plans || !start) {
    WARN("ncclGroupSimulateEnd: out of memory modelling %d ranks", n);
    res = ncclSystemError;
    goto out;
  }
  for (int r = 0; r < n; r++) shadowOf(c, r, w, &sh[r]);
  for (int ch = 0; ch < nch; ch++)
    for (int i = 0; i < n; i++) sh[c->ringOrder[ch * n + i]].ringPos[ch] = i;
  for (int r = 0; r < n && res == ncclSuccess; r++) {
    struct anycclTask* tasks = NULL;
    res = rankTasks(c, r, &tasks);
    if (res == ncclSuccess) res = anycclBuildPlan(&sh[r], tasks, &plans[r]);
    freeTaskList(tasks);
  }
  double e = 0;
  if (res == ncclSuccess && plans[me] != NULL) { /* NULL: nothing to move */
    for (int r = 0; r < n && res == ncclSuccess; r++)
      if (r != me) res = padPlan(&plans[r], &sh[r], plans[me]);
    if (res == ncclSuccess) res = simModelRun(w, plans, start, &e, NULL);
  }
  if (res == ncclSuccess && e > *worst) *worst = e;
out:
  for (int r = 0; plans && r < n; r++) anycclPlanFree(plans[r]);
  for (int r = 0; sh && r < n; r++) anycclRingProgsFree(&sh[r]);
  free(plans), free(start), free(sh);
  free(w->linkBytes), free(w->linkBusy);
  if (w->p2pConns) munmap(w->p2pConns, connBytes);
  if (!c->sim) simFabricFree(&w->fabric), free(gpu);
  free(w);
  return res;
}

ncclResult_t anycclSimEstimateGroup(struct ncclComm* comms, float* us) {
  double worst = 0;
  ncclResult_t res = ncclSuccess;
  for (struct ncclComm* c = comms; c; c = c->groupNext) c->inGroupList = 0;
  for (struct ncclComm* c = comms; c && res == ncclSuccess; c = c->groupNext)
    if (c->sim && c->taskHead && worldInGroup(c, comms)) res = estimateWorld(c, comms, &worst);
  for (struct ncclComm* c = comms; c; c = c->groupNext) {
    if (c->taskHead && res == ncclSuccess) res = estimateRank(c, &worst);
    freeTaskList(c->taskHead);
    c->taskHead = c->taskTail = NULL;
  }
  *us = (float)(worst * 1e6);
  return res;
}
