/* anyccl-cpu internals, shared by the files of cpu-runtime/src.
 *
 * Locking order (a thread that holds one of these only ever takes one that
 * comes later in the list, which is also the order the fork handler uses):
 *   event table -> event locks -> stream table -> device locks ->
 *   stream locks -> memory registry -> peer-access lock.
 * Nothing is held while user code (host functions, callbacks) runs. */
#ifndef ANYCCL_CPURT_H
#define ANYCCL_CPURT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "cuda_runtime_api.h"

#define CPURT_API __attribute__((visibility("default")))
#define CPURT_MAX_DEVICES 1024
#define CPURT_DEFAULT_DEVICES 8
#define CPURT_SIM_MAX_DEVICES 65536      /* sim mode (ANYCCL_BACKEND=sim) */
#define CPURT_SIM_DEFAULT_DEVICES 16384
#define CPURT_SIM_DEVICE_MEMORY ((size_t)141 << 30) /* an H200's, reserved only */

/* ---- error.c: errors, warnings and per-thread state -------------------- */
struct cpurtStream;
struct cpurtOp;
struct cpurtThread {
  int device;                       /* current device */
  cudaError_t lastError;
  bool isWorker;                    /* a stream's worker thread */
  struct cpurtStream *workerOf;     /* the stream it works for */
  enum cudaStreamCaptureMode captureMode;
  struct cpurtStream **perThread;   /* per-device cudaStreamPerThread, lazily */
  /* sim mode (sim.c): the thread's virtual time; while it runs a stream op,
   * the op's virtual start and end (a host function may move the end). */
  int64_t vt, opStart, opEnd;
  int64_t opSubmit;                 /* the running op's submit time (sim.c) */
  unsigned opSubmitter;             /* and the thread that queued it (its id) */
  unsigned id;                      /* this thread's id (sim.c), from 1; 0: none yet */
  struct cpurtSimEnd *opDefer;      /* the running op's end comes later (sim.c) */
};
struct cpurtThread *cpurtSelf(void);
unsigned cpurtSimThreadId(void); /* the calling thread's id, from 1 (sim.c) */
/* Records a failure as the thread's last error (cudaErrorNotReady is a
 * status, not an error, as in CUDA) and returns it. */
cudaError_t cpurtRet(cudaError_t err);
void cpurtWarn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int64_t cpurtNowNs(void);

/* ---- device.c ----------------------------------------------------------- */
struct cpurtDevice {
  pthread_mutex_t lock;             /* the stream list and implicit sync */
  struct cpurtStream *legacy;       /* the legacy default stream */
  struct cpurtStream *streams;      /* every live stream of the device */
  unsigned flags;                   /* cudaSetDeviceFlags */
};
void cpurtInit(void);               /* idempotent; every entry point calls it */
/* sim mode (ANYCCL_BACKEND=sim, read once at init): device memory is
 * reserved, never committed; copies and memsets that touch it do nothing;
 * every stream, event and thread keeps a virtual clock (sim.c). */
extern bool cpurtSim;
bool cpurtIsDeviceMemory(const void *p);
/* Virtual clock (sim.c): a stream op starts at the latest of its stream's
 * time, its dependencies' and the queuing thread's; a wait moves the waiting
 * thread's time forward to what it waited for. */
void cpurtSimOpBegin(struct cpurtStream *s, struct cpurtOp *op);
void cpurtSimOpEnd(struct cpurtStream *s);
void cpurtSimWaited(int64_t vt);
/* A stream's virtual time: waits (bounded) while its last op's end is
 * deferred and not resolved yet. */
int64_t cpurtSimStreamVt(struct cpurtStream *s);
void cpurtSimStreamFree(struct cpurtStream *s);
int cpurtDeviceCount(void);
bool cpurtValidDevice(int dev);
struct cpurtDevice *cpurtDevice(int dev);
void cpurtPeerForkLock(void);
void cpurtPeerForkUnlock(void);

/* ---- handles.c: live-handle registry ------------------------------------ */
/* Streams and events start with this header, so a registry can take a
 * reference on an object that it finds without knowing its type. */
struct cpurtObj {
  atomic_int refs;
};
struct cpurtHandles {
  pthread_rwlock_t lock;
  uintptr_t *slots;
  size_t cap, used, live;
};
#define CPURT_HANDLES_INIT {PTHREAD_RWLOCK_INITIALIZER, NULL, 0, 0, 0}
cudaError_t cpurtHandlesAdd(struct cpurtHandles *t, struct cpurtObj *o);
/* Returns the object with one more reference, or NULL if h is not live. */
struct cpurtObj *cpurtHandlesAcquire(struct cpurtHandles *t, const void *h);
/* Unregisters h; returns the object (whose handle reference the caller now
 * owns) or NULL if h was not live. */
struct cpurtObj *cpurtHandlesRemove(struct cpurtHandles *t, const void *h);
void cpurtHandlesForEach(struct cpurtHandles *t, void (*fn)(struct cpurtObj *));
void cpurtHandlesForkLock(struct cpurtHandles *t);
void cpurtHandlesForkUnlock(struct cpurtHandles *t, bool child);

/* ---- stream.c: work queues ---------------------------------------------- */
struct cpurtDep {
  struct cpurtStream *s;            /* holds a reference */
  uint64_t seq;                     /* wait until s has completed this many */
};
struct cpurtEvent;
/* One unit of work on a stream. run() does the work (NULL: only waits);
 * fini() releases what the op holds, whether it ran or was discarded. */
struct cpurtOp {
  struct cpurtOp *next;
  void (*run)(struct cpurtOp *op);
  void (*fini)(struct cpurtOp *op);
  union {
    struct { void *dst; const void *src; size_t width, height, dpitch, spitch; int value; } mem;
    struct { cudaHostFn_t fn; void *arg; } host;
    struct { cudaStreamCallback_t fn; cudaStream_t handle; void *arg; } cb;
    struct { struct cpurtEvent *ev; uint64_t gen; } rec;
    void *ptr;
  } u;
  int ndeps, capDeps;
  int64_t submitVt;                 /* sim mode: the queuing thread's virtual time */
  unsigned submitter;               /* sim mode: the queuing thread's id (cpurtSimThreadId) */
  struct cpurtDep *deps;            /* depInline or heap */
  struct cpurtDep depInline[4];
};

enum cpurtStreamKind { CPURT_STREAM_USER, CPURT_STREAM_LEGACY, CPURT_STREAM_PER_THREAD };

struct cpurtStream {
  struct cpurtObj obj;              /* must stay first */
  int device;
  unsigned flags;
  int priority;
  enum cpurtStreamKind kind;
  unsigned long long id;
  pthread_mutex_t lock;
  pthread_cond_t workCond;          /* the worker waits here for work */
  pthread_cond_t doneCond;          /* synchronising threads wait here */
  struct cpurtOp *head, *tail;
  uint64_t submitted, completed;
  int waiters;
  bool workerRunning, destroyed;
  bool busy;                        /* an op is running (worker or inline) */
  bool yielded;                     /* the worker yielded once before taking the head op */
  _Atomic int64_t vt;               /* sim mode: virtual time its last op ended ... */
  struct cpurtSimEnd *pend;         /* ... or, until resolved, the end it waits for (sim.c) */
  struct cpurtStream *prev, *next;  /* the device's stream list */
  struct cpurtStream *forkNext;     /* used by the fork handler only */
};

struct cpurtStream *cpurtStreamNew(int dev, unsigned flags, int priority,
                                   enum cpurtStreamKind kind);
/* Resolves a handle (0, cudaStreamLegacy, cudaStreamPerThread or a live
 * stream) to a stream with a reference held. */
cudaError_t cpurtStreamAcquire(cudaStream_t h, struct cpurtStream **out);
void cpurtStreamRef(struct cpurtStream *s);
void cpurtStreamRelease(struct cpurtStream *s);
void cpurtStreamDestroy(struct cpurtStream *s);   /* drops the handle's ref */

struct cpurtOp *cpurtOpNew(void);
cudaError_t cpurtOpAddDep(struct cpurtOp *op, struct cpurtStream *s, uint64_t seq);
void cpurtOpFree(struct cpurtOp *op);
/* Queues op (taking ownership, also on failure) with the legacy stream's
 * implicit dependencies; *seq is the count s reaches when op is done. */
cudaError_t cpurtSubmit(struct cpurtStream *s, struct cpurtOp *op, uint64_t *seq);
/* The same, for a caller that holds a lock the op takes: when *later, the
 * op waits for the caller to run it (cpurtStreamWaitFor(s, *seq)) once it
 * holds no lock (sim mode: ops run on the queuing thread, stream.c). */
cudaError_t cpurtSubmitLater(struct cpurtStream *s, struct cpurtOp *op, uint64_t *seq, bool *later);
/* Queues op and waits for it: the synchronous calls (cudaMemcpy...). */
cudaError_t cpurtSubmitWait(struct cpurtStream *s, struct cpurtOp *op);
bool cpurtStreamReached(struct cpurtStream *s, uint64_t seq);
void cpurtStreamWaitFor(struct cpurtStream *s, uint64_t seq);
/* Everything that s's next op would wait for, s's own work included, as the
 * dependencies of a (never queued) op: what cudaStreamSynchronize waits for. */
cudaError_t cpurtStreamSnapshot(struct cpurtStream *s, struct cpurtOp *op);
cudaError_t cpurtDeviceSnapshot(int dev, struct cpurtOp *op);
void cpurtWaitDeps(struct cpurtOp *op);
bool cpurtDepsReached(struct cpurtOp *op);
cudaError_t cpurtSyncDevice(int dev);
void cpurtStreamForkSetup(void);
extern struct cpurtHandles cpurtStreamTable;

/* ---- event.c ------------------------------------------------------------ */
void cpurtEventForkLock(void);
void cpurtEventForkUnlock(bool child);

/* ---- memory.c: the allocation registry ---------------------------------- */
enum cpurtAllocKind {
  CPURT_ALLOC_DEVICE,               /* cudaMalloc, cudaMallocAsync */
  CPURT_ALLOC_MANAGED,              /* cudaMallocManaged */
  CPURT_ALLOC_HOST,                 /* cudaMallocHost, cudaHostAlloc */
  CPURT_ALLOC_REGISTERED,           /* cudaHostRegister */
  CPURT_ALLOC_IPC                   /* cudaIpcOpenMemHandle */
};
struct cpurtAlloc {
  uintptr_t base;
  size_t size;                      /* what the user asked for */
  size_t mapSize;                   /* what is mapped: size rounded to pages */
  enum cpurtAllocKind kind;
  int device;
  unsigned flags;
  int fd;                           /* shareable backing, -1 if none */
  uint64_t ino;                     /* identity of the backing object */
  pid_t pid;                        /* IPC: the exporting process */
  int refs;                         /* IPC: opens of the same handle */
};
bool cpurtAllocFind(const void *p, struct cpurtAlloc *out);
cudaError_t cpurtAllocInsert(const struct cpurtAlloc *a);
/* Removes the entry whose base is p if its kind is in kindMask (a bitmask
 * of 1 << kind); fills *out. */
bool cpurtAllocRemove(const void *p, unsigned kindMask, struct cpurtAlloc *out);
/* Maps size bytes of new shareable memory (memfd); fills base, mapSize, fd,
 * ino. */
cudaError_t cpurtShmCreate(size_t size, struct cpurtAlloc *a);
void cpurtAllocRelease(const struct cpurtAlloc *a);   /* unmaps, closes */
cudaError_t cpurtDeviceAlloc(void **p, size_t size, int dev, enum cpurtAllocKind kind);
/* IPC: finds an open mapping of (pid, ino) and takes one more reference. */
bool cpurtIpcFindRef(pid_t pid, uint64_t ino, void **base);
/* IPC: drops one reference on the mapping at base; fills *out and returns
 * true with out->refs == 0 when it was the last one (and is unregistered). */
bool cpurtIpcUnref(const void *base, struct cpurtAlloc *out, bool *found);
void cpurtMemForkLock(void);
void cpurtMemForkUnlock(bool child);
void cpurtFreeDeviceAllocs(int dev);

#endif /* ANYCCL_CPURT_H */
