/* anyccl-cpu: streams, host functions, events, implicit synchronisation of
 * the legacy stream, and the errors of bad handles. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "cpurt_test.h"

struct gate {                       /* a host function that blocks until opened */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int open, entered;
};

static void gateInit(struct gate *g) {
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->cond, NULL);
  g->open = g->entered = 0;
}

static void gateWait(void *arg) {
  struct gate *g = arg;
  pthread_mutex_lock(&g->lock);
  g->entered = 1;
  pthread_cond_broadcast(&g->cond);
  while (!g->open) pthread_cond_wait(&g->cond, &g->lock);
  pthread_mutex_unlock(&g->lock);
}

static void gateOpen(struct gate *g) {
  pthread_mutex_lock(&g->lock);
  g->open = 1;
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->lock);
}

static void gateAwaitEntered(struct gate *g) {
  pthread_mutex_lock(&g->lock);
  while (!g->entered) pthread_cond_wait(&g->cond, &g->lock);
  pthread_mutex_unlock(&g->lock);
}

static void gateDestroy(struct gate *g) {
  pthread_mutex_destroy(&g->lock);
  pthread_cond_destroy(&g->cond);
}

static void sleep200(void *arg) { sleepMs(200); }

/* A host function sleeps, a copy follows: the copy must wait for it. */
static void testAsyncOrdering(void) {
  cudaStream_t s;
  int *src, *dst;
  CUDACHECK(cudaStreamCreate(&s));
  CUDACHECK(cudaMalloc((void **)&src, 4096));
  CUDACHECK(cudaMalloc((void **)&dst, 4096));
  CUDACHECK(cudaMemset(src, 7, 4096));
  CUDACHECK(cudaMemset(dst, 0, 4096));
  double t0 = nowSec();
  CUDACHECK(cudaLaunchHostFunc(s, sleep200, NULL));
  CUDACHECK(cudaMemcpyAsync(dst, src, 4096, cudaMemcpyDeviceToDevice, s));
  CHECK(nowSec() - t0 < 0.19);              /* returned before the work ran */
  EXPECT(cudaErrorNotReady, cudaStreamQuery(s));
  sleepMs(50);
  EXPECT(cudaErrorNotReady, cudaStreamQuery(s));
  CHECK(cudaGetLastError() == cudaSuccess);   /* NotReady is not an error */
  CUDACHECK(cudaStreamSynchronize(s));
  CHECK(nowSec() - t0 >= 0.19);
  CUDACHECK(cudaStreamQuery(s));
  CHECK(dst[0] == 0x07070707 && dst[1023] == 0x07070707);
  CUDACHECK(cudaFree(src));
  CUDACHECK(cudaFree(dst));
  CUDACHECK(cudaStreamDestroy(s));
}

/* The copy really is held back: a gate keeps the host function running
 * while the destination is checked through the stream's own memory. */
static void testCopyHeldBack(void) {
  cudaStream_t s;
  struct gate g;
  static char src[64], dst[64];
  gateInit(&g);
  memset(src, 1, sizeof(src));
  memset(dst, 0, sizeof(dst));
  CUDACHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDACHECK(cudaLaunchHostFunc(s, gateWait, &g));
  CUDACHECK(cudaMemcpyAsync(dst, src, sizeof(src), cudaMemcpyHostToHost, s));
  gateAwaitEntered(&g);
  sleepMs(20);
  /* The worker is inside gateWait, which cannot return before gateOpen:
   * reading dst now is ordered before the copy by the gate's lock. */
  pthread_mutex_lock(&g.lock);
  CHECK(dst[0] == 0 && dst[63] == 0);
  pthread_mutex_unlock(&g.lock);
  EXPECT(cudaErrorNotReady, cudaStreamQuery(s));
  gateOpen(&g);
  CUDACHECK(cudaStreamSynchronize(s));
  CHECK(dst[0] == 1 && dst[63] == 1);
  CUDACHECK(cudaStreamDestroy(s));
  gateDestroy(&g);
}

struct order {
  pthread_mutex_t lock;
  int log[16];
  int n;
};

static struct order order = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static void logStep(int v) {
  pthread_mutex_lock(&order.lock);
  order.log[order.n++] = v;
  pthread_mutex_unlock(&order.lock);
}

static void step1(void *arg) { sleepMs(100); logStep(1); }
static void step2(void *arg) { logStep(2); }

static void resetOrder(void) {
  pthread_mutex_lock(&order.lock);
  order.n = 0;
  pthread_mutex_unlock(&order.lock);
}

static int orderCount(void) {
  pthread_mutex_lock(&order.lock);
  int n = order.n;
  pthread_mutex_unlock(&order.lock);
  return n;
}

static int orderIs(int a, int b) {
  pthread_mutex_lock(&order.lock);
  int ok = order.n == 2 && order.log[0] == a && order.log[1] == b;
  pthread_mutex_unlock(&order.lock);
  return ok;
}

/* Event recorded after slow work on a; b waits for it before its own work. */
static void testStreamWaitEvent(void) {
  cudaStream_t a, b;
  cudaEvent_t e;
  CUDACHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CUDACHECK(cudaSetDevice(1));
  CUDACHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));   /* another device */
  CUDACHECK(cudaSetDevice(0));
  CUDACHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CUDACHECK(cudaEventQuery(e));             /* never recorded: complete */
  CUDACHECK(cudaEventSynchronize(e));
  resetOrder();
  CUDACHECK(cudaLaunchHostFunc(a, step1, NULL));
  CUDACHECK(cudaEventRecord(e, a));
  EXPECT(cudaErrorNotReady, cudaEventQuery(e));
  CUDACHECK(cudaStreamWaitEvent(b, e, 0));
  CUDACHECK(cudaLaunchHostFunc(b, step2, NULL));
  CUDACHECK(cudaStreamSynchronize(b));
  CHECK(orderIs(1, 2));
  CUDACHECK(cudaEventQuery(e));
  /* Re-recording replaces what the event captured; waiting on the new
   * record does not wait for work queued after it. */
  resetOrder();
  CUDACHECK(cudaEventRecord(e, b));         /* b is idle: completes at once */
  CUDACHECK(cudaEventSynchronize(e));
  CUDACHECK(cudaLaunchHostFunc(b, step1, NULL));
  CUDACHECK(cudaStreamWaitEvent(a, e, 0));
  CUDACHECK(cudaLaunchHostFunc(a, step2, NULL));
  CUDACHECK(cudaStreamSynchronize(a));
  CUDACHECK(cudaStreamSynchronize(b));
  CHECK(orderIs(2, 1));
  EXPECT(cudaErrorInvalidValue, cudaStreamWaitEvent(a, e, 0x10));
  CUDACHECK(cudaEventDestroy(e));
  CUDACHECK(cudaStreamDestroy(a));
  CUDACHECK(cudaStreamDestroy(b));
}

/* Legacy stream: waits for blocking streams and is waited for by them;
 * non-blocking streams are exempt. */
static void testLegacySync(void) {
  cudaStream_t blocking, nonBlocking;
  CUDACHECK(cudaStreamCreate(&blocking));
  CUDACHECK(cudaStreamCreateWithFlags(&nonBlocking, cudaStreamNonBlocking));
  unsigned flags;
  CUDACHECK(cudaStreamGetFlags(blocking, &flags));
  CHECK(flags == cudaStreamDefault);
  CUDACHECK(cudaStreamGetFlags(nonBlocking, &flags));
  CHECK(flags == cudaStreamNonBlocking);

  resetOrder();                             /* blocking stream, then legacy */
  CUDACHECK(cudaLaunchHostFunc(blocking, step1, NULL));
  CUDACHECK(cudaLaunchHostFunc(0, step2, NULL));
  CUDACHECK(cudaStreamSynchronize(cudaStreamLegacy));
  CHECK(orderIs(1, 2));

  resetOrder();                             /* legacy, then blocking stream */
  CUDACHECK(cudaLaunchHostFunc(cudaStreamLegacy, step1, NULL));
  CUDACHECK(cudaLaunchHostFunc(blocking, step2, NULL));
  CUDACHECK(cudaStreamSynchronize(blocking));
  CHECK(orderIs(1, 2));

  resetOrder();                             /* non-blocking: no implicit wait */
  CUDACHECK(cudaLaunchHostFunc(nonBlocking, step1, NULL));
  CUDACHECK(cudaLaunchHostFunc(0, step2, NULL));
  CUDACHECK(cudaStreamSynchronize(0));
  CHECK(orderCount() == 1);                 /* step1 still sleeps */
  CUDACHECK(cudaStreamSynchronize(nonBlocking));
  CHECK(orderIs(2, 1));

  resetOrder();                             /* other devices are unaffected */
  CUDACHECK(cudaLaunchHostFunc(blocking, step1, NULL));
  CUDACHECK(cudaSetDevice(1));
  CUDACHECK(cudaLaunchHostFunc(0, step2, NULL));
  CUDACHECK(cudaStreamSynchronize(0));
  CUDACHECK(cudaSetDevice(0));
  CUDACHECK(cudaDeviceSynchronize());
  CHECK(orderIs(2, 1));

  /* cudaStreamSynchronize(0) and synchronous copies wait for blocking streams. */
  static int hostBuf[4], devVal;
  resetOrder();
  CUDACHECK(cudaLaunchHostFunc(blocking, step1, NULL));
  CUDACHECK(cudaStreamSynchronize(0));
  CHECK(orderCount() == 1);
  devVal = 0;
  CUDACHECK(cudaLaunchHostFunc(blocking, sleep200, NULL));
  CUDACHECK(cudaMemsetAsync(&devVal, 1, 1, blocking));
  CUDACHECK(cudaMemcpy(hostBuf, &devVal, sizeof(int), cudaMemcpyDefault));
  CHECK(hostBuf[0] == 1);

  CUDACHECK(cudaStreamDestroy(blocking));
  CUDACHECK(cudaStreamDestroy(nonBlocking));
}

static void testEvents(void) {
  cudaStream_t s;
  cudaEvent_t start, stop, noTiming;
  float ms = -1;
  CUDACHECK(cudaStreamCreate(&s));
  CUDACHECK(cudaEventCreate(&start));
  CUDACHECK(cudaEventCreateWithFlags(&stop, cudaEventBlockingSync));
  CUDACHECK(cudaEventCreateWithFlags(&noTiming, cudaEventDisableTiming));
  EXPECT(cudaErrorInvalidValue, cudaEventCreateWithFlags(&noTiming, cudaEventInterprocess));
  EXPECT(cudaErrorInvalidValue, cudaEventCreateWithFlags(&noTiming, 0x80));
  cudaEvent_t ipcEvent;
  CUDACHECK(cudaEventCreateWithFlags(&ipcEvent, cudaEventInterprocess | cudaEventDisableTiming));
  CUDACHECK(cudaEventDestroy(ipcEvent));
  EXPECT(cudaErrorInvalidResourceHandle, cudaEventElapsedTime(&ms, start, stop));   /* unrecorded */

  CUDACHECK(cudaEventRecord(start, s));
  CUDACHECK(cudaLaunchHostFunc(s, sleep200, NULL));
  CUDACHECK(cudaEventRecord(stop, s));
  CUDACHECK(cudaEventRecord(noTiming, s));
  EXPECT(cudaErrorNotReady, cudaEventElapsedTime(&ms, start, stop));
  CUDACHECK(cudaEventSynchronize(stop));
  CUDACHECK(cudaEventQuery(stop));
  CUDACHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(ms >= 190.0f && ms < 5000.0f);
  CUDACHECK(cudaEventElapsedTime(&ms, stop, start));
  CHECK(ms <= -190.0f);
  CUDACHECK(cudaEventSynchronize(noTiming));
  EXPECT(cudaErrorInvalidResourceHandle, cudaEventElapsedTime(&ms, start, noTiming));
  EXPECT(cudaErrorInvalidValue, cudaEventElapsedTime(NULL, start, stop));

  /* Recorded on the legacy stream; destroyed while pending. */
  CUDACHECK(cudaLaunchHostFunc(0, sleep200, NULL));
  CUDACHECK(cudaEventRecord(start, 0));
  CUDACHECK(cudaEventDestroy(start));
  CUDACHECK(cudaStreamSynchronize(0));
  CUDACHECK(cudaEventDestroy(stop));
  CUDACHECK(cudaEventDestroy(noTiming));
  EXPECT(cudaErrorInvalidResourceHandle, cudaEventQuery(stop));
  EXPECT(cudaErrorInvalidResourceHandle, cudaEventRecord(stop, s));
  EXPECT(cudaErrorInvalidResourceHandle, cudaEventDestroy(stop));
  CUDACHECK(cudaStreamDestroy(s));
  cudaGetLastError();
}

static void testBadHandles(void) {
  cudaStream_t s, bogus = (cudaStream_t)(uintptr_t)0xdeadbeef0ull;
  cudaEvent_t e, bogusEvent = (cudaEvent_t)(uintptr_t)0x12345678ull;
  int dev;
  CUDACHECK(cudaStreamCreate(&s));
  CUDACHECK(cudaStreamDestroy(s));
  EXPECT(cudaErrorInvalidResourceHandle, cudaStreamSynchronize(s));   /* destroyed */
  EXPECT(cudaErrorInvalidResourceHandle, cudaStreamQuery(bogus));
  EXPECT(cudaErrorInvalidResourceHandle, cudaStreamDestroy(bogus));
  EXPECT(cudaErrorInvalidResourceHandle, cudaStreamDestroy(0));
  EXPECT(cudaErrorInvalidResourceHandle, cudaLaunchHostFunc(bogus, sleep200, NULL));
  EXPECT(cudaErrorInvalidResourceHandle, cudaMemcpyAsync(&dev, &dev, 4, cudaMemcpyDefault, bogus));
  EXPECT(cudaErrorInvalidResourceHandle, cudaMemsetAsync(&dev, 0, 4, s));
  EXPECT(cudaErrorInvalidResourceHandle, cudaStreamGetDevice(bogus, &dev));
  EXPECT(cudaErrorInvalidResourceHandle, cudaEventQuery(bogusEvent));
  EXPECT(cudaErrorInvalidResourceHandle, cudaEventSynchronize(bogusEvent));
  CUDACHECK(cudaEventCreate(&e));
  EXPECT(cudaErrorInvalidResourceHandle, cudaEventRecord(e, bogus));
  EXPECT(cudaErrorInvalidResourceHandle, cudaStreamWaitEvent(0, bogusEvent, 0));
  /* A stream handle is not an event handle, nor the other way round. */
  CUDACHECK(cudaStreamCreate(&s));
  EXPECT(cudaErrorInvalidResourceHandle, cudaEventQuery((cudaEvent_t)s));
  EXPECT(cudaErrorInvalidResourceHandle, cudaStreamQuery((cudaStream_t)e));
  EXPECT(cudaErrorInvalidValue, cudaLaunchHostFunc(s, NULL, NULL));
  EXPECT(cudaErrorInvalidValue, cudaStreamCreateWithFlags(&s, 0x4));
  EXPECT(cudaErrorInvalidValue, cudaStreamCreate(NULL));
  CUDACHECK(cudaStreamDestroy(s));
  CUDACHECK(cudaEventDestroy(e));
  EXPECT(cudaErrorInvalidValue, cudaGetLastError());   /* the latest failure */
}

struct probe {
  int device;
  int attrType;
  void *ptr;
  int ran;
};

/* From inside a worker: runtime queries must work (and not deadlock). */
static void probeFn(void *arg) {
  struct probe *p = arg;
  struct cudaPointerAttributes a;
  cudaStream_t s;
  CUDACHECK(cudaGetDevice(&p->device));
  CUDACHECK(cudaPointerGetAttributes(&a, p->ptr));
  p->attrType = a.type;
  CUDACHECK(cudaStreamCreate(&s));
  CUDACHECK(cudaMemsetAsync(p->ptr, 3, 8, s));
  CUDACHECK(cudaStreamSynchronize(s));      /* another stream: allowed here */
  CUDACHECK(cudaStreamDestroy(s));
  int v = 0;
  CUDACHECK(cudaMemcpy(&v, p->ptr, 1, cudaMemcpyDefault));   /* in a worker: at once */
  CHECK(v == 3);
  p->ran = 1;
}

static void callbackFn(cudaStream_t stream, cudaError_t status, void *arg) {
  *(cudaStream_t *)arg = status == cudaSuccess ? stream : NULL;
}

static void testWorkerContext(void) {
  cudaStream_t s, seen = NULL;
  struct probe p = {-1, -1, NULL, 0};
  int dev = -1, prio = 1;
  CUDACHECK(cudaSetDevice(4));
  CUDACHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -100));
  CUDACHECK(cudaMalloc(&p.ptr, 64));
  CUDACHECK(cudaSetDevice(0));
  CUDACHECK(cudaStreamGetDevice(s, &dev));
  CHECK(dev == 4);
  CUDACHECK(cudaStreamGetPriority(s, &prio));
  CHECK(prio == -5);                        /* clamped to the greatest */
  CUDACHECK(cudaLaunchHostFunc(s, probeFn, &p));
  CUDACHECK(cudaStreamAddCallback(s, callbackFn, &seen, 0));
  EXPECT(cudaErrorInvalidValue, cudaStreamAddCallback(s, callbackFn, &seen, 1));
  CUDACHECK(cudaStreamSynchronize(s));
  CHECK(p.ran && p.device == 4 && p.attrType == cudaMemoryTypeDevice && seen == s);
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
  CUDACHECK(cudaStreamIsCapturing(s, &cs));
  CHECK(cs == cudaStreamCaptureStatusNone);
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CUDACHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  CHECK(mode == cudaStreamCaptureModeGlobal);
  unsigned long long id1, id2;
  CUDACHECK(cudaStreamGetId(s, &id1));
  CUDACHECK(cudaStreamGetId(0, &id2));
  CHECK(id1 != id2);
  CUDACHECK(cudaStreamDestroy(s));
  CUDACHECK(cudaFree(p.ptr));
  cudaGetLastError();
}

static atomic_int destroyedRan;
static void countFn(void *arg) { sleepMs(1); atomic_fetch_add(&destroyedRan, 1); }

/* Work queued before cudaStreamDestroy still runs. */
static void testDestroyWithPendingWork(void) {
  cudaStream_t s;
  CUDACHECK(cudaStreamCreate(&s));
  for (int i = 0; i < 50; i++) CUDACHECK(cudaLaunchHostFunc(s, countFn, NULL));
  CUDACHECK(cudaStreamDestroy(s));
  CUDACHECK(cudaDeviceSynchronize());       /* still covers the destroyed stream */
  CHECK(atomic_load(&destroyedRan) == 50);
}

/* Both threads' per-thread streams must run at once: each host function
 * waits (up to 10 s) for the other to have started. */
static pthread_mutex_t meetLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t meetCond = PTHREAD_COND_INITIALIZER;
static int meetCount, meetFailed;

static void meetFn(void *arg) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 10;
  pthread_mutex_lock(&meetLock);
  meetCount++;
  pthread_cond_broadcast(&meetCond);
  while (meetCount < 2)
    if (pthread_cond_timedwait(&meetCond, &meetLock, &deadline) != 0) {
      meetFailed = 1;
      break;
    }
  pthread_mutex_unlock(&meetLock);
}

static void *perThreadUser(void *arg) {
  int *v = arg;
  CUDACHECK(cudaLaunchHostFunc(cudaStreamPerThread, meetFn, NULL));
  CUDACHECK(cudaLaunchHostFunc(cudaStreamPerThread, sleep200, NULL));
  CUDACHECK(cudaMemsetAsync(v, 9, sizeof(int), cudaStreamPerThread));
  EXPECT(cudaErrorNotReady, cudaStreamQuery(cudaStreamPerThread));
  CUDACHECK(cudaStreamSynchronize(cudaStreamPerThread));
  return NULL;
}

static void testPerThreadStream(void) {
  static int a, b;
  pthread_t t1, t2;
  CHECK(pthread_create(&t1, NULL, perThreadUser, &a) == 0);
  CHECK(pthread_create(&t2, NULL, perThreadUser, &b) == 0);
  CHECK(pthread_join(t1, NULL) == 0 && pthread_join(t2, NULL) == 0);
  CHECK(!meetFailed);
  CHECK(a == 0x09090909 && b == 0x09090909);
  unsigned flags = 1;
  CUDACHECK(cudaStreamGetFlags(cudaStreamPerThread, &flags));
  CHECK(flags == cudaStreamDefault);
}

int main(void) {
  testAsyncOrdering();
  testCopyHeldBack();
  testStreamWaitEvent();
  testLegacySync();
  testEvents();
  testBadHandles();
  testWorkerContext();
  testDestroyWithPendingWork();
  testPerThreadStream();
  printf("cpurt_stream: OK\n");
  return 0;
}
