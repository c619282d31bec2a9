/* Communicator bookkeeping: the live registry, argument checks, work
 * accounting, errors, and the op table (built-in and user ops). */
#define _GNU_SOURCE /* PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "comm.h"
#include "rt.h"
#include "reduce.h"

/* ---- live registry ------------------------------------------------------- */
/* Every API call checks its communicator here, and programs poll
 * ncclCommGetAsyncError in tight loops (nccl-tests while it waits for a
 * stream, PyTorch's watchdog): the checks take the lock shared, so a thread
 * polling one communicator never keeps another thread's call on another
 * waiting (with a mutex, a polling thread that re-took it at once could
 * starve a woken waiter for milliseconds). Writers (init, destroy) are
 * preferred, so a steady stream of checks cannot hold them off. */
#ifdef PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP
static pthread_rwlock_t regLock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
#else
static pthread_rwlock_t regLock = PTHREAD_RWLOCK_INITIALIZER;
#endif
static struct ncclComm** regComms;
static int regCount, regCap;

void anycclCommRegister(struct ncclComm* comm) {
  pthread_rwlock_wrlock(&regLock);
  if (regCount == regCap) {
    int cap = regCap ? 2 * regCap : 64;
    struct ncclComm** n = realloc(regComms, cap * sizeof(*n));
    if (n) {
      regComms = n;
      regCap = cap;
    }
  }
  if (regCount < regCap) regComms[regCount++] = comm;
  pthread_rwlock_unlock(&regLock);
}

void anycclCommUnregister(struct ncclComm* comm) {
  pthread_rwlock_wrlock(&regLock);
  for (int i = 0; i < regCount; i++)
    if (regComms[i] == comm) {
      regComms[i] = regComms[--regCount];
      break;
    }
  pthread_rwlock_unlock(&regLock);
}

int anycclCommIsLive(const struct ncclComm* comm) {
  int live = 0;
  pthread_rwlock_rdlock(&regLock);
  for (int i = 0; i < regCount && !live; i++) live = regComms[i] == comm;
  pthread_rwlock_unlock(&regLock);
  return live;
}

ncclResult_t anycclCommCheck(struct ncclComm* comm, const char* fn, int needReady) {
  if (comm == NULL) {
    WARN("%s: comm is NULL; pass a communicator from ncclCommInitRank/InitAll/Split", fn);
    return ncclInvalidArgument;
  }
  if (!anycclCommIsLive(comm)) {
    WARN("%s: comm %p is not a live communicator (destroyed, aborted, or never created)", fn, (void*)comm);
    return ncclInvalidArgument;
  }
  if (!needReady) return ncclSuccess;
  int state = __atomic_load_n(&comm->state, __ATOMIC_ACQUIRE);
  if (state == COMM_INITIALIZING) {
    WARN("%s: comm %p is still initialising; poll ncclCommGetAsyncError until it returns ncclSuccess", fn,
         (void*)comm);
    return ncclInvalidUsage;
  }
  if (state == COMM_FINALIZED) {
    WARN("%s: comm %p was finalized; only ncclCommDestroy may follow ncclCommFinalize", fn, (void*)comm);
    return ncclInvalidUsage;
  }
  if (state == COMM_FAILED || __atomic_load_n(&comm->abortFlag, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE)) {
    ncclResult_t e = __atomic_load_n(&comm->asyncResult, __ATOMIC_ACQUIRE);
    int failed = e != ncclSuccess && e != ncclInProgress;
    if (failed) WARN("%s: comm %p is in error (%s); abort or destroy it", fn, (void*)comm, ncclGetErrorString(e));
    else if (__atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE))
      WARN("%s: comm %p was revoked (ncclCommRevoke); only ncclCommShrink or ncclCommDestroy may follow", fn,
           (void*)comm);
    else WARN("%s: comm %p is being aborted", fn, (void*)comm);
    return failed ? e : ncclInvalidUsage;
  }
  return ncclSuccess;
}

/* ---- work accounting ----------------------------------------------------- */
/* The communicator whose plan this thread is running (RunBegin to WorkDone). */
static __thread struct ncclComm* runningComm;

void anycclCommWorkStart(struct ncclComm* comm) {
  pthread_mutex_lock(&comm->lock);
  comm->inflight++;
  pthread_mutex_unlock(&comm->lock);
}

void anycclCommRunBegin(struct ncclComm* comm) {
  pthread_mutex_lock(&comm->lock);
  comm->running++;
  pthread_mutex_unlock(&comm->lock);
  runningComm = comm;
}

void anycclCommWorkDone(struct ncclComm* comm) {
  pthread_mutex_lock(&comm->lock);
  if (runningComm == comm) {
    runningComm = NULL;
    if (--comm->running == 0) pthread_cond_broadcast(&comm->idle);
  }
  int last = --comm->inflight == 0;
  if (last) pthread_cond_broadcast(&comm->idle);
  int freeNow = last && comm->orphaned;
  pthread_mutex_unlock(&comm->lock);
  if (freeNow) anycclCommFree(comm); /* the aborter left it to the last plan */
}

void anycclCommWaitRunning(struct ncclComm* comm) {
  pthread_mutex_lock(&comm->lock);
  while (comm->running > 0) pthread_cond_wait(&comm->idle, &comm->lock);
  pthread_mutex_unlock(&comm->lock);
}

void anycclCommStopAndFree(struct ncclComm* comm) {
  anycclCommUnregister(comm); /* later calls see a dead handle */
  anycclCommWaitRunning(comm);
  pthread_mutex_lock(&comm->lock);
  int queued = comm->inflight;
  if (queued > 0) {
    /* logged first: once the lock is released the last plan may free comm */
    INFO(NCCL_INIT, "comm %p rank %d: %d plan(s) still queued on streams free the communicator when they run",
         (void*)comm, comm->rank, queued);
    comm->orphaned = 1;
  }
  pthread_mutex_unlock(&comm->lock);
  if (queued > 0) return;
  anycclCommFree(comm);
}

void anycclCommWaitIdle(struct ncclComm* comm) {
  pthread_mutex_lock(&comm->lock);
  while (comm->inflight > 0) pthread_cond_wait(&comm->idle, &comm->lock);
  pthread_mutex_unlock(&comm->lock);
}

/* The first error sticks, also one that arrives while init is finishing
 * (the proxy may see a peer die before init returns). */
void anycclCommSetError(struct ncclComm* comm, ncclResult_t err) {
  ncclResult_t cur = __atomic_load_n(&comm->asyncResult, __ATOMIC_ACQUIRE);
  while ((cur == ncclSuccess || cur == ncclInProgress) &&
         !__atomic_compare_exchange_n(&comm->asyncResult, &cur, err, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
  }
  __atomic_store_n(&comm->state, COMM_FAILED, __ATOMIC_RELEASE);
}

void anycclCommInitDone(struct ncclComm* comm, ncclResult_t res) {
  if (res != ncclSuccess) {
    anycclCommSetError(comm, res);
    return;
  }
  ncclResult_t expect = ncclInProgress;
  if (__atomic_compare_exchange_n(&comm->asyncResult, &expect, ncclSuccess, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    int st = COMM_INITIALIZING;
    __atomic_compare_exchange_n(&comm->state, &st, COMM_READY, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
}

/* ---- ops ----------------------------------------------------------------- */
static int isFloatType(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}

/* 1/n in the element type, for float averages (NCCL: PreMulSum by 1/n). */
static uint64_t reciprocalIn(ncclDataType_t t, int n) {
  double r = 1.0 / n;
  uint64_t v = 0;
  switch (t) {
    case ncclFloat16: v = anycclDoubleToHalf(r); break;
    case ncclBfloat16: v = anycclDoubleToBf16(r); break;
    case ncclFloat8e4m3: v = anycclDoubleToFp8e4m3(r); break;
    case ncclFloat8e5m2: v = anycclDoubleToFp8e5m2(r); break;
    case ncclFloat32: { float f = (float)r; memcpy(&v, &f, 4); break; }
    case ncclFloat64: memcpy(&v, &r, 8); break;
    default: break;
  }
  return v;
}

ncclResult_t anycclResolveOp(struct ncclComm* comm, ncclRedOp_t op, ncclDataType_t type, anycclRedOp* out) {
  memset(out, 0, sizeof(*out));
  out->type = type;
  switch (op) {
    case ncclSum: out->op = anycclDevSum; return ncclSuccess;
    case ncclProd: out->op = anycclDevProd; return ncclSuccess;
    case ncclMax: out->op = anycclDevMax; return ncclSuccess;
    case ncclMin: out->op = anycclDevMin; return ncclSuccess;
    case ncclAvg:
      if (isFloatType(type)) {
        out->op = anycclDevPreMulSum;
        out->scalar = reciprocalIn(type, comm->nRanks);
      } else {
        out->op = anycclDevSumPostDiv;
        out->divisor = comm->nRanks;
      }
      return ncclSuccess;
    default: break;
  }
  int idx = (int)op - (int)ncclNumOps;
  if (idx < 0 || idx >= ANYCCL_MAX_USER_OPS || !comm->userOps[idx].used) {
    WARN("op %d is neither a built-in ncclRedOp_t nor a live ncclRedOpCreatePreMulSum op of this comm", (int)op);
    return ncclInvalidArgument;
  }
  struct anycclUserOp* u = &comm->userOps[idx];
  if (u->type != type) {
    WARN("op %d was created for datatype %d but is used with datatype %d", (int)op, u->type, type);
    return ncclInvalidArgument;
  }
  out->op = anycclDevPreMulSum;
  if (u->residence == ncclScalarHostImmediate) {
    out->scalar = u->scalar;
  } else {
    /* device-resident: the executor reads it when the op runs (task
     * scalarPtr); in the cpu backend it is host memory and also read now */
    out->scalar = 0;
    if (anycclRt.kind != ANYCCL_BACKEND_CUDA) memcpy(&out->scalar, u->devScalar, anycclTypeSize(type));
  }
  return ncclSuccess;
}
