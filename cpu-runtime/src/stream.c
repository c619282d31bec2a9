/* anyccl-cpu: streams as ordered work queues.
 *
 * Each stream has its own worker thread (started on its first work) that
 * runs the stream's ops in order. Progress is two counters: `submitted` ops
 * queued and `completed` ops done; "wait for s to reach n" is the only kind
 * of dependency, which is all that events, cudaStreamWaitEvent and the
 * legacy stream's implicit synchronisation need.
 *
 * The legacy default stream of a device (stream 0) waits for the earlier
 * work of the device's blocking streams, and their work waits for earlier
 * legacy work; non-blocking streams are exempt. Those dependencies are taken
 * under the device lock at the moment an op is queued, so a concurrent
 * enqueue on the other side is either wholly before or wholly after it. */
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "cpurt.h"

struct cpurtHandles cpurtStreamTable = CPURT_HANDLES_INIT;
static atomic_ullong nextStreamId = 1;
static pthread_once_t keyOnce = PTHREAD_ONCE_INIT;
static pthread_key_t perThreadKey;

/* ---- objects ------------------------------------------------------------ */

struct cpurtStream *cpurtStreamNew(int dev, unsigned flags, int priority,
                                   enum cpurtStreamKind kind) {
  struct cpurtStream *s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  atomic_init(&s->obj.refs, 1);
  s->device = dev;
  s->flags = flags;
  s->priority = priority;
  s->kind = kind;
  s->id = atomic_fetch_add(&nextStreamId, 1);
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->workCond, NULL);
  pthread_cond_init(&s->doneCond, NULL);
  struct cpurtDevice *d = cpurtDevice(dev);
  pthread_mutex_lock(&d->lock);
  s->next = d->streams;
  if (d->streams) d->streams->prev = s;
  d->streams = s;
  pthread_mutex_unlock(&d->lock);
  return s;
}

void cpurtStreamRef(struct cpurtStream *s) { atomic_fetch_add(&s->obj.refs, 1); }

void cpurtStreamRelease(struct cpurtStream *s) {
  if (atomic_fetch_sub(&s->obj.refs, 1) != 1) return;
  /* Unlinked under the device lock: a snapshot that walks the list under
   * that lock sees either a live stream or none. */
  struct cpurtDevice *d = cpurtDevice(s->device);
  pthread_mutex_lock(&d->lock);
  if (s->prev) s->prev->next = s->next;
  else d->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  pthread_mutex_unlock(&d->lock);
  pthread_cond_destroy(&s->workCond);
  pthread_cond_destroy(&s->doneCond);
  pthread_mutex_destroy(&s->lock);
  if (cpurtSim) cpurtSimStreamFree(s);
  free(s);
}

/* Under the device lock, where a listed stream's memory is valid even when
 * its count already reached zero; refuses such a dying stream. */
static bool tryRef(struct cpurtStream *s) {
  int r = atomic_load(&s->obj.refs);
  while (r > 0)
    if (atomic_compare_exchange_weak(&s->obj.refs, &r, r + 1)) return true;
  return false;
}

/* Work already queued still runs; the worker frees the stream once idle. */
void cpurtStreamDestroy(struct cpurtStream *s) {
  pthread_mutex_lock(&s->lock);
  s->destroyed = true;
  pthread_cond_signal(&s->workCond);
  pthread_mutex_unlock(&s->lock);
  cpurtStreamRelease(s);
}

/* ---- ops ---------------------------------------------------------------- */

struct cpurtOp *cpurtOpNew(void) {
  struct cpurtOp *op = calloc(1, sizeof(*op));
  if (op == NULL) return NULL;
  op->deps = op->depInline;
  op->capDeps = sizeof(op->depInline) / sizeof(op->depInline[0]);
  return op;
}

/* Makes room for one more dependency. */
static bool reserveDep(struct cpurtOp *op) {
  if (op->ndeps < op->capDeps) return true;
  struct cpurtDep *d = malloc(2 * op->capDeps * sizeof(*d));
  if (d == NULL) return false;
  memcpy(d, op->deps, op->ndeps * sizeof(*d));
  if (op->deps != op->depInline) free(op->deps);
  op->deps = d;
  op->capDeps *= 2;
  return true;
}

cudaError_t cpurtOpAddDep(struct cpurtOp *op, struct cpurtStream *s, uint64_t seq) {
  if (!reserveDep(op)) return cudaErrorMemoryAllocation;
  cpurtStreamRef(s);
  op->deps[op->ndeps++] = (struct cpurtDep){s, seq};
  return cudaSuccess;
}

void cpurtOpFree(struct cpurtOp *op) {
  if (op == NULL) return;
  if (op->fini) op->fini(op);
  for (int i = 0; i < op->ndeps; i++) cpurtStreamRelease(op->deps[i].s);
  if (op->deps != op->depInline) free(op->deps);
  free(op);
}

/* ---- waiting ------------------------------------------------------------ */

bool cpurtStreamReached(struct cpurtStream *s, uint64_t seq) {
  pthread_mutex_lock(&s->lock);
  bool r = s->completed >= seq;
  pthread_mutex_unlock(&s->lock);
  return r;
}

/* A worker never waits for its own stream: the work it would wait for
 * includes the op it is running (a host function that synchronises its own
 * stream, which CUDA forbids, returns instead of deadlocking). */
static void runOp(struct cpurtStream *s, struct cpurtOp *op);

/* A synchronising thread runs the stream's next op itself when nobody else
 * is running one: the work would otherwise cost a wake-up of the worker and
 * another of the waiter. Claimed under s->lock exactly as the worker claims
 * ops, so order and exclusivity are the worker's. Called and returns with
 * s->lock held. */
static bool runInline(struct cpurtStream *s) {
  struct cpurtOp *op = s->head;
  if (op == NULL || s->busy) return false;
  s->head = op->next;
  if (s->head == NULL) s->tail = NULL;
  s->busy = true;
  pthread_mutex_unlock(&s->lock);
  struct cpurtThread *self = cpurtSelf();
  struct cpurtThread saved = *self;
  self->isWorker = true;
  self->workerOf = s;
  runOp(s, op);
  self->opStart = saved.opStart;
  self->opEnd = saved.opEnd;
  self->opDefer = saved.opDefer;
  self->device = saved.device;
  self->isWorker = saved.isWorker;
  self->workerOf = saved.workerOf;
  pthread_mutex_lock(&s->lock);
  s->busy = false;
  s->completed++;
  if (s->waiters) pthread_cond_broadcast(&s->doneCond);
  pthread_cond_signal(&s->workCond); /* more work, or a destroyed stream to retire */
  return true;
}

void cpurtStreamWaitFor(struct cpurtStream *s, uint64_t seq) {
  if (s == cpurtSelf()->workerOf) return;
  pthread_mutex_lock(&s->lock);
  while (s->completed < seq) {
    if (runInline(s)) continue;
    s->waiters++;
    pthread_cond_wait(&s->doneCond, &s->lock);
    s->waiters--;
  }
  pthread_mutex_unlock(&s->lock);
}

void cpurtWaitDeps(struct cpurtOp *op) {
  for (int i = 0; i < op->ndeps; i++) {
    cpurtStreamWaitFor(op->deps[i].s, op->deps[i].seq);
    if (cpurtSim) cpurtSimWaited(cpurtSimStreamVt(op->deps[i].s));
  }
}

bool cpurtDepsReached(struct cpurtOp *op) {
  for (int i = 0; i < op->ndeps; i++)
    if (!cpurtStreamReached(op->deps[i].s, op->deps[i].seq)) return false;
  return true;
}

/* ---- the worker --------------------------------------------------------- */

static void runOp(struct cpurtStream *s, struct cpurtOp *op) {
  int64_t vt = cpurtSelf()->vt;     /* a thread running an op inline keeps its own time */
  cpurtWaitDeps(op);
  cpurtSelf()->vt = vt;
  cpurtSelf()->device = s->device;  /* work runs on the stream's device */
  if (cpurtSim) cpurtSimOpBegin(s, op);
  if (op->run) op->run(op);
  if (cpurtSim) cpurtSimOpEnd(s);
  cpurtOpFree(op);
}

static void *workerMain(void *arg) {
  struct cpurtStream *s = arg;
  struct cpurtThread *self = cpurtSelf();
  self->device = s->device;         /* work runs on the stream's device */
  self->isWorker = true;
  self->workerOf = s;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while ((s->head == NULL || s->busy) && !(s->destroyed && s->head == NULL && !s->busy))
      pthread_cond_wait(&s->workCond, &s->lock);
    struct cpurtOp *op = s->head;
    if (op == NULL) break;          /* destroyed and drained */
    if (!s->yielded && !cpurtSim) { /* sim mode: ops are cheap, a yield costs more than it saves */
      /* Give a thread that is about to synchronise the chance to run the
       * op itself (runInline): one hand-off instead of two. */
      s->yielded = true;
      pthread_mutex_unlock(&s->lock);
      sched_yield();
      pthread_mutex_lock(&s->lock);
      continue;
    }
    s->yielded = false;
    s->head = op->next;
    if (s->head == NULL) s->tail = NULL;
    s->busy = true;
    pthread_mutex_unlock(&s->lock);
    runOp(s, op);
    pthread_mutex_lock(&s->lock);
    s->busy = false;
    s->completed++;
    if (s->waiters) pthread_cond_broadcast(&s->doneCond);
  }
  s->workerRunning = false;
  pthread_mutex_unlock(&s->lock);
  cpurtStreamRelease(s);            /* the worker's reference */
  return NULL;
}

/* Called with s->lock held. Signals are blocked in workers so that the
 * application's handlers run on its own threads. */
static cudaError_t startWorker(struct cpurtStream *s) {
  pthread_attr_t attr;
  pthread_t tid;
  sigset_t all, old;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (cpurtSim) pthread_attr_setstacksize(&attr, 256 << 10); /* thousands of streams, host functions only */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  cpurtStreamRef(s);
  int rc = pthread_create(&tid, &attr, workerMain, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    atomic_fetch_sub(&s->obj.refs, 1);   /* the caller still holds one */
    cpurtWarn("cannot start a stream worker thread: %s", strerror(rc));
    return cudaErrorOperatingSystem;
  }
  s->workerRunning = true;
  return cudaSuccess;
}

/* sim mode: an op that can run now runs on the queuing thread, right away
 * (no worker, no hand-off: thousands of streams cost no threads). */
static cudaError_t push(struct cpurtStream *s, struct cpurtOp *op, uint64_t *seq, bool *here) {
  bool ready = cpurtSim && !cpurtSelf()->isWorker && cpurtDepsReached(op); /* before s->lock: it locks others */
  pthread_mutex_lock(&s->lock);
  *here = ready && s->head == NULL && !s->busy;
  if (!s->workerRunning && !*here) {
    cudaError_t err = startWorker(s);
    if (err != cudaSuccess) {
      pthread_mutex_unlock(&s->lock);
      return err;
    }
  }
  op->next = NULL;
  if (cpurtSim) {
    struct cpurtThread *self = cpurtSelf();
    op->submitVt = self->isWorker ? self->opStart : self->vt;
    op->submitter = self->isWorker ? self->opSubmitter : cpurtSimThreadId();
  }
  if (s->tail) s->tail->next = op;
  else s->head = op;
  s->tail = op;
  uint64_t n = ++s->submitted;
  if (!*here) pthread_cond_signal(&s->workCond);
  pthread_mutex_unlock(&s->lock);
  *seq = n;
  return cudaSuccess;
}

/* ---- implicit synchronisation with the legacy stream -------------------- */

static bool isBlocking(const struct cpurtStream *s) {
  return s->kind != CPURT_STREAM_LEGACY && !(s->flags & cudaStreamNonBlocking);
}

/* Adds a dependency on s's work queued so far if some of it is pending.
 * Called under the device lock, where s's memory is valid. */
static cudaError_t depIfPending(struct cpurtOp *op, struct cpurtStream *s) {
  if (!reserveDep(op)) return cudaErrorMemoryAllocation;
  pthread_mutex_lock(&s->lock);
  uint64_t seq = s->submitted;
  bool pending = s->completed < seq;
  pthread_mutex_unlock(&s->lock);
  /* Pending work holds the worker's reference, so tryRef fails only for a
   * stream whose work has all completed meanwhile: nothing to wait for. */
  if (pending && tryRef(s)) op->deps[op->ndeps++] = (struct cpurtDep){s, seq};
  return cudaSuccess;
}

/* What an op on s must wait for besides s's own earlier work. Device lock held. */
static cudaError_t implicitDeps(struct cpurtDevice *d, struct cpurtStream *s,
                                struct cpurtOp *op) {
  if (s->kind != CPURT_STREAM_LEGACY) return depIfPending(op, d->legacy);
  for (struct cpurtStream *x = d->streams; x != NULL; x = x->next) {
    if (!isBlocking(x)) continue;
    cudaError_t err = depIfPending(op, x);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t cpurtSubmit(struct cpurtStream *s, struct cpurtOp *op, uint64_t *seq) {
  bool here = false;
  uint64_t n = 0;
  cudaError_t err = cpurtSubmitLater(s, op, &n, &here);
  if (err == cudaSuccess && here) cpurtStreamWaitFor(s, n); /* runs it here, outside every lock */
  if (seq) *seq = n;
  return err;
}

cudaError_t cpurtSubmitLater(struct cpurtStream *s, struct cpurtOp *op, uint64_t *seq, bool *later) {
  cudaError_t err;
  bool here = false;
  uint64_t n = 0;
  if (s->kind == CPURT_STREAM_LEGACY || isBlocking(s)) {
    struct cpurtDevice *d = cpurtDevice(s->device);
    pthread_mutex_lock(&d->lock);
    err = implicitDeps(d, s, op);
    if (err == cudaSuccess) err = push(s, op, &n, &here);
    pthread_mutex_unlock(&d->lock);
  } else {
    err = push(s, op, &n, &here);
  }
  if (err != cudaSuccess) cpurtOpFree(op);
  *later = err == cudaSuccess && here;
  *seq = n;
  return err;
}

/* A synchronous call from a worker (a host function calling cudaMemcpy)
 * cannot wait for the legacy stream, which may be waiting for the caller;
 * it does its work at once instead, as if its stream were exclusive. */
cudaError_t cpurtSubmitWait(struct cpurtStream *s, struct cpurtOp *op) {
  if (cpurtSelf()->isWorker) {
    if (op->run) op->run(op);
    cpurtOpFree(op);
    return cudaSuccess;
  }
  uint64_t seq;
  cudaError_t err = cpurtSubmit(s, op, &seq);
  if (err == cudaSuccess) cpurtStreamWaitFor(s, seq);
  return err;
}

/* cudaStreamSynchronize(s) waits for s's own work; on the legacy stream that
 * also means the blocking streams' work that a new op there would wait for. */
cudaError_t cpurtStreamSnapshot(struct cpurtStream *s, struct cpurtOp *op) {
  cudaError_t err = cudaSuccess;
  struct cpurtDevice *d = cpurtDevice(s->device);
  pthread_mutex_lock(&d->lock);
  if (s->kind == CPURT_STREAM_LEGACY) err = implicitDeps(d, s, op);
  if (err == cudaSuccess) err = depIfPending(op, s);
  pthread_mutex_unlock(&d->lock);
  return err;
}

/* Everything queued so far on every stream of the device (cudaDeviceSynchronize),
 * except the calling worker's own stream. */
cudaError_t cpurtDeviceSnapshot(int dev, struct cpurtOp *op) {
  cudaError_t err = cudaSuccess;
  struct cpurtDevice *d = cpurtDevice(dev);
  struct cpurtStream *mine = cpurtSelf()->workerOf;
  pthread_mutex_lock(&d->lock);
  for (struct cpurtStream *x = d->streams; x != NULL && err == cudaSuccess; x = x->next)
    if (x != mine) err = depIfPending(op, x);
  pthread_mutex_unlock(&d->lock);
  return err;
}

cudaError_t cpurtSyncDevice(int dev) {
  struct cpurtOp *op = cpurtOpNew();
  if (op == NULL) return cudaErrorMemoryAllocation;
  cudaError_t err = cpurtDeviceSnapshot(dev, op);
  if (err == cudaSuccess) cpurtWaitDeps(op);
  cpurtOpFree(op);
  return err;
}

/* ---- handles ------------------------------------------------------------ */

static void perThreadExit(void *arg) {
  struct cpurtStream **streams = arg;
  for (int d = 0; d < cpurtDeviceCount(); d++)
    if (streams[d]) cpurtStreamDestroy(streams[d]);
  free(streams);
  cpurtSelf()->perThread = NULL;
}

static void makeKey(void) { pthread_key_create(&perThreadKey, perThreadExit); }

/* cudaStreamPerThread: one blocking stream per (thread, device), made on
 * first use and destroyed when the thread exits. */
static cudaError_t perThreadStream(struct cpurtStream **out) {
  struct cpurtThread *self = cpurtSelf();
  if (self->perThread == NULL) {
    pthread_once(&keyOnce, makeKey);
    self->perThread = calloc(cpurtDeviceCount(), sizeof(struct cpurtStream *));
    if (self->perThread == NULL) return cudaErrorMemoryAllocation;
    pthread_setspecific(perThreadKey, self->perThread);
  }
  struct cpurtStream **slot = &self->perThread[self->device];
  if (*slot == NULL) {
    *slot = cpurtStreamNew(self->device, cudaStreamDefault, 0, CPURT_STREAM_PER_THREAD);
    if (*slot == NULL) return cudaErrorMemoryAllocation;
  }
  cpurtStreamRef(*slot);
  *out = *slot;
  return cudaSuccess;
}

cudaError_t cpurtStreamAcquire(cudaStream_t h, struct cpurtStream **out) {
  cpurtInit();
  if (h == NULL || h == cudaStreamLegacy) {
    *out = cpurtDevice(cpurtSelf()->device)->legacy;
    cpurtStreamRef(*out);
    return cudaSuccess;
  }
  if (h == cudaStreamPerThread) return perThreadStream(out);
  struct cpurtObj *o = cpurtHandlesAcquire(&cpurtStreamTable, (const void *)h);
  if (o == NULL) return cudaErrorInvalidResourceHandle;
  *out = (struct cpurtStream *)o;
  return cudaSuccess;
}

/* ---- fork --------------------------------------------------------------- */
/* Everything is locked across fork() (in the documented order) so that the
 * child inherits consistent state. The child has no worker threads: work
 * that was queued or running belongs to the parent, so the child drops it
 * and counts it complete; its streams start new workers on new work. */

static void forkPrepare(void) {
  cpurtEventForkLock();
  cpurtHandlesForkLock(&cpurtStreamTable);
  for (int d = 0; d < cpurtDeviceCount(); d++) {
    struct cpurtDevice *dev = cpurtDevice(d);
    pthread_mutex_lock(&dev->lock);
    for (struct cpurtStream *x = dev->streams; x; x = x->next) pthread_mutex_lock(&x->lock);
  }
  cpurtMemForkLock();
  cpurtPeerForkLock();
}

/* Mutexes are released by the thread that locked them, which in the child
 * is the only thread there is. */
static void unlockAll(bool child) {
  cpurtPeerForkUnlock();
  cpurtMemForkUnlock(child);
  for (int d = cpurtDeviceCount() - 1; d >= 0; d--) {
    struct cpurtDevice *dev = cpurtDevice(d);
    for (struct cpurtStream *x = dev->streams; x; x = x->next) pthread_mutex_unlock(&x->lock);
    pthread_mutex_unlock(&dev->lock);
  }
  cpurtHandlesForkUnlock(&cpurtStreamTable, child);
  cpurtEventForkUnlock(child);
}

static void forkParent(void) { unlockAll(false); }

static void forkChild(void) {
  struct cpurtOp *dropped = NULL;
  struct cpurtStream *orphans = NULL;   /* streams whose worker stayed behind */
  for (int d = 0; d < cpurtDeviceCount(); d++) {
    for (struct cpurtStream *x = cpurtDevice(d)->streams; x; x = x->next) {
      if (x->tail) {
        x->tail->next = dropped;
        dropped = x->head;
      }
      x->head = x->tail = NULL;
      x->completed = x->submitted;
      x->waiters = 0;
      /* Waiters of the parent may be recorded in the condition variables. */
      pthread_cond_init(&x->workCond, NULL);
      pthread_cond_init(&x->doneCond, NULL);
      if (x->workerRunning) {
        x->workerRunning = false;
        x->forkNext = orphans;
        orphans = x;
      }
    }
  }
  unlockAll(true);
  while (dropped) {
    struct cpurtOp *next = dropped->next;
    cpurtOpFree(dropped);
    dropped = next;
  }
  while (orphans) {
    struct cpurtStream *next = orphans->forkNext;
    cpurtStreamRelease(orphans);
    orphans = next;
  }
}

void cpurtStreamForkSetup(void) { pthread_atfork(forkPrepare, forkParent, forkChild); }
