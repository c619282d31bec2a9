/* anyccl-cpu: the virtual clock of sim mode (ANYCCL_BACKEND=sim).
 *
 * Nothing sleeps: every stream, event and thread carries a virtual time in
 * nanoseconds. A stream op starts at the latest of its stream's time (the
 * end of its previous op), its dependencies' stream times and the time of
 * the thread that queued it; it ends when it started unless a host function
 * it runs says otherwise (anycclCpuSimOpSetEnd: the sim executor of libnccl
 * sets the modelled end of a collective). Records take the op's start;
 * cudaEventElapsedTime subtracts them. cudaStreamSynchronize,
 * cudaDeviceSynchronize and cudaEventSynchronize move the calling thread's
 * time forward to what it waited for; anycclCpuSimNow reads it (the perf
 * tools' clock in sim mode). A dependency's time is its stream's when the
 * wait ended, which may be later than the awaited op's end when the stream
 * went on meanwhile (never earlier).
 *
 * A host function may also defer its op's end (anycclCpuSimOpDefer): the op
 * completes at once (the queue moves on: no thread waits for the other
 * ranks) and whoever next needs the stream's time waits until the end is
 * resolved (anycclCpuSimResolve, by the rank that modelled the collective),
 * at most ANYCCL_OP_TIMEOUT seconds (default 600). In sim mode ops that can
 * run at once run on the thread that queues them (stream.c): thousands of
 * streams cost no threads. Before it waits, a stream tells libnccl that it
 * needs the end (anycclCpuSimSetNeed), which may resolve it then. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "cpurt.h"

struct cpurtSimEnd {
  int refs;        /* the stream holding it, the caller until it resolves */
  bool resolved;
  int64_t end;
  int64_t start;   /* used if it never resolves */
};

static pthread_mutex_t endLock = PTHREAD_MUTEX_INITIALIZER;
/* libnccl's hook (anycclCpuSimSetNeed): called unlocked with 1 when a
 * stream starts waiting for the unresolved end `end` (a handle of
 * anycclCpuSimOpDefer), 2 as it goes on waiting, 0 when the wait ended. */
static _Atomic(void (*)(int, void *)) simNeed;
static pthread_cond_t endCond = PTHREAD_COND_INITIALIZER;

static void endUnref(struct cpurtSimEnd *e) { /* endLock held */
  if (e && --e->refs == 0) free(e);
}

static int64_t waitLimitSec(void) {
  const char *env = getenv("ANYCCL_OP_TIMEOUT");
  long v = env ? atol(env) : 600;
  return v > 0 ? v : 600;
}

int64_t cpurtSimStreamVt(struct cpurtStream *s) {
  pthread_mutex_lock(&endLock);
  struct cpurtSimEnd *e = s->pend;
  int64_t t;
  if (e == NULL) {
    t = atomic_load(&s->vt);
  } else {
    int64_t deadline = cpurtNowNs() + waitLimitSec() * 1000000000;
    void (*need)(int, void *) = atomic_load(&simNeed);
    int told = 0;
    e->refs++; /* kept while this waits: the stream may drop it meanwhile */
    while (!e->resolved) {
      if (need) { /* the end may wait for this need (libnccl models collectives lazily): say it, unlocked */
        pthread_mutex_unlock(&endLock);
        need(told ? 2 : 1, e);
        pthread_mutex_lock(&endLock);
        told = 1;
        if (e->resolved) break;
      }
      if (cpurtNowNs() > deadline) {
        cpurtWarn("sim: a stream waited %lld s for the modelled end of a collective that not every rank launched; "
                  "going on at its start", (long long)waitLimitSec());
        e->resolved = true;
        e->end = e->start;
        break;
      }
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_nsec += 20 * 1000 * 1000;
      if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
      pthread_cond_timedwait(&endCond, &endLock, &until);
    }
    t = e->end > atomic_load(&s->vt) ? e->end : atomic_load(&s->vt);
    endUnref(e);
    if (told) {
      pthread_mutex_unlock(&endLock);
      need(0, NULL);
      return t;
    }
  }
  pthread_mutex_unlock(&endLock);
  return t;
}

void cpurtSimStreamFree(struct cpurtStream *s) {
  pthread_mutex_lock(&endLock);
  endUnref(s->pend);
  s->pend = NULL;
  pthread_mutex_unlock(&endLock);
}

void cpurtSimOpBegin(struct cpurtStream *s, struct cpurtOp *op) {
  struct cpurtThread *self = cpurtSelf();
  int64_t t = cpurtSimStreamVt(s);
  if (op->submitVt > t) t = op->submitVt;
  for (int i = 0; i < op->ndeps; i++) {
    int64_t d = cpurtSimStreamVt(op->deps[i].s);
    if (d > t) t = d;
  }
  self->opStart = self->opEnd = t;
  self->opSubmit = op->submitVt;
  self->opSubmitter = op->submitter;
  self->opDefer = NULL;
}

void cpurtSimOpEnd(struct cpurtStream *s) {
  struct cpurtThread *self = cpurtSelf();
  int64_t t = self->opEnd > self->opStart ? self->opEnd : self->opStart;
  pthread_mutex_lock(&endLock);
  atomic_store(&s->vt, t);
  endUnref(s->pend);
  s->pend = self->opDefer; /* the op's reference moves to the stream */
  self->opDefer = NULL;
  pthread_mutex_unlock(&endLock);
}

void cpurtSimWaited(int64_t vt) {
  struct cpurtThread *self = cpurtSelf();
  if (vt > self->vt) self->vt = vt;
}

/* ---- entry points for libnccl's sim executor and the perf tools ---------- */

/* 1 in sim mode. */
CPURT_API int anycclCpuSimMode(void) {
  cpurtInit();
  return cpurtSim ? 1 : 0;
}

/* The calling thread's virtual time in seconds (its host clock in sim mode). */
CPURT_API double anycclCpuSimNow(void) { return (double)cpurtSelf()->vt * 1e-9; }

/* Inside a stream op (a host function): its virtual start, in seconds. */
CPURT_API double anycclCpuSimOpStart(void) { return (double)cpurtSelf()->opStart * 1e-9; }

/* Inside a stream op: its end comes later, through anycclCpuSimResolve with
 * the returned handle (NULL if out of memory: the op then ends at once). */
CPURT_API void *anycclCpuSimOpDefer(void) {
  struct cpurtThread *self = cpurtSelf();
  struct cpurtSimEnd *e = calloc(1, sizeof(*e));
  if (e == NULL) return NULL;
  e->refs = 2;
  e->start = self->opStart;
  pthread_mutex_lock(&endLock);
  endUnref(self->opDefer);
  self->opDefer = e;
  pthread_mutex_unlock(&endLock);
  return e;
}

/* Resolve n deferred ends (handles from anycclCpuSimOpDefer; NULLs skipped)
 * at ends[i] seconds; the handles are not valid afterwards. */
CPURT_API void anycclCpuSimResolve(void *const *handles, int n, const double *ends) {
  pthread_mutex_lock(&endLock);
  for (int i = 0; i < n; i++) {
    struct cpurtSimEnd *e = handles[i];
    if (e == NULL) continue;
    int64_t t = (int64_t)llround(ends[i] * 1e9);
    e->end = t > e->start ? t : e->start;
    e->resolved = true;
    endUnref(e);
  }
  pthread_cond_broadcast(&endCond);
  pthread_mutex_unlock(&endLock);
}

/* The hook a stream calls when it needs an end not yet resolved (see
 * simNeed): libnccl's sim executor models collectives of several
 * communicators of one cluster together, when their time is needed. */
CPURT_API void anycclCpuSimSetNeed(void (*need)(int, void *)) { atomic_store(&simNeed, need); }
unsigned cpurtSimThreadId(void) {
  static atomic_uint next = 1;
  struct cpurtThread *self = cpurtSelf();
  if (self->id == 0) self->id = atomic_fetch_add(&next, 1);
  return self->id;
}

/* Inside a stream op (a host function): if it started when it was queued
 * (its stream and what it waits for were done by then: a kernel launched
 * now is not queued behind earlier ones, so its launch latency shows), the
 * id of the thread that queued it (from 1); 0 otherwise. */
CPURT_API unsigned anycclCpuSimOpIdle(void) {
  struct cpurtThread *self = cpurtSelf();
  return self->opStart > self->opSubmit ? 0 : self->opSubmitter;
}

/* Inside a stream op: it ends at `end` seconds (never before it started). */
CPURT_API void anycclCpuSimOpSetEnd(double end) {
  struct cpurtThread *self = cpurtSelf();
  int64_t t = (int64_t)llround(end * 1e9);
  if (t > self->opEnd) self->opEnd = t;
}
