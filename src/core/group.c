/* Groups and enqueue. Calls inside ncclGroupStart/End collect tasks per
 * communicator; the outermost ncclGroupEnd (or the call itself, outside a
 * group) turns each communicator's tasks into one plan and launches it on
 * the stream: collectives in call order, then all sends/receives at once.
 * Inits inside a group run concurrently at the end of the group. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include "checks.h"
#include "param.h"
#include "comm.h"
#include "exec.h"
#include "rt.h"
#include "launchers.h"

struct groupInit {
  struct ncclComm* comm;
  void* (*fn)(void*);
  void* arg;
  pthread_t thread;
  struct groupInit* next;
};

static __thread int groupDepth;
static __thread ncclResult_t groupError;
static __thread struct ncclComm* groupComms;
static __thread struct groupInit* groupInits;

/* Collective host work deferred to the end of the group (window
 * registration, device communicators): run there on one thread per
 * communicator, each communicator's jobs in call order, since the ranks of
 * one process meet in them. */
struct groupJob {
  struct ncclComm* comm;
  ncclResult_t (*fn)(void*);
  void* arg;
  struct groupJob* next;
};
static __thread struct groupJob *groupJobs, *groupJobsTail;

int anycclGroupDepth(void) { return groupDepth; }
void anycclGroupSetError(ncclResult_t err) {
  if (groupDepth > 0 && groupError == ncclSuccess) groupError = err;
}

ncclResult_t anycclGroupStartInternal(void) {
  groupDepth++;
  return ncclSuccess;
}

ncclResult_t anycclGroupAddInit(struct ncclComm* comm, void* (*fn)(void*), void* arg) {
  struct groupInit* g;
  ANYCCL_CALLOC(g, 1);
  g->comm = comm;
  g->fn = fn;
  g->arg = arg;
  g->next = groupInits;
  groupInits = g;
  return ncclSuccess;
}

ncclResult_t anycclGroupAddJob(struct ncclComm* comm, ncclResult_t (*fn)(void*), void* arg) {
  if (groupDepth == 0) return fn(arg);
  struct groupJob* j;
  ANYCCL_CALLOC(j, 1);
  *j = (struct groupJob){comm, fn, arg, NULL};
  if (groupJobsTail) groupJobsTail->next = j;
  else groupJobs = j;
  groupJobsTail = j;
  return ncclSuccess;
}

struct commJobs {
  struct groupJob* jobs; /* all of the group's; this one runs those of comm */
  struct ncclComm* comm;
  ncclResult_t res;
  pthread_t thread;
};
static void* runCommJobs(void* arg) {
  struct commJobs* c = arg;
  for (struct groupJob* j = c->jobs; j; j = j->next) {
    if (j->comm != c->comm) continue;
    ncclResult_t r = j->fn(j->arg);
    if (r != ncclSuccess && c->res == ncclSuccess) c->res = r;
  }
  return NULL;
}
static ncclResult_t runGroupJobs(void) {
  struct groupJob* jobs = groupJobs;
  groupJobs = groupJobsTail = NULL;
  if (jobs == NULL) return ncclSuccess;
  int n = 0;
  for (struct groupJob* j = jobs; j; j = j->next) n++;
  struct commJobs* cs = calloc(n, sizeof(*cs));
  ncclResult_t res = ncclSuccess;
  int nc = 0;
  if (cs == NULL) {
    WARN("ncclGroupEnd: out of memory for %d deferred jobs", n);
    res = ncclSystemError;
  } else {
    for (struct groupJob* j = jobs; j; j = j->next) {
      int k = 0;
      while (k < nc && cs[k].comm != j->comm) k++;
      if (k == nc) cs[nc++] = (struct commJobs){jobs, j->comm, ncclSuccess, 0};
    }
    /* one thread per communicator (a single one runs here) */
    for (int k = 1; k < nc; k++)
      if (pthread_create(&cs[k].thread, NULL, runCommJobs, &cs[k]) != 0) cs[k].thread = 0;
    if (nc > 0) runCommJobs(&cs[0]);
    for (int k = 1; k < nc; k++) {
      if (cs[k].thread) pthread_join(cs[k].thread, NULL);
      else runCommJobs(&cs[k]);
    }
    for (int k = 0; k < nc && res == ncclSuccess; k++) res = cs[k].res;
  }
  free(cs);
  while (jobs) {
    struct groupJob* next = jobs->next;
    free(jobs);
    jobs = next;
  }
  return res;
}

ncclResult_t anycclEnqueue(struct ncclComm* comm, const struct anycclTask* task) {
  struct anycclTask* t = malloc(sizeof(*t));
  if (t == NULL) return ncclSystemError;
  *t = *task;
  t->next = NULL;
  if (comm->taskTail) comm->taskTail->next = t;
  else comm->taskHead = t;
  comm->taskTail = t;
  if (!comm->inGroupList) {
    comm->inGroupList = 1;
    comm->groupNext = groupComms;
    groupComms = comm;
  }
  return ncclSuccess;
}

static void freeTasks(struct anycclTask* t) {
  while (t) {
    struct anycclTask* n = t->next;
    free(t);
    t = n;
  }
}

void anycclPlanFree(struct anycclPlan* plan) {
  if (plan == NULL) return;
  for (int i = 0; i < plan->nphases; i++) {
    free(plan->phases[i].lanes);
    free(plan->phases[i].steps);
    free(plan->phases[i].p2pOps);
  }
  free(plan->phases);
  free(plan);
}

/* Does send t read memory that one of the n earlier receives of the group
 * writes? (Only that order is a dependency the program states; a receive
 * over what an earlier send reads, as in-place send/recv, is left concurrent
 * as NCCL leaves it: cutting there would make every rank send before any
 * receives, which deadlocks once a message outgrows the FIFOs.) Sends to
 * self are paired with receives from self within one phase, never cut. */
static int p2pDepends(const struct ncclComm* comm, struct anycclTask* const* earlier, int n, const struct anycclTask* t) {
  if (t->func != FUNC_SEND || t->root == comm->rank || t->count == 0) return 0;
  const char* tb = (const char*)t->sendbuff;
  size_t tl = t->count * anycclTypeSize(t->type);
  for (int i = 0; i < n; i++) {
    const struct anycclTask* u = earlier[i];
    if (u->func != FUNC_RECV || u->root == comm->rank || u->count == 0) continue;
    const char* ub = (const char*)u->recvbuff;
    size_t ul = u->count * anycclTypeSize(u->type);
    if (tb < ub + ul && ub < tb + tl) return 1;
  }
  return 0;
}

/* ---- host-time profile ---------------------------------------------------------- */
static int profOn; /* ANYCCL_PROFILE_HOST, read once (profInitOnce) */
static pthread_once_t profOnce = PTHREAD_ONCE_INIT;
static uint64_t profNs[PROF_COUNT], profCalls[PROF_COUNT], profMax[PROF_COUNT];
static const char* profNames[PROF_COUNT] = {"submit (check+enqueue)", "group end (all)", "build plan", "set device",
                                            "encode phases", "kernel launches", "stream order", "free plan+tasks",
                                            "ncclCommGetAsyncError", "port: take triggers", "port: network",
                                            "port: copy tracking", "port: idle sleep", "port: stage in (D2H)",
                                            "port: queued to sent", "port: stage out (H2D)"};

uint64_t anycclProfNow(void) {
  if (!__atomic_load_n(&profOn, __ATOMIC_RELAXED)) return 0;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
void anycclProfAdd(int section, uint64_t since) {
  if (!__atomic_load_n(&profOn, __ATOMIC_RELAXED)) return;
  const uint64_t ns = anycclProfNow() - since;
  __atomic_fetch_add(&profNs[section], ns, __ATOMIC_RELAXED);
  __atomic_fetch_add(&profCalls[section], 1, __ATOMIC_RELAXED);
  uint64_t m = __atomic_load_n(&profMax[section], __ATOMIC_RELAXED);
  while (ns > m && !__atomic_compare_exchange_n(&profMax[section], &m, ns, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}
static void profReport(void) {
  fprintf(stderr, "anyccl host profile (ANYCCL_PROFILE_HOST), pid %d: section, calls, mean us, max us\n", (int)getpid());
  for (int i = 0; i < PROF_COUNT; i++) {
    uint64_t calls = __atomic_load_n(&profCalls[i], __ATOMIC_RELAXED);
    if (calls)
      fprintf(stderr, "  %-24s %10llu %8.3f %10.1f\n", profNames[i], (unsigned long long)calls,
              __atomic_load_n(&profNs[i], __ATOMIC_RELAXED) / 1e3 / calls,
              __atomic_load_n(&profMax[i], __ATOMIC_RELAXED) / 1e3);
  }
}
static void profInitOnce(void) {
  int on = anycclParamInt(PARAM_PROFILE_HOST) > 0;
  if (on) atexit(profReport);
  __atomic_store_n(&profOn, on, __ATOMIC_RELEASE);
}
/* Called by every submit (the first one reads the parameter). */
void anycclProfInit(void) { pthread_once(&profOnce, profInitOnce); }

ncclResult_t anycclBuildPlan(struct ncclComm* comm, struct anycclTask* tasks, struct anycclPlan** out) {
  int ncoll = 0, np2p = 0;
  for (struct anycclTask* t = tasks; t; t = t->next) {
    if (t->func == FUNC_SEND || t->func == FUNC_RECV) np2p++;
    else if (t->count > 0) ncoll++;
  }
  *out = NULL;
  if (ncoll + np2p == 0) return ncclSuccess;
  ncclResult_t res = ncclSuccess;
  struct anycclTask** p2p = NULL;
  struct anycclPlan* plan = calloc(1, sizeof(*plan));
  if (plan == NULL) return ncclSystemError;
  plan->comm = comm;
  plan->phases = calloc(ncoll + (np2p ? np2p : 1), sizeof(*plan->phases));
  if (plan->phases == NULL) {
    res = ncclSystemError;
    goto fail;
  }
  for (struct anycclTask* t = tasks; t; t = t->next) {
    if (t->func == FUNC_SEND || t->func == FUNC_RECV || t->count == 0) continue;
    NCCLCHECKGOTO(anycclAlgoPhase(comm, t, &plan->phases[plan->nphases++]), res, fail);
  }
  if (np2p) {
    p2p = malloc(np2p * sizeof(*p2p));
    if (p2p == NULL) {
      res = ncclSystemError;
      goto fail;
    }
    int k = 0;
    for (struct anycclTask* t = tasks; t; t = t->next)
      if (t->func == FUNC_SEND || t->func == FUNC_RECV) p2p[k++] = t;
    /* One phase for all of them, unless a send reads memory that an earlier
     * receive of the group writes: then the group is cut there, in call
     * order, so that the data flows as the program says (nested groups, e.g.
     * nccl-tests' hypercube under -g). */
    for (int start = 0, i = 1; i <= np2p; i++) {
      if (i < np2p && !p2pDepends(comm, p2p + start, i - start, p2p[i])) continue;
      NCCLCHECKGOTO(anycclP2pPhase(comm, p2p + start, i - start, &plan->phases[plan->nphases++]), res, fail);
      start = i;
    }
    free(p2p);
  }
  *out = plan;
  return ncclSuccess;
fail:
  free(p2p);
  anycclPlanFree(plan);
  return res;
}

/* Make `waiter` wait for the work queued so far on `waitee`. */
static ncclResult_t streamJoin(cudaStream_t waiter, cudaStream_t waitee) {
  cudaEvent_t ev;
  CUDACHECK(anycclRt.eventCreateWithFlags(&ev, 0x2 /* cudaEventDisableTiming */));
  int e = anycclRt.eventRecord(ev, waitee);
  if (e == 0) e = anycclRt.streamWaitEvent(waiter, ev, 0);
  anycclRt.eventDestroy(ev);
  if (e != 0) {
    WARN("Joining streams %p and %p failed: %s (%d)", (void*)waiter, (void*)waitee, anycclRt.getErrorString(e), e);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* Launch one communicator's tasks as one plan on the first task's stream;
 * the group's other streams wait for it, and it waits for their earlier
 * work, as NCCL does. *curDev is the device current now; the caller restores
 * its own once, after every communicator of the group. */
static ncclResult_t launchComm(struct ncclComm* comm, int* curDev) {
  struct anycclTask* tasks = comm->taskHead;
  comm->taskHead = comm->taskTail = NULL;
  comm->inGroupList = 0;
  if (tasks == NULL) return ncclSuccess;
  struct anycclPlan* plan = NULL;
  uint64_t t0 = anycclProfNow();
  ncclResult_t res = anycclBuildPlan(comm, tasks, &plan);
  anycclProfAdd(PROF_BUILD, t0);
  cudaStream_t stream = tasks->stream;
  /* The NULL stream means the comm's device's default stream. */
  if (res == ncclSuccess && plan != NULL && *curDev != comm->cudaDev) {
    t0 = anycclProfNow();
    anycclRt.setDevice(comm->cudaDev);
    anycclProfAdd(PROF_SETDEV, t0);
    *curDev = comm->cudaDev;
  }
  if (res == ncclSuccess && plan != NULL) {
    for (struct anycclTask* t = tasks->next; t && res == ncclSuccess; t = t->next)
      if (t->stream != stream) res = streamJoin(stream, t->stream);
    if (res == ncclSuccess) res = anycclLaunchPlan(comm, plan, stream);
    else anycclPlanFree(plan);
    /* every other stream, once each, waits for the plan */
    for (struct anycclTask* t = tasks->next; t && res == ncclSuccess; t = t->next) {
      int seen = t->stream == stream;
      for (struct anycclTask* u = tasks->next; u != t && !seen; u = u->next) seen = u->stream == t->stream;
      if (!seen) res = streamJoin(t->stream, stream);
    }
  }
  t0 = anycclProfNow();
  freeTasks(tasks);
  anycclProfAdd(PROF_FREE, t0);
  return res;
}

/* Called with comm->cudaDev current (launchComm). */
ncclResult_t anycclLaunchPlan(struct ncclComm* comm, struct anycclPlan* plan, cudaStream_t stream) {
  return comm->exec->launch(comm, plan, stream);
}

/* ---- a group over several devices: each device's launches on its own thread ---- */
#define SPREAD_MAX_DEVS 16
struct devJob {
  struct anycclLaunchJob job;
  struct ncclComm *head, *tail;
  ncclResult_t res;
  char err[256];
};

static void runDevJob(struct anycclLaunchJob* j, int* curDev) {
  struct devJob* d = (struct devJob*)j;
  for (struct ncclComm* c = d->head; c;) {
    struct ncclComm* next = c->launchNext;
    ncclResult_t r = launchComm(c, curDev);
    if (r != ncclSuccess && d->res == ncclSuccess) {
      d->res = r;
      snprintf(d->err, sizeof(d->err), "%s", anycclLastError());
    }
    c = next;
  }
}

/* Whether a comm's queued tasks launch anything (zero-count collectives
 * launch nothing; send/recv of 0 bytes still match their peers). */
static int commHasWork(const struct ncclComm* c) {
  for (const struct anycclTask* t = c->taskHead; t; t = t->next)
    if (t->func == FUNC_SEND || t->func == FUNC_RECV || t->count > 0) return 1;
  return 0;
}

/* Launch the group's comms with one job per device when they are cuda comms
 * on 2 to SPREAD_MAX_DEVS devices with work to launch; returns 0 (nothing
 * launched) otherwise. */
static int launchSpread(struct ncclComm* comms, int* cur, ncclResult_t* res) {
  if (!anycclLaunchThreadsOn() || comms == NULL || comms->groupNext == NULL) return 0;
  struct devJob jobs[SPREAD_MAX_DEVS];
  int n = 0, busyDev = -1, busyDevs = 0;
  for (struct ncclComm* c = comms; c && busyDevs < 2; c = c->groupNext) {
    if (!commHasWork(c) || c->cudaDev == busyDev) continue;
    busyDevs++;
    busyDev = c->cudaDev;
  }
  if (busyDevs < 2) return 0; /* (the caller's own loop: no thread to wake) */
  for (struct ncclComm* c = comms; c; c = c->groupNext) {
    if (!c->cuda) return 0;
    int k = 0;
    while (k < n && jobs[k].job.dev != c->cudaDev) k++;
    if (k == n) {
      if (n == SPREAD_MAX_DEVS) return 0;
      memset(&jobs[n], 0, sizeof(jobs[n]));
      jobs[n].job.dev = c->cudaDev;
      jobs[n].job.fn = runDevJob;
      n++;
    }
  }
  if (n < 2) return 0;
  for (struct ncclComm* c = comms; c;) {
    struct ncclComm* next = c->groupNext;
    int k = 0;
    while (jobs[k].job.dev != c->cudaDev) k++;
    c->launchNext = NULL;
    if (jobs[k].tail) jobs[k].tail->launchNext = c;
    else jobs[k].head = c;
    jobs[k].tail = c;
    c = next;
  }
  struct anycclLaunchJob* order[SPREAD_MAX_DEVS];
  int first = 0; /* the caller's own device first: no device switch */
  for (int k = 0; k < n; k++)
    if (jobs[k].job.dev == *cur) first = k;
  order[0] = &jobs[first].job;
  for (int k = 0, m = 1; k < n; k++)
    if (k != first) order[m++] = &jobs[k].job;
  anycclLaunchRun(order, n, cur);
  for (int k = 0; k < n; k++)
    if (jobs[k].res != ncclSuccess && *res == ncclSuccess) {
      *res = jobs[k].res;
      anycclSetLastError(jobs[k].err);
    }
  return 1;
}

static void* runInit(void* arg) {
  struct groupInit* g = arg;
  g->fn(g->arg);
  return NULL;
}

/* sim NULL: ncclGroupEnd; else ncclGroupSimulateEnd (NCCL's group.cc:
 * an inner end only closes its level; the outermost one runs the group's
 * inits and jobs, then estimates the tasks and launches none). */
static ncclResult_t groupEnd(ncclSimInfo_t* sim) {
  if (groupDepth == 0) {
    WARN("ncclGroupEnd: not in a group; every ncclGroupEnd needs an earlier ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--groupDepth > 0) return ncclSuccess;
  ncclResult_t res = groupError;
  groupError = ncclSuccess;

  /* Deferred inits: all at once, then wait (they meet at the bootstrap). */
  struct groupInit* inits = groupInits;
  groupInits = NULL;
  for (struct groupInit* g = inits; g; g = g->next)
    if (pthread_create(&g->thread, NULL, runInit, g) != 0) g->thread = 0;
  for (struct groupInit* g = inits; g; g = g->next) {
    if (g->thread) pthread_join(g->thread, NULL);
    else runInit(g);
  }
  while (inits) {
    struct groupInit* n = inits->next;
    ncclResult_t r = __atomic_load_n(&inits->comm->asyncResult, __ATOMIC_ACQUIRE);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
    free(inits);
    inits = n;
  }

  ncclResult_t jr = runGroupJobs(); /* collective: run even after an error, peers wait in them */
  if (res == ncclSuccess) res = jr;

  struct ncclComm* comms = groupComms;
  groupComms = NULL;
  uint64_t t0 = anycclProfNow();
  int saved = -1;
  if (comms) anycclRt.getDevice(&saved);
  int cur = saved;
  if (sim) {
    float us = 0;
    if (res == ncclSuccess) res = anycclSimEstimateGroup(comms, &us);
    for (struct ncclComm* c = comms; c; c = c->groupNext) { /* after an error: dropped, as a real end does */
      freeTasks(c->taskHead);
      c->taskHead = c->taskTail = NULL;
      c->inGroupList = 0;
    }
    if (res == ncclSuccess && sim->size >= offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float))
      sim->estimatedTime = us;
    return res;
  }
  int spread = res == ncclSuccess && launchSpread(comms, &cur, &res);
  for (struct ncclComm* c = spread ? NULL : comms; c;) {
    struct ncclComm* next = c->groupNext;
    if (res != ncclSuccess) {
      freeTasks(c->taskHead);
      c->taskHead = c->taskTail = NULL;
      c->inGroupList = 0;
    } else {
      ncclResult_t r = launchComm(c, &cur);
      if (r != ncclSuccess) res = r;
    }
    c = next;
  }
  if (cur != saved && saved >= 0) {
    uint64_t t1 = anycclProfNow();
    anycclRt.setDevice(saved);
    anycclProfAdd(PROF_SETDEV, t1);
  }
  if (comms) anycclProfAdd(PROF_GROUPEND, t0);
  return res;
}

ncclResult_t anycclGroupEndInternal(void) { return groupEnd(NULL); }
ncclResult_t anycclGroupSimulateEndInternal(ncclSimInfo_t* sim) { return groupEnd(sim); }
