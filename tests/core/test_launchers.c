/* Launch threads (src/core/launchers.c) on anyccl-cpu's virtual devices:
 *   rounds   back-to-back rounds of 4 jobs: each runs exactly once, on its
 *            device, and the launch threads (not only the caller) run some
 *   sleep    ANYCCL_LAUNCH_SPIN_US=0 (set by CTest): the threads sleep after
 *            every job, and a posted job wakes them; exactly once, no hang
 *   callers  two threads post rounds over overlapping devices at once
 *   onecpu   the process bound to one CPU (as mpirun --bind-to core): the
 *            caller runs every job itself, and 2000 rounds take well under
 *            a second (launch threads taking turns with the caller for the
 *            core would cost a scheduler time slice a round)
 * Prints "PASS: ..." or the first failure, and exits non-zero on failure. */
#define _GNU_SOURCE /* sched_setaffinity */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime_api.h> /* anyccl-cpu's (a direct use keeps it linked) */
#include "launchers.h"
#include "rt.h"

#define NDEV 4
struct job {
  struct anycclLaunchJob j;
  int runs;       /* how often it ran this round */
  int wrongDev;   /* ran with another device current */
  pthread_t by;   /* the thread that ran it */
  int busyUs;     /* work to do (the caller's own job: time for the threads to wake) */
};

static double nowS(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void runJob(struct anycclLaunchJob* aj, int* curDev) {
  struct job* j = (struct job*)aj;
  if (*curDev != j->j.dev) { /* as launchComm does */
    anycclRt.setDevice(j->j.dev);
    *curDev = j->j.dev;
  }
  int d = -1;
  anycclRt.getDevice(&d);
  if (d != j->j.dev) j->wrongDev++;
  __atomic_fetch_add(&j->runs, 1, __ATOMIC_RELAXED);
  j->by = pthread_self();
  if (j->busyUs) {
    double end = nowS() + j->busyUs * 1e-6;
    while (nowS() < end) {}
  }
}

struct caller {
  int devs[NDEV], ndev, rounds, busyUs, gapUs;
  double maxS;                 /* seconds at most */
  long onThreads, ran, failures;
  char err[200];
  int callerOnly; /* stop after `rounds` even if no launch thread ran a job */
};

static void* callerMain(void* arg) {
  struct caller* c = arg;
  int cur = c->devs[0];
  anycclRt.setDevice(cur);
  double t0 = nowS();
  /* `rounds` rounds, and on until a launch thread has run a job (with 2
   * cores and 5 spinning threads that can take a while), for maxS at most */
  for (int r = 0; c->failures == 0; r++) {
    struct job jobs[NDEV];
    struct anycclLaunchJob* order[NDEV];
    memset(jobs, 0, sizeof(jobs));
    for (int k = 0; k < c->ndev; k++) {
      jobs[k].j.dev = c->devs[k];
      jobs[k].j.fn = runJob;
      jobs[k].busyUs = k == 0 ? c->busyUs : 0;
      order[k] = &jobs[k].j;
    }
    anycclLaunchRun(order, c->ndev, &cur);
    for (int k = 0; k < c->ndev; k++) {
      if (jobs[k].runs != 1 || jobs[k].wrongDev) {
        snprintf(c->err, sizeof(c->err), "round %d job %d (device %d): ran %d times, %d with the wrong device", r, k,
                 c->devs[k], jobs[k].runs, jobs[k].wrongDev);
        c->failures++;
      }
      if (!pthread_equal(jobs[k].by, pthread_self())) c->onThreads++;
      c->ran++;
    }
    if (c->gapUs) usleep(c->gapUs);
    if ((r + 1 >= c->rounds && (c->onThreads > 0 || c->callerOnly)) || nowS() - t0 > c->maxS) break;
  }
  return NULL;
}

static int report(const char* what, struct caller* c, int n) {
  for (int i = 0; i < n; i++) {
    if (c[i].failures) {
      printf("FAIL: %s: %s\n", what, c[i].err);
      return 1;
    }
    if (c[i].onThreads == 0) {
      printf("FAIL: %s: caller %d ran all %ld jobs itself; the launch threads ran none\n", what, i, c[i].ran);
      return 1;
    }
  }
  for (int i = 0; i < n; i++)
    printf("PASS: %s: caller %d: %ld jobs, %ld on launch threads\n", what, i, c[i].ran, c[i].onThreads);
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "rounds";
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < NDEV) {
    printf("FAIL: %d virtual devices; run with ANYCCL_CPU_DEVICES=%d\n", n, NDEV);
    return 1;
  }
  if (anycclRtInit() != 0) {
    printf("FAIL: no CUDA runtime (anyccl-cpu)\n");
    return 1;
  }
  if (!anycclLaunchThreadsOn()) {
    printf("FAIL: ANYCCL_LAUNCH_THREADS is 0\n");
    return 1;
  }
  if (strcmp(mode, "rounds") == 0) {
    struct caller c = {{0, 1, 2, 3}, NDEV, 200000, 0, 0, 10.0, 0, 0, 0, "", 0};
    callerMain(&c);
    return report("rounds", &c, 1);
  }
  if (strcmp(mode, "sleep") == 0) {
    /* the caller's own job lasts 300 us: a woken thread takes its job meanwhile */
    struct caller c = {{0, 1, 2, 3}, NDEV, 300, 300, 500, 10.0, 0, 0, 0, "", 0};
    callerMain(&c);
    return report("sleep", &c, 1);
  }
  if (strcmp(mode, "callers") == 0) {
    struct caller c[2] = {{{0, 1, 2}, 3, 20000, 0, 0, 10.0, 0, 0, 0, "", 0}, {{3, 2, 1}, 3, 20000, 0, 0, 10.0, 0, 0, 0, "", 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, callerMain, &c[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    return report("callers", c, 2);
  }
  if (strcmp(mode, "onecpu") == 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
      printf("FAIL: sched_getaffinity\n");
      return 1;
    }
    int cpu = 0;
    while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set)) cpu++;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
      printf("FAIL: binding to CPU %d\n", cpu);
      return 1;
    }
    struct caller c = {{0, 1, 2, 3}, NDEV, 2000, 0, 0, 10.0, 0, 0, 0, "", 1};
    double t0 = nowS();
    callerMain(&c); /* (runs 2000 rounds: no launch thread ever runs a job) */
    const double s = nowS() - t0;
    if (c.failures) printf("FAIL: onecpu: %s\n", c.err);
    else if (c.onThreads != 0) printf("FAIL: onecpu: %ld of %ld jobs ran on launch threads\n", c.onThreads, c.ran);
    else if (s > 1.0) printf("FAIL: onecpu: 2000 rounds took %.3f s\n", s);
    else printf("PASS: onecpu: %ld jobs on the caller (CPU %d) in %.3f s\n", c.ran, cpu, s);
    return c.failures || c.onThreads != 0 || s > 1.0;
  }
  printf("usage: test_launchers rounds|sleep|callers|onecpu\n");
  return 2;
}
