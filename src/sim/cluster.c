/* Clusters: a root world and the worlds split or shrunk from it share one
 * fabric and one virtual clock (docs/simulation.md, "Communicators of one
 * cluster"). While a cluster has more than one world, a collective that
 * every rank launched is queued instead of modelled; a stream that needs a
 * queued collective's end (anyccl-cpu calls simNeed before it waits)
 * models every queued collective of its cluster: one world's alone, as ever
 * (simModelCollective), several worlds' together (joint.c), so that
 * collectives launched before any of their times was needed overlap and
 * share links. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "rt.h"
#include "sim.h"

struct simCluster {
  pthread_mutex_t lock;      /* the queue, the counts */
  pthread_mutex_t flushLock; /* one flush at a time */
  int refs, worlds;
  struct simJob* queue;
  int nqueue, cap;
  struct simCluster *prev, *next;
};

static pthread_mutex_t clustersLock = PTHREAD_MUTEX_INITIALIZER; /* the list */
static struct simCluster* clusters;
static atomic_int waiters; /* streams waiting for an end now */
static pthread_once_t needOnce = PTHREAD_ONCE_INIT;

/* 1 when the cluster's queue holds the launch whose end is `end` (a handle of simOpDefer). */
static int queueHolds(struct simCluster* c, void* end) {
  int found = 0;
  pthread_mutex_lock(&c->lock);
  for (int j = 0; j < c->nqueue && !found; j++)
    for (int r = 0; r < c->queue[j].w->n && !found; r++) found = c->queue[j].s->ends[r] == end;
  pthread_mutex_unlock(&c->lock);
  return found;
}

/* anyccl-cpu: 1, a stream starts waiting for `end`; 2, it still waits; 0,
 * it is done waiting. The cluster whose queue holds that end is modelled. */
static void simNeed(int what, void* end) {
  if (what == 1) atomic_fetch_add(&waiters, 1);
  if (what == 0) {
    atomic_fetch_sub(&waiters, 1);
    return;
  }
  pthread_mutex_lock(&clustersLock);
  struct simCluster* c = clusters;
  while (c && !queueHolds(c, end)) c = c->next;
  if (c) simClusterRef(c); /* flushed after the list's lock is let go: it is not held with a world's */
  pthread_mutex_unlock(&clustersLock);
  if (c == NULL) return;
  simClusterFlush(c);
  simClusterUnref(c);
}

static void needInit(void) {
  if (anycclRt.simSetNeed) anycclRt.simSetNeed(simNeed);
}

struct simCluster* simClusterNew(void) {
  pthread_once(&needOnce, needInit);
  struct simCluster* c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->flushLock, NULL);
  c->refs = 1;
  pthread_mutex_lock(&clustersLock);
  c->next = clusters;
  if (clusters) clusters->prev = c;
  clusters = c;
  pthread_mutex_unlock(&clustersLock);
  return c;
}

void simClusterRef(struct simCluster* c) {
  pthread_mutex_lock(&c->lock);
  c->refs++;
  pthread_mutex_unlock(&c->lock);
}

void simClusterUnref(struct simCluster* c) {
  if (c == NULL) return;
  pthread_mutex_lock(&c->lock);
  int last = --c->refs == 0;
  pthread_mutex_unlock(&c->lock);
  if (!last) return;
  pthread_mutex_lock(&clustersLock);
  if (c->prev) c->prev->next = c->next;
  else clusters = c->next;
  if (c->next) c->next->prev = c->prev;
  pthread_mutex_unlock(&clustersLock);
  pthread_mutex_destroy(&c->lock);
  pthread_mutex_destroy(&c->flushLock);
  free(c->queue);
  free(c);
}

void simClusterWorlds(struct simCluster* c, int delta) {
  if (c == NULL) return;
  pthread_mutex_lock(&c->lock);
  c->worlds += delta;
  pthread_mutex_unlock(&c->lock);
}

int simClusterDefers(const struct anycclSimWorld* w) {
  struct simCluster* c = w->cluster;
  if (c == NULL || !anycclRt.simSetNeed || w->fabric.calib.model != SIM_MODEL_LOCKSTEP) return 0;
  pthread_mutex_lock(&c->lock);
  int shared = c->worlds > 1;
  pthread_mutex_unlock(&c->lock);
  return shared;
}

void simClusterQueue(struct anycclSimWorld* w, struct simSlot* s) {
  struct simCluster* c = w->cluster;
  pthread_mutex_lock(&c->lock);
  int ok = 1;
  if (c->nqueue == c->cap) {
    int cap = c->cap ? 2 * c->cap : 16;
    struct simJob* q = realloc(c->queue, sizeof(*q) * cap);
    if (q) c->queue = q, c->cap = cap;
    else ok = 0;
  }
  if (ok) c->queue[c->nqueue++] = (struct simJob){w, s, 0};
  pthread_mutex_unlock(&c->lock);
  if (!ok) { /* no room in the queue: alone, now */
    double e = 0;
    simSlotFinish(w, s, simModelCollective(w, s->plans, s->start, &e, s->endAt), e);
    return;
  }
  /* a stream already waits (a thread per rank): its end may be this one */
  if (atomic_load(&waiters) > 0) simClusterFlush(c);
}

void simClusterFlush(struct simCluster* c) {
  if (c == NULL) return;
  pthread_mutex_lock(&c->flushLock);
  pthread_mutex_lock(&c->lock);
  struct simJob* jobs = c->queue;
  int n = c->nqueue;
  c->queue = NULL, c->nqueue = c->cap = 0;
  pthread_mutex_unlock(&c->lock);
  int together = 0;
  for (int j = 1; j < n; j++)
    if (jobs[j].w != jobs[0].w) together = 1;
  for (int j = 1; together && j < n; j++)
    if (jobs[j].w->fabric.nLinks != jobs[0].w->fabric.nLinks) together = 0; /* not one fabric: cannot happen */
  ncclResult_t res = together ? simJointRun(jobs, n) : ncclSuccess;
  for (int j = 0; j < n; j++) {
    struct simJob* q = &jobs[j];
    ncclResult_t r = res;
    if (!together) {
      r = simModelCollective(q->w, q->s->plans, q->s->start, &q->end, q->s->endAt);
    } else {
      for (int k = 0; k < q->w->n; k++) q->s->endAt[k] = q->end;
    }
    simSlotFinish(q->w, q->s, r, q->end);
  }
  free(jobs);
  pthread_mutex_unlock(&c->flushLock);
}
