/* anyccl-cpu: many threads and streams at once.
 *
 * Worker threads drive chains of copies, host functions and events over
 * several streams and devices, waiting on each other's events, while a
 * chaos thread creates and destroys handles and pokes at dead ones. Also
 * the pattern anyccl relies on: host functions on the streams of several
 * devices that block until all of them have started (a collective). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "cpurt_test.h"

#define THREADS 8
#define STREAMS 4
#define ITERS 300
#define SLOTS 8
#define SLOT 64

struct check {
  unsigned char *p;
  unsigned char want;
};

static atomic_int checked, failures;
static atomic_int running;
static cudaEvent_t shared[THREADS];   /* recorded by thread t, waited on by t - 1 */

static void checkFn(void *arg) {
  struct check *c = arg;
  for (int i = 0; i < SLOT; i++)
    if (c->p[i] != c->want) {
      atomic_fetch_add(&failures, 1);
      break;
    }
  atomic_fetch_add(&checked, 1);
}

static void *driver(void *arg) {
  int t = (int)(intptr_t)arg, ndev;
  CUDACHECK(cudaGetDeviceCount(&ndev));
  cudaStream_t s[STREAMS];
  cudaEvent_t ev[STREAMS];
  unsigned char *buf[STREAMS], *host;
  struct check *checks = calloc((size_t)STREAMS * ITERS, sizeof(*checks));
  CHECK(checks != NULL);
  CUDACHECK(cudaMallocHost((void **)&host, SLOT));
  for (int k = 0; k < STREAMS; k++) {
    CUDACHECK(cudaSetDevice((t + k) % ndev));
    CUDACHECK(cudaStreamCreateWithFlags(&s[k], k % 2 ? cudaStreamNonBlocking : cudaStreamDefault));
    CUDACHECK(cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming));
    CUDACHECK(cudaMalloc((void **)&buf[k], SLOTS * SLOT));
  }
  CUDACHECK(cudaSetDevice(t % ndev));
  for (int i = 0; i < ITERS; i++) {
    for (int k = 0; k < STREAMS; k++) {
      struct check *c = &checks[i * STREAMS + k];
      c->p = buf[k] + (i % SLOTS) * SLOT;
      c->want = (unsigned char)(i + k);
      CUDACHECK(cudaMemsetAsync(c->p, c->want, SLOT, s[k]));
      CUDACHECK(cudaLaunchHostFunc(s[k], checkFn, c));
      CUDACHECK(cudaEventRecord(ev[k], s[k]));
      CUDACHECK(cudaStreamWaitEvent(s[(k + 1) % STREAMS], ev[k], 0));
    }
    CUDACHECK(cudaEventRecord(shared[t], s[i % STREAMS]));
    CUDACHECK(cudaStreamWaitEvent(s[0], shared[(t + 1) % THREADS], 0));
    if (i % 16 == 0) {
      CUDACHECK(cudaMemcpyAsync(host, buf[0], SLOT, cudaMemcpyDeviceToHost, 0));
      CUDACHECK(cudaStreamSynchronize(0));
      /* The legacy stream waited for s[0] (blocking, same device). */
      CHECK(host[0] == (unsigned char)i && host[SLOT - 1] == (unsigned char)i);
    }
    if (i % 50 == 0) {
      cudaError_t q = cudaStreamQuery(s[i % STREAMS]);
      CHECK(q == cudaSuccess || q == cudaErrorNotReady);
      q = cudaEventQuery(ev[0]);
      CHECK(q == cudaSuccess || q == cudaErrorNotReady);
    }
  }
  for (int k = 0; k < STREAMS; k++) CUDACHECK(cudaStreamSynchronize(s[k]));
  for (int k = 0; k < STREAMS; k++) {
    CUDACHECK(cudaStreamDestroy(s[k]));
    CUDACHECK(cudaEventDestroy(ev[k]));
    CUDACHECK(cudaFree(buf[k]));
  }
  CUDACHECK(cudaFreeHost(host));
  free(checks);
  atomic_fetch_sub(&running, 1);
  return NULL;
}

/* Creates and destroys handles, and uses dead ones, while work goes on. */
static void *chaos(void *arg) {
  int rounds = 0;
  while (atomic_load(&running) > 0 || rounds < 100) {
    cudaStream_t s;
    cudaEvent_t e;
    CUDACHECK(cudaStreamCreateWithFlags(&s, rounds % 2 ? cudaStreamNonBlocking : 0));
    CUDACHECK(cudaEventCreate(&e));
    CUDACHECK(cudaEventRecord(e, s));
    CUDACHECK(cudaStreamDestroy(s));
    EXPECT(cudaErrorInvalidResourceHandle, cudaStreamQuery(s));
    EXPECT(cudaErrorInvalidResourceHandle, cudaEventRecord(e, s));
    CUDACHECK(cudaEventSynchronize(e));
    CUDACHECK(cudaEventDestroy(e));
    EXPECT(cudaErrorInvalidResourceHandle, cudaEventQuery(e));
    rounds++;
  }
  cudaGetLastError();
  return NULL;
}

static pthread_barrier_t collective;
static atomic_int arrived;

/* Blocks until the host functions of all devices are running. */
static void collectiveFn(void *arg) {
  atomic_fetch_add(&arrived, 1);
  pthread_barrier_wait(&collective);
}

static void testCollectivePattern(void) {
  enum { NDEV = 4 };
  cudaStream_t s[NDEV];
  CHECK(pthread_barrier_init(&collective, NULL, NDEV) == 0);
  for (int d = 0; d < NDEV; d++) {
    CUDACHECK(cudaSetDevice(d));
    CUDACHECK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
    CUDACHECK(cudaLaunchHostFunc(s[d], collectiveFn, NULL));
  }
  for (int d = 0; d < NDEV; d++) CUDACHECK(cudaStreamSynchronize(s[d]));
  CHECK(atomic_load(&arrived) == NDEV);
  /* The same on the legacy streams of the devices. */
  for (int d = 0; d < NDEV; d++) {
    CUDACHECK(cudaSetDevice(d));
    CUDACHECK(cudaLaunchHostFunc(0, collectiveFn, NULL));
  }
  for (int d = 0; d < NDEV; d++) {
    CUDACHECK(cudaSetDevice(d));
    CUDACHECK(cudaDeviceSynchronize());
    CUDACHECK(cudaStreamDestroy(s[d]));
  }
  CHECK(atomic_load(&arrived) == 2 * NDEV);
  CHECK(pthread_barrier_destroy(&collective) == 0);
  CUDACHECK(cudaSetDevice(0));
}

int main(void) {
  double t0 = nowSec();
  testCollectivePattern();
  for (int t = 0; t < THREADS; t++)
    CUDACHECK(cudaEventCreateWithFlags(&shared[t], cudaEventDisableTiming));
  pthread_t th[THREADS], ch;
  atomic_store(&running, THREADS);
  for (int t = 0; t < THREADS; t++)
    CHECK(pthread_create(&th[t], NULL, driver, (void *)(intptr_t)t) == 0);
  CHECK(pthread_create(&ch, NULL, chaos, NULL) == 0);
  for (int t = 0; t < THREADS; t++) CHECK(pthread_join(th[t], NULL) == 0);
  CHECK(pthread_join(ch, NULL) == 0);
  for (int t = 0; t < THREADS; t++) CUDACHECK(cudaEventDestroy(shared[t]));
  CUDACHECK(cudaDeviceSynchronize());
  CHECK(atomic_load(&failures) == 0);
  CHECK(atomic_load(&checked) == THREADS * STREAMS * ITERS);
  printf("cpurt_stress: OK (%.2f s)\n", nowSec() - t0);
  return 0;
}
