/* anyccl-cpu: the cudaStream* entry points, host functions, device sync. */
#include <stdlib.h>
#include "cpurt.h"

#define PRIORITY_GREATEST (-5)

CPURT_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                   int priority) {
  cpurtInit();
  if (pStream == NULL || (flags & ~(unsigned)cudaStreamNonBlocking))
    return cpurtRet(cudaErrorInvalidValue);
  /* As CUDA does, out-of-range priorities are clamped, not refused. */
  if (priority > 0) priority = 0;
  if (priority < PRIORITY_GREATEST) priority = PRIORITY_GREATEST;
  struct cpurtStream *s = cpurtStreamNew(cpurtSelf()->device, flags, priority,
                                         CPURT_STREAM_USER);
  if (s == NULL) return cpurtRet(cudaErrorMemoryAllocation);
  cudaError_t err = cpurtHandlesAdd(&cpurtStreamTable, &s->obj);
  if (err != cudaSuccess) {
    cpurtStreamDestroy(s);
    return cpurtRet(err);
  }
  *pStream = (cudaStream_t)s;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  return cudaStreamCreateWithPriority(pStream, flags, 0);
}

CPURT_API cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
  return cudaStreamCreateWithPriority(pStream, cudaStreamDefault, 0);
}

CPURT_API cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  cpurtInit();
  struct cpurtObj *o = cpurtHandlesRemove(&cpurtStreamTable, (const void *)stream);
  if (o == NULL) return cpurtRet(cudaErrorInvalidResourceHandle);
  cpurtStreamDestroy((struct cpurtStream *)o);
  return cudaSuccess;
}

/* The dependencies that synchronising with h means, as an unqueued op. */
static cudaError_t snapshot(cudaStream_t h, struct cpurtOp **out) {
  struct cpurtStream *s;
  cudaError_t err = cpurtStreamAcquire(h, &s);
  if (err != cudaSuccess) return err;
  struct cpurtOp *op = cpurtOpNew();
  err = op ? cpurtStreamSnapshot(s, op) : cudaErrorMemoryAllocation;
  cpurtStreamRelease(s);
  if (err != cudaSuccess) {
    cpurtOpFree(op);
    return err;
  }
  *out = op;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  struct cpurtOp *op;
  cudaError_t err = snapshot(stream, &op);
  if (err != cudaSuccess) return cpurtRet(err);
  cpurtWaitDeps(op);
  cpurtOpFree(op);
  struct cpurtStream *s;
  if (cpurtSim && cpurtStreamAcquire(stream, &s) == cudaSuccess) { /* idle already: its time still counts */
    cpurtSimWaited(cpurtSimStreamVt(s));
    cpurtStreamRelease(s);
  }
  return cudaSuccess;
}

CPURT_API cudaError_t cudaStreamQuery(cudaStream_t stream) {
  struct cpurtOp *op;
  cudaError_t err = snapshot(stream, &op);
  if (err != cudaSuccess) return cpurtRet(err);
  bool done = cpurtDepsReached(op);
  cpurtOpFree(op);
  return done ? cudaSuccess : cudaErrorNotReady;
}

CPURT_API cudaError_t cudaDeviceSynchronize(void) {
  cpurtInit();
  return cpurtRet(cpurtSyncDevice(cpurtSelf()->device));
}

/* Resolves h for a query; fills *s with a reference held. */
#define ACQUIRE_OR_RETURN(h, s)                            \
  do {                                                     \
    cudaError_t err_ = cpurtStreamAcquire((h), &(s));      \
    if (err_ != cudaSuccess) return cpurtRet(err_);        \
  } while (0)

CPURT_API cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags) {
  struct cpurtStream *s;
  if (flags == NULL) return cpurtRet(cudaErrorInvalidValue);
  ACQUIRE_OR_RETURN(hStream, s);
  *flags = s->flags;
  cpurtStreamRelease(s);
  return cudaSuccess;
}

CPURT_API cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority) {
  struct cpurtStream *s;
  if (priority == NULL) return cpurtRet(cudaErrorInvalidValue);
  ACQUIRE_OR_RETURN(hStream, s);
  *priority = s->priority;
  cpurtStreamRelease(s);
  return cudaSuccess;
}

CPURT_API cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int *device) {
  struct cpurtStream *s;
  if (device == NULL) return cpurtRet(cudaErrorInvalidValue);
  ACQUIRE_OR_RETURN(hStream, s);
  *device = s->device;
  cpurtStreamRelease(s);
  return cudaSuccess;
}

CPURT_API cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId) {
  struct cpurtStream *s;
  if (streamId == NULL) return cpurtRet(cudaErrorInvalidValue);
  ACQUIRE_OR_RETURN(hStream, s);
  *streamId = s->id;
  cpurtStreamRelease(s);
  return cudaSuccess;
}

static void runHostFn(struct cpurtOp *op) { op->u.host.fn(op->u.host.arg); }

static void runCallback(struct cpurtOp *op) {
  op->u.cb.fn(op->u.cb.handle, cudaSuccess, op->u.cb.arg);
}

static cudaError_t submitOn(cudaStream_t h, struct cpurtOp *op) {
  struct cpurtStream *s;
  cudaError_t err = cpurtStreamAcquire(h, &s);
  if (err != cudaSuccess) {
    cpurtOpFree(op);
    return cpurtRet(err);
  }
  err = cpurtSubmit(s, op, NULL);
  cpurtStreamRelease(s);
  return cpurtRet(err);
}

/* fn may block for as long as it likes (anyccl runs a whole collective in
 * one) and may call the runtime's non-synchronising functions: the worker
 * holds no lock while it runs. */
CPURT_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
  if (fn == NULL) return cpurtRet(cudaErrorInvalidValue);
  struct cpurtOp *op = cpurtOpNew();
  if (op == NULL) return cpurtRet(cudaErrorMemoryAllocation);
  op->run = runHostFn;
  op->u.host.fn = fn;
  op->u.host.arg = userData;
  return submitOn(stream, op);
}

CPURT_API cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                            void *userData, unsigned int flags) {
  if (callback == NULL || flags != 0) return cpurtRet(cudaErrorInvalidValue);
  struct cpurtOp *op = cpurtOpNew();
  if (op == NULL) return cpurtRet(cudaErrorMemoryAllocation);
  op->run = runCallback;
  op->u.cb.fn = callback;
  op->u.cb.handle = stream;
  op->u.cb.arg = userData;
  return submitOn(stream, op);
}

/* Nothing is ever captured into a graph here. */
CPURT_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                            enum cudaStreamCaptureStatus *pCaptureStatus) {
  struct cpurtStream *s;
  if (pCaptureStatus == NULL) return cpurtRet(cudaErrorInvalidValue);
  ACQUIRE_OR_RETURN(stream, s);
  cpurtStreamRelease(s);
  *pCaptureStatus = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  if (mode == NULL || (unsigned)*mode > cudaStreamCaptureModeRelaxed)
    return cpurtRet(cudaErrorInvalidValue);
  struct cpurtThread *self = cpurtSelf();
  enum cudaStreamCaptureMode old = self->captureMode;
  self->captureMode = *mode;
  *mode = old;
  return cudaSuccess;
}
