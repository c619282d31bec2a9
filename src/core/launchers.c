/* Launch threads: one per device, started the first time one thread's group
 * launches on several devices (nccl-tests -g N, or any program that drives
 * several GPUs from one thread). A kernel launch costs the host 3.5-5 us, and
 * one thread launching on N devices pays N of them in a row; launches on
 * different devices from different threads overlap (4 x H200: a round of four
 * launches takes 14.2 us from one thread, 5.8 us from four;
 * tests/gpu/micro/launch.cu). So the group's caller hands each other device's
 * launches to that device's thread, runs its own device's, and waits for the
 * rest; a job no launch thread has picked up by then the caller runs itself,
 * so a sleeping or busy launch thread never makes a group slower than one
 * thread launching everything.
 *
 * A launch thread spins for ANYCCL_LAUNCH_SPIN_US after its last job (groups
 * that follow each other closely find it awake), yielding its core now and
 * then, then sleeps on a futex; the next job wakes it. A process allowed a
 * single CPU (mpirun's --bind-to core, taskset) launches everything on the
 * caller's thread: there a spinning launch thread could only take turns
 * with the caller for the one core, a scheduler time slice (milliseconds)
 * at a time. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "debug.h"
#include "launchers.h"
#include "param.h"
#include "plan.h"
#include "rt.h"

#define MAX_LAUNCHERS 64

struct __attribute__((aligned(64))) launcher {
  struct anycclLaunchJob* slot; /* posted job, taken by exchange (the taker runs it) */
  int sleeping;                 /* futex word: 1 while the thread sleeps */
  int dev;
  int started;
};

static struct launcher launchers[MAX_LAUNCHERS];
static pthread_mutex_t startLock = PTHREAD_MUTEX_INITIALIZER;
static double spinS = -1;

/* Sleep until a poster clears l->sleeping (returns its job, or NULL when woken
 * with none: the caller spins again). Timeouts sleep again without spinning. */
static struct anycclLaunchJob* launcherSleep(struct launcher* l) {
  for (;;) {
    __atomic_store_n(&l->sleeping, 1, __ATOMIC_SEQ_CST);
    struct anycclLaunchJob* j = __atomic_exchange_n(&l->slot, NULL, __ATOMIC_SEQ_CST);
    if (j) {
      __atomic_store_n(&l->sleeping, 0, __ATOMIC_RELAXED);
      return j;
    }
    struct timespec ts = {1, 0};
    syscall(SYS_futex, &l->sleeping, FUTEX_WAIT_PRIVATE, 1, &ts, NULL, 0);
    if (__atomic_load_n(&l->sleeping, __ATOMIC_SEQ_CST) == 0) return __atomic_exchange_n(&l->slot, NULL, __ATOMIC_ACQ_REL);
  }
}

static void* launcherMain(void* arg) {
  struct launcher* l = arg;
  int cur = l->dev;
  if (anycclRt.setDevice(l->dev) != 0) cur = -1; /* a job sets it then */
  double idleSince = anycclNowSec();
  for (unsigned spins = 0;; spins++) {
    struct anycclLaunchJob* j = __atomic_exchange_n(&l->slot, NULL, __ATOMIC_ACQ_REL);
    if (j == NULL && (spins & 255) == 255 && anycclNowSec() - idleSince > spinS) {
      j = launcherSleep(l);
      idleSince = anycclNowSec();
    }
    if (j == NULL) {
      if ((spins & 255) == 0) sched_yield(); /* (returns at once when nothing else wants the core) */
      else anycclCpuRelax();
      continue;
    }
    j->fn(j, &cur);
    __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
    idleSince = anycclNowSec();
  }
  return NULL;
}

/* The launch thread of dev, started on first use; NULL when it cannot be. */
static struct launcher* launcherFor(int dev) {
  if (dev < 0 || dev >= MAX_LAUNCHERS) return NULL;
  struct launcher* l = &launchers[dev];
  int st = __atomic_load_n(&l->started, __ATOMIC_ACQUIRE);
  if (st) return st > 0 ? l : NULL;
  pthread_mutex_lock(&startLock);
  if (spinS < 0) spinS = anycclParamInt(PARAM_LAUNCH_SPIN_US) * 1e-6;
  if (l->started == 0) {
    l->dev = dev;
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int ok = pthread_create(&t, &a, launcherMain, l) == 0;
    pthread_attr_destroy(&a);
    if (!ok) WARN("starting the launch thread of device %d failed; its launches run on the caller's thread", dev);
    else INFO(NCCL_INIT, "launch thread for device %d started (ANYCCL_LAUNCH_THREADS=0 turns them off)", dev);
    __atomic_store_n(&l->started, ok ? 1 : -1, __ATOMIC_RELEASE);
  }
  st = l->started;
  pthread_mutex_unlock(&startLock);
  return st > 0 ? l : NULL;
}

int anycclLaunchThreadsOn(void) {
  static int on = -1;
  int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
  if (v < 0) {
    v = anycclParamInt(PARAM_LAUNCH_THREADS) != 0;
    __atomic_store_n(&on, v, __ATOMIC_RELAXED);
  }
  return v;
}

/* CPUs the calling thread may run on (taken once: a process is bound at its
 * start) */
static int allowedCpus(void) {
  static int n = 0;
  int v = __atomic_load_n(&n, __ATOMIC_RELAXED);
  if (v == 0) {
    cpu_set_t set;
    v = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 2;
    if (v < 1) v = 1;
    __atomic_store_n(&n, v, __ATOMIC_RELAXED);
  }
  return v;
}

void anycclLaunchRun(struct anycclLaunchJob** jobs, int n, int* curDev) {
  struct launcher* posted[MAX_LAUNCHERS];
  if (n > MAX_LAUNCHERS || allowedCpus() < 2) { /* all here */
    for (int i = 0; i < n; i++) jobs[i]->fn(jobs[i], curDev);
    return;
  }
  for (int i = 1; i < n; i++) {
    struct launcher* l = launcherFor(jobs[i]->dev);
    jobs[i]->done = 0;
    struct anycclLaunchJob* none = NULL;
    /* the slot is busy when another thread's group posted there first: run it here then */
    if (l && !__atomic_compare_exchange_n(&l->slot, &none, jobs[i], 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) l = NULL;
    posted[i] = l;
    if (l == NULL) continue;
    if (__atomic_load_n(&l->sleeping, __ATOMIC_SEQ_CST)) {
      __atomic_store_n(&l->sleeping, 0, __ATOMIC_SEQ_CST);
      syscall(SYS_futex, &l->sleeping, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
  }
  jobs[0]->fn(jobs[0], curDev);
  for (int i = 1; i < n; i++) {
    struct launcher* l = posted[i];
    struct anycclLaunchJob* expect = jobs[i];
    /* not taken yet: take it back and run it here */
    if (l == NULL || __atomic_compare_exchange_n(&l->slot, &expect, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      jobs[i]->fn(jobs[i], curDev);
      continue;
    }
    /* taken: the launch thread is running it (host calls only, no waits on the GPU) */
    for (unsigned spins = 0; !__atomic_load_n(&jobs[i]->done, __ATOMIC_ACQUIRE); spins++) {
      if (spins < 2000) anycclCpuRelax(); /* (a PAUSE is 10-140 cycles: tens of us at most) */
      else sched_yield();
    }
  }
}
