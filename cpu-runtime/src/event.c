/* anyccl-cpu: events.
 *
 * An event is the pair (stream, n) of its latest record: it has completed
 * when the stream has completed n ops, the last of which is the record op
 * itself, which also takes the timestamp. Re-recording replaces the pair; a
 * record op whose generation is no longer the event's leaves the time alone.
 * An event never recorded has no pair and counts as complete. */
#include <stdlib.h>
#include "cpurt.h"

struct cpurtEvent {
  struct cpurtObj obj;              /* must stay first */
  unsigned flags;
  pthread_mutex_t lock;
  struct cpurtStream *stream;       /* of the latest record (a reference), or NULL */
  uint64_t seq;
  uint64_t gen;                     /* records so far */
  int64_t timeNs;
  bool timed;                       /* timeNs belongs to record `gen` */
};

static struct cpurtHandles eventTable = CPURT_HANDLES_INIT;

#define EVENT_FLAGS (cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess)

static void eventRelease(struct cpurtEvent *ev) {
  if (atomic_fetch_sub(&ev->obj.refs, 1) != 1) return;
  if (ev->stream) cpurtStreamRelease(ev->stream);
  pthread_mutex_destroy(&ev->lock);
  free(ev);
}

static cudaError_t acquire(cudaEvent_t h, struct cpurtEvent **out) {
  cpurtInit();
  struct cpurtObj *o = cpurtHandlesAcquire(&eventTable, (const void *)h);
  if (o == NULL) return cudaErrorInvalidResourceHandle;
  *out = (struct cpurtEvent *)o;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  cpurtInit();
  if (event == NULL || (flags & ~(unsigned)EVENT_FLAGS)) return cpurtRet(cudaErrorInvalidValue);
  /* CUDA requires interprocess events to be non-timing. */
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
    return cpurtRet(cudaErrorInvalidValue);
  struct cpurtEvent *ev = calloc(1, sizeof(*ev));
  if (ev == NULL) return cpurtRet(cudaErrorMemoryAllocation);
  atomic_init(&ev->obj.refs, 1);
  ev->flags = flags;
  pthread_mutex_init(&ev->lock, NULL);
  cudaError_t err = cpurtHandlesAdd(&eventTable, &ev->obj);
  if (err != cudaSuccess) {
    eventRelease(ev);
    return cpurtRet(err);
  }
  *event = (cudaEvent_t)ev;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

CPURT_API cudaError_t cudaEventDestroy(cudaEvent_t event) {
  cpurtInit();
  struct cpurtObj *o = cpurtHandlesRemove(&eventTable, (const void *)event);
  if (o == NULL) return cpurtRet(cudaErrorInvalidResourceHandle);
  eventRelease((struct cpurtEvent *)o);   /* a pending record keeps it alive */
  return cudaSuccess;
}

static void recordRun(struct cpurtOp *op) {
  struct cpurtEvent *ev = op->u.rec.ev;
  int64_t now = cpurtSim ? cpurtSelf()->opStart : cpurtNowNs();
  pthread_mutex_lock(&ev->lock);
  if (ev->gen == op->u.rec.gen) {
    ev->timeNs = now;
    ev->timed = true;
  }
  pthread_mutex_unlock(&ev->lock);
}

static void recordFini(struct cpurtOp *op) { eventRelease(op->u.rec.ev); }

/* The caller resolved the stream before this locks the event: no path
 * takes a handle table while it holds an event lock (see cpurt.h). */
static cudaError_t record(struct cpurtEvent *ev, struct cpurtStream *s) {
  struct cpurtOp *op = cpurtOpNew();
  if (op == NULL) return cudaErrorMemoryAllocation;
  op->run = recordRun;
  op->fini = recordFini;
  op->u.rec.ev = ev;
  atomic_fetch_add(&ev->obj.refs, 1);
  struct cpurtStream *old = NULL;
  uint64_t seq;
  bool later = false;
  pthread_mutex_lock(&ev->lock);
  op->u.rec.gen = ev->gen + 1;
  /* The event stays locked until it names the new record, so the record
   * op, which locks it too, cannot run against the previous one. */
  cudaError_t err = cpurtSubmitLater(s, op, &seq, &later);
  if (err == cudaSuccess) {
    old = ev->stream;
    cpurtStreamRef(s);
    ev->stream = s;
    ev->seq = seq;
    ev->gen++;
    ev->timed = false;
  }
  pthread_mutex_unlock(&ev->lock);
  if (old) cpurtStreamRelease(old);
  if (later) cpurtStreamWaitFor(s, seq);
  return err;
}

CPURT_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                               unsigned int flags) {
  struct cpurtEvent *ev;
  struct cpurtStream *s;
  if (flags & ~(unsigned)cudaEventRecordExternal) return cpurtRet(cudaErrorInvalidValue);
  cudaError_t err = acquire(event, &ev);
  if (err != cudaSuccess) return cpurtRet(err);
  err = cpurtStreamAcquire(stream, &s);
  if (err == cudaSuccess) {
    err = record(ev, s);
    cpurtStreamRelease(s);
  }
  eventRelease(ev);
  return cpurtRet(err);
}

CPURT_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return cudaEventRecordWithFlags(event, stream, cudaEventRecordDefault);
}

/* The event's latest record: *s (a reference, NULL if never recorded). */
static void latest(struct cpurtEvent *ev, struct cpurtStream **s, uint64_t *seq) {
  pthread_mutex_lock(&ev->lock);
  *s = ev->stream;
  *seq = ev->seq;
  if (*s) cpurtStreamRef(*s);
  pthread_mutex_unlock(&ev->lock);
}

CPURT_API cudaError_t cudaEventQuery(cudaEvent_t event) {
  struct cpurtEvent *ev;
  struct cpurtStream *s;
  uint64_t seq;
  cudaError_t err = acquire(event, &ev);
  if (err != cudaSuccess) return cpurtRet(err);
  latest(ev, &s, &seq);
  if (s) {
    if (!cpurtStreamReached(s, seq)) err = cudaErrorNotReady;
    cpurtStreamRelease(s);
  }
  eventRelease(ev);
  return err;
}

CPURT_API cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  struct cpurtEvent *ev;
  struct cpurtStream *s;
  uint64_t seq;
  cudaError_t err = acquire(event, &ev);
  if (err != cudaSuccess) return cpurtRet(err);
  latest(ev, &s, &seq);
  if (s) {
    cpurtStreamWaitFor(s, seq);
    cpurtStreamRelease(s);
  }
  if (cpurtSim) {
    pthread_mutex_lock(&ev->lock);
    if (ev->timed) cpurtSimWaited(ev->timeNs);
    pthread_mutex_unlock(&ev->lock);
  }
  eventRelease(ev);
  return cudaSuccess;
}

/* Reads a completed timing event's time; the error says why there is none. */
static cudaError_t eventTime(struct cpurtEvent *ev, int64_t *ns) {
  struct cpurtStream *s;
  uint64_t seq;
  if (ev->flags & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
  latest(ev, &s, &seq);
  if (s == NULL) return cudaErrorInvalidResourceHandle;   /* never recorded */
  bool done = cpurtStreamReached(s, seq);
  cpurtStreamRelease(s);
  if (!done) return cudaErrorNotReady;
  cudaError_t err = cudaSuccess;
  pthread_mutex_lock(&ev->lock);
  if (ev->timed) *ns = ev->timeNs;
  else err = cudaErrorNotReady;     /* re-recorded since we looked */
  pthread_mutex_unlock(&ev->lock);
  return err;
}

CPURT_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  struct cpurtEvent *a, *b;
  if (ms == NULL) return cpurtRet(cudaErrorInvalidValue);
  cudaError_t err = acquire(start, &a);
  if (err != cudaSuccess) return cpurtRet(err);
  err = acquire(end, &b);
  if (err != cudaSuccess) {
    eventRelease(a);
    return cpurtRet(err);
  }
  int64_t t0 = 0, t1 = 0;
  err = eventTime(a, &t0);
  if (err == cudaSuccess) err = eventTime(b, &t1);
  if (err == cudaSuccess) *ms = (float)((double)(t1 - t0) / 1e6);
  eventRelease(b);
  eventRelease(a);
  return cpurtRet(err);
}

CPURT_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                          unsigned int flags) {
  struct cpurtEvent *ev;
  struct cpurtStream *s, *es;
  uint64_t seq;
  if (flags & ~(unsigned)cudaEventWaitExternal) return cpurtRet(cudaErrorInvalidValue);
  cudaError_t err = acquire(event, &ev);
  if (err != cudaSuccess) return cpurtRet(err);
  err = cpurtStreamAcquire(stream, &s);
  if (err != cudaSuccess) {
    eventRelease(ev);
    return cpurtRet(err);
  }
  latest(ev, &es, &seq);
  eventRelease(ev);
  /* Nothing to wait for if never recorded or already complete. */
  if (es != NULL && !cpurtStreamReached(es, seq)) {
    struct cpurtOp *op = cpurtOpNew();
    err = op ? cpurtOpAddDep(op, es, seq) : cudaErrorMemoryAllocation;
    if (err == cudaSuccess) err = cpurtSubmit(s, op, NULL);
    else cpurtOpFree(op);
  }
  if (es) cpurtStreamRelease(es);
  cpurtStreamRelease(s);
  return cpurtRet(err);
}

/* Interprocess events are accepted (the flag) but cannot be exported. */
CPURT_API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event) {
  return cpurtRet(cudaErrorNotSupported);
}

CPURT_API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle) {
  return cpurtRet(cudaErrorNotSupported);
}

/* ---- fork (see stream.c) ------------------------------------------------ */

static void lockEvent(struct cpurtObj *o) { pthread_mutex_lock(&((struct cpurtEvent *)o)->lock); }
static void unlockEvent(struct cpurtObj *o) {
  pthread_mutex_unlock(&((struct cpurtEvent *)o)->lock);
}

void cpurtEventForkLock(void) {
  cpurtHandlesForkLock(&eventTable);
  cpurtHandlesForEach(&eventTable, lockEvent);
}

void cpurtEventForkUnlock(bool child) {
  cpurtHandlesForEach(&eventTable, unlockEvent);
  cpurtHandlesForkUnlock(&eventTable, child);
}
