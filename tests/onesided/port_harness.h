/* Two ranks for the one-sided tests: as threads of one process (two
 * devices), as two processes of one host, or as two processes on two
 * virtual hosts (NCCL_HOSTID). A case is a function run by each rank. */
#ifndef ANYCCL_TEST_PORT_HARNESS_H
#define ANYCCL_TEST_PORT_HARNESS_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "anyccl_port.h"

struct ctx {
  ncclComm_t comm;
  int rank, peer;
  int procs;        /* ranks are processes */
  const char* mode; /* threads, procs, hosts */
};

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", c->rank, __FILE__, __LINE__, #cond);   \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)
#define OK(x)                                                                                      \
  do {                                                                                             \
    ncclResult_t r_ = (x);                                                                         \
    EXPECT(r_ == ncclSuccess, "%s returned %s (%s)", #x, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
  } while (0)

static inline double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A buffer of `bytes` on my device, registered, exchanged with the peer
 * (both directions), a semaphore pair, and a port channel to the peer's. */
struct pair {
  anycclProxyService_t svc;
  char* buf;
  size_t bytes;
  anycclMemoryId local, remote;
  anycclSemaphoreId sem;
  struct anycclPortChannel ch;
};

static inline int pairSetup(struct ctx* c, struct pair* p, size_t bytes, int fifoSize, int start) {
  memset(p, 0, sizeof(*p));
  p->bytes = bytes;
  EXPECT(cudaMalloc((void**)&p->buf, bytes) == cudaSuccess, "cudaMalloc");
  memset(p->buf, 0, bytes);
  OK(anycclProxyServiceCreate(c->comm, fifoSize, &p->svc));
  OK(anycclRegisterMemory(p->svc, p->buf, bytes, &p->local));
  OK(anycclMemorySend(p->svc, p->local, c->peer));
  OK(anycclMemoryRecv(p->svc, c->peer, &p->remote));
  OK(anycclSemaphoreCreate(p->svc, c->peer, &p->sem));
  OK(anycclPortChannelCreate(p->svc, p->sem, p->remote, p->local, &p->ch));
  if (start) OK(anycclProxyServiceStart(p->svc));
  return 0;
}

/* Both ranks: signal, wait (a barrier of the pair). */
static inline int pairBarrier(struct ctx* c, struct pair* p) {
  OK(anycclPortSignal(&p->ch));
  OK(anycclPortWait(&p->ch));
  return 0;
}

static inline int pairTeardown(struct ctx* c, struct pair* p) {
  if (pairBarrier(c, p)) return 1;
  OK(anycclProxyServiceStop(p->svc));
  OK(anycclProxyServiceDestroy(p->svc));
  EXPECT(cudaFree(p->buf) == cudaSuccess, "cudaFree");
  return 0;
}

typedef int (*caseFn)(struct ctx*);

struct caseArg { struct ctx c; caseFn fn; int result; };
static inline void* caseThread(void* p) {
  struct caseArg* a = p;
  cudaSetDevice(a->c.rank);
  a->result = a->fn(&a->c);
  return NULL;
}

static inline void hexId(const ncclUniqueId* id, char* out) {
  for (int i = 0; i < (int)sizeof(id->internal); i++) sprintf(out + 2 * i, "%02x", (unsigned char)id->internal[i]);
}
static inline void unhexId(const char* s, ncclUniqueId* id) {
  for (int i = 0; i < (int)sizeof(id->internal); i++) {
    unsigned v = 0;
    sscanf(s + 2 * i, "%2x", &v);
    id->internal[i] = (char)v;
  }
}

/* Two processes, each exec'ing this program as `argv0 --child a1 a2 RANK
 * HEXID` (hosts: with NCCL_HOSTID=host<RANK>); the number that failed. */
static inline int forkPair(const char* argv0, const char* a1, const char* a2, int hosts) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  char hex[2 * sizeof(id.internal) + 1];
  hexId(&id, hex);
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    if ((pids[r] = fork()) == 0) {
      char rs[8], host[16];
      snprintf(rs, sizeof(rs), "%d", r);
      snprintf(host, sizeof(host), "host%d", r);
      if (hosts) setenv("NCCL_HOSTID", host, 1);
      execl("/proc/self/exe", argv0, "--child", a1, a2, rs, hex, (char*)NULL);
      _exit(127);
    }
  }
  int fails = 0;
  for (int r = 0; r < 2; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d failed (status 0x%x)\n", r, st);
      fails++;
    }
  }
  return fails;
}

#endif
