/* ANYCCL_TRACE: the Chrome/Perfetto trace writer shared by the executors
 * (include/trace.h). One file per process; every writer appends between
 * anycclTraceLock and anycclTraceUnlock, which leaves the file a complete
 * JSON object (the closing is rewritten after the last event each time). */
#define _GNU_SOURCE
#include "trace.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "checks.h"
#include "comm.h"
#include "debug.h"
#include "param.h"
#include "plan.h"
#include "rt.h"

static pthread_mutex_t traceLock = PTHREAD_MUTEX_INITIALIZER;
static FILE* traceFile;
static int traceFailed;
static long traceBodyEnd;
static uint64_t traceEvents;
static uint64_t tracePidKeys[64];
static int tracePids;

int anycclTraceOn(void) {
  const char* p = anycclParamStr(PARAM_TRACE);
  return p && p[0];
}

ncclResult_t anycclTraceAlloc(struct ncclComm* comm, uint64_t key) {
  if (!anycclTraceOn() || comm->trace) return ncclSuccess;
  int64_t cap = anycclParamInt(PARAM_TRACE_RECORDS);
  if (cap < 1) cap = 1;
  struct anycclTraceBuf* b = calloc(1, sizeof(*b));
  if (b) b->rec = malloc(sizeof(*b->rec) * (size_t)cap);
  if (b == NULL || b->rec == NULL) {
    free(b);
    WARN("ANYCCL_TRACE: no memory for %lld records; lower ANYCCL_TRACE_RECORDS", (long long)cap);
    return ncclSystemError;
  }
  b->cap = (size_t)cap;
  b->maxLane = -1;
  comm->trace = b;
  comm->tracePid = anycclTracePidBase(key) + comm->rank;
  return ncclSuccess;
}

void anycclTraceAddRec(struct anycclTraceBuf* b, int kind, double t0, double t1, uint64_t op, int lane, int peer,
                       int step, double bytes, int func, int net) {
  struct anycclTraceRec* r = anycclTraceNew(b);
  if (r == NULL) return;
  *r = (struct anycclTraceRec){t0, t1, op, bytes, lane, peer, step, (uint8_t)kind, (uint8_t)func, (uint8_t)net, 0};
  if (lane > b->maxLane) b->maxLane = lane;
}

uint64_t anycclTraceKey(const void* id, size_t len) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < len; i++) h = (h ^ ((const unsigned char*)id)[i]) * 0x100000001b3ull;
  return h;
}

int anycclTracePidBase(uint64_t key) {
  pthread_mutex_lock(&traceLock);
  int i = 0;
  while (i < tracePids && tracePidKeys[i] != key) i++;
  if (i == tracePids && tracePids < 64) tracePidKeys[tracePids++] = key;
  pthread_mutex_unlock(&traceLock);
  return 1000000 * (i < 64 ? i : 63);
}

FILE* anycclTraceLock(void) {
  if (!anycclTraceOn()) return NULL;
  pthread_mutex_lock(&traceLock);
  if (traceFile == NULL && !traceFailed) {
    char host[256] = "host", path[4096];
    gethostname(host, sizeof(host) - 1);
    anycclDebugExpandPath(anycclParamStr(PARAM_TRACE), host, (int)getpid(), path, sizeof(path));
    traceFile = fopen(path, "w");
    if (traceFile == NULL) {
      traceFailed = 1;
      WARN("ANYCCL_TRACE=%s: cannot write the trace there; is the directory there and writable?", path);
    } else {
      fprintf(traceFile, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"writer\":\"anyccl\",\"backend\":\"%s\"},"
                         "\"traceEvents\":[",
              anycclRt.name);
      traceBodyEnd = ftell(traceFile);
    }
  }
  if (traceFile == NULL) {
    pthread_mutex_unlock(&traceLock);
    return NULL;
  }
  fseek(traceFile, traceBodyEnd, SEEK_SET);
  return traceFile;
}

void anycclTraceUnlock(FILE* f) {
  if (f == NULL) return;
  traceBodyEnd = ftell(f);
  fputs("\n]}\n", f);
  fflush(f);
  /* a shorter rewrite leaves nothing behind: the file ends at the closing */
  if (ftruncate(fileno(f), ftell(f)) != 0) { /* best effort */
  }
  pthread_mutex_unlock(&traceLock);
}

static void sep(FILE* f) { fputs(traceEvents++ ? ",\n" : "\n", f); }

void anycclTraceProcess(FILE* f, int pid, const char* name, int sortIndex) {
  sep(f);
  fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"%s\"}}", pid, name);
  sep(f);
  fprintf(f, "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", pid,
          sortIndex);
}

static void threadName(FILE* f, int pid, int tid, const char* name) {
  sep(f);
  fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", pid, tid,
          name);
  sep(f);
  fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}", pid,
          tid, tid);
}

void anycclTraceThreads(FILE* f, int pid, int fromLane, int toLane) {
  if (fromLane <= 0) threadName(f, pid, 0, "collectives");
  for (int l = fromLane < 0 ? 0 : fromLane; l <= toLane; l++) {
    char name[32];
    snprintf(name, sizeof(name), "ch%d send", l);
    threadName(f, pid, 1 + 2 * l, name);
    snprintf(name, sizeof(name), "ch%d recv", l);
    threadName(f, pid, 2 + 2 * l, name);
  }
}

void anycclTraceCounter(FILE* f, int pid, const char* name, double ts, double value) {
  sep(f);
  fprintf(f, "{\"ph\":\"C\",\"name\":\"%s\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{\"util\":%.1f}}", name, pid, ts,
          value);
}

void anycclTraceRecWrite(FILE* f, int pid, const struct anycclTraceRec* r) {
  char name[64];
  int tid = 0;
  switch (r->kind) {
    case TR_COLL: snprintf(name, sizeof(name), "%s", anycclFuncName(r->func)); break;
    case TR_LANE: snprintf(name, sizeof(name), "Lane"), tid = 1 + 2 * r->lane; break;
    case TR_SEND: snprintf(name, sizeof(name), "Send-%d-%d", r->peer, r->step), tid = 1 + 2 * r->lane; break;
    case TR_BUFWAIT: snprintf(name, sizeof(name), "BufferWait"), tid = 1 + 2 * r->lane; break;
    case TR_RECV: snprintf(name, sizeof(name), "Recv-%d-%d", r->peer, r->step), tid = 2 + 2 * r->lane; break;
    case TR_RECVWAIT: snprintf(name, sizeof(name), "RecvWait"), tid = 2 + 2 * r->lane; break;
    default: return;
  }
  double dur = r->t1 > r->t0 ? r->t1 - r->t0 : 0;
  sep(f);
  fprintf(f, "{\"ph\":\"X\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"opCount\":%llu",
          name, pid, tid, r->t0, dur, (unsigned long long)r->op);
  if (r->kind == TR_SEND || r->kind == TR_RECV || r->kind == TR_COLL) fprintf(f, ",\"bytes\":%.0f", r->bytes);
  if (r->kind == TR_SEND || r->kind == TR_RECV) fprintf(f, ",\"net\":%d", r->net);
  fputs("}}", f);
}

void anycclTraceFlush(struct ncclComm* comm) {
  struct anycclTraceBuf* b = comm->trace;
  if (b == NULL) return;
  comm->trace = NULL;
  FILE* f = anycclTraceLock();
  if (f) {
    char name[96];
    snprintf(name, sizeof(name), "rank %d (%s)", comm->rank,
             comm->peerInfo && comm->peerInfo[comm->rank].hostId[0] ? comm->peerInfo[comm->rank].hostId : "host");
    anycclTraceProcess(f, comm->tracePid, name, comm->tracePid);
    anycclTraceThreads(f, comm->tracePid, 0, b->maxLane);
    for (size_t i = 0; i < b->n; i++) anycclTraceRecWrite(f, comm->tracePid, &b->rec[i]);
    anycclTraceUnlock(f);
  }
  if (b->dropped)
    WARN("ANYCCL_TRACE: rank %d dropped %llu records past ANYCCL_TRACE_RECORDS=%zu", comm->rank,
         (unsigned long long)b->dropped, b->cap);
  free(b->rec), free(b->gl), free(b->peers);
  free(b);
}

/* ---- the cuda backend's timeline ------------------------------------------------ */
void anycclTraceGpuLaneAdd(struct anycclTraceBuf* b, const struct anycclTraceGpuLane* l, const int32_t* peers) {
  size_t np = peers ? 2 * (size_t)l->nsteps : 0;
  if (b->ngl + 1 + b->npeers + np > b->cap) { /* bounded like the records */
    b->dropped++;
    return;
  }
  if (b->ngl == b->capgl) {
    size_t cap = b->capgl ? 2 * b->capgl : 256;
    struct anycclTraceGpuLane* g = realloc(b->gl, sizeof(*g) * cap);
    if (g == NULL) return;
    b->gl = g, b->capgl = cap;
  }
  if (b->npeers + np > b->cappeers) {
    size_t cap = b->cappeers ? 2 * b->cappeers : 1024;
    while (cap < b->npeers + np) cap *= 2;
    int32_t* p = realloc(b->peers, sizeof(*p) * cap);
    if (p == NULL) return;
    b->peers = p, b->cappeers = cap;
  }
  struct anycclTraceGpuLane* d = &b->gl[b->ngl++];
  *d = *l;
  d->peerOff = (uint32_t)b->npeers;
  if (np) memcpy(b->peers + b->npeers, peers, sizeof(*peers) * np);
  b->npeers += np;
}

static int tlCmp(const void* a, const void* b) {
  const struct anycclTraceTl *x = a, *y = b;
  if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
  if (x->lane != y->lane) return x->lane < y->lane ? -1 : 1;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->what < y->what ? -1 : x->what > y->what; /* a wait's end before the post at the same ns */
}

static const struct anycclTraceGpuLane* glBase;
static int glCmp(const void* a, const void* b) {
  const struct anycclTraceGpuLane *x = &glBase[*(const size_t*)a], *y = &glBase[*(const size_t*)b];
  if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
  if (x->lane != y->lane) return x->lane < y->lane ? -1 : 1;
  return x->phase < y->phase ? -1 : x->phase > y->phase;
}

/* A phase's span over its lanes. */
struct tlPhase {
  uint32_t seq;
  uint16_t phase;
  uint8_t func;
  double bytes, t0, t1;
};

void anycclTraceFromTimeline(struct anycclTraceBuf* b, const struct anycclTraceTl* in, size_t n) {
  struct anycclTraceTl* tl = malloc(sizeof(*tl) * (n + 1));
  size_t* gi = malloc(sizeof(size_t) * (b->ngl + 1));
  struct tlPhase* ph = calloc(b->ngl + 1, sizeof(*ph));
  size_t nph = 0;
  if (!tl || !gi || !ph) goto out;
  memcpy(tl, in, sizeof(*tl) * n);
  qsort(tl, n, sizeof(*tl), tlCmp);
  static pthread_mutex_t sortLock = PTHREAD_MUTEX_INITIALIZER; /* glBase */
  pthread_mutex_lock(&sortLock);
  for (size_t i = 0; i < b->ngl; i++) gi[i] = i;
  glBase = b->gl;
  qsort(gi, b->ngl, sizeof(size_t), glCmp);
  pthread_mutex_unlock(&sortLock);
  size_t g = 0; /* next lane description, in (seq, lane, phase) order */
  const struct anycclTraceGpuLane* cur = NULL;
  double lastT = 0, waitT = -1, startT = 0;
  int sends = 0, recvs = 0;
  for (size_t i = 0; i < n; i++) {
    const struct anycclTraceTl* r = &tl[i];
    double t = r->t * 1e-3;
    if (r->what == 0) { /* a lane starts: the next description of (seq, lane) */
      while (g < b->ngl && (b->gl[gi[g]].seq < r->seq || (b->gl[gi[g]].seq == r->seq && b->gl[gi[g]].lane < r->lane)))
        g++;
      cur = g < b->ngl && b->gl[gi[g]].seq == r->seq && b->gl[gi[g]].lane == r->lane ? &b->gl[gi[g++]] : NULL;
      lastT = startT = t, waitT = -1, sends = recvs = 0;
      continue;
    }
    if (cur == NULL || cur->seq != r->seq || cur->lane != r->lane) continue; /* its start was dropped */
    const int32_t* pp = cur->kind == LANE_STEPS ? b->peers + cur->peerOff : NULL;
    if (r->what == 1) {
      waitT = t;
    } else if (r->what == 2) {
      int sp = -1, rp = -1;
      if (pp && r->step < cur->nsteps) sp = pp[2 * r->step], rp = pp[2 * r->step + 1];
      else if (pp && r->step == 254) /* an LL slice: every step at once */
        for (int s = 0; s < cur->nsteps; s++) {
          if (sp < 0) sp = pp[2 * s];
          if (rp < 0) rp = pp[2 * s + 1];
        }
      double w = waitT >= 0 ? waitT : lastT;
      if (w > lastT) anycclTraceAddRec(b, sp >= 0 ? TR_BUFWAIT : TR_RECVWAIT, lastT, w, r->seq, r->lane, -1, 0, 0, 0, 0);
      if (sp >= 0) anycclTraceAddRec(b, TR_SEND, w, t, r->seq, r->lane, sp, sends++, cur->stepBytes, 0, 0);
      if (rp >= 0) anycclTraceAddRec(b, TR_RECV, w, t, r->seq, r->lane, rp, recvs++, cur->stepBytes, 0, 0);
      lastT = t, waitT = -1;
    } else if (r->what == 3) {
      if (cur->kind == LANE_P2P_SEND || cur->kind == LANE_P2P_RECV) /* no step records: the whole lane */
        anycclTraceAddRec(b, cur->kind == LANE_P2P_SEND ? TR_SEND : TR_RECV, startT, t, r->seq, r->lane, cur->peer, 0,
                          cur->stepBytes, 0, 0);
      anycclTraceAddRec(b, TR_LANE, startT, t, r->seq, r->lane, -1, 0, 0, 0, 0);
      size_t k = 0;
      while (k < nph && (ph[k].seq != cur->seq || ph[k].phase != cur->phase)) k++;
      if (k == nph) ph[nph++] = (struct tlPhase){cur->seq, cur->phase, cur->func, cur->bytes, startT, t};
      if (startT < ph[k].t0) ph[k].t0 = startT;
      if (t > ph[k].t1) ph[k].t1 = t;
      cur = NULL;
    }
  }
  for (size_t k = 0; k < nph; k++)
    anycclTraceAddRec(b, TR_COLL, ph[k].t0, ph[k].t1, ph[k].seq, 0, -1, 0, ph[k].bytes, ph[k].func, 0);
out:
  free(tl), free(gi), free(ph);
}
