/* anyccl-cpu: registries of live stream and event handles.
 *
 * A handle that the user passes in is looked up here before it is used, so
 * a destroyed or made-up handle is reported (cudaErrorInvalidResourceHandle)
 * instead of dereferenced. An open-addressing hash set of pointers; lookups
 * share a read lock, and the reference is taken under it, so an object
 * cannot be freed between being found and being used. */
#include <stdlib.h>
#include "cpurt.h"

#define TOMBSTONE ((uintptr_t)1)

static size_t slotOf(uintptr_t key, size_t cap) {
  uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ull;   /* Fibonacci hashing */
  return (size_t)(h >> 17) & (cap - 1);
}

/* Index of key, or of the slot where it would go (first tombstone seen, else
 * the empty slot that ended the probe). */
static size_t probe(const struct cpurtHandles *t, uintptr_t key, bool *found) {
  size_t i = slotOf(key, t->cap), insertAt = (size_t)-1;
  for (;; i = (i + 1) & (t->cap - 1)) {
    uintptr_t v = t->slots[i];
    if (v == key) {
      *found = true;
      return i;
    }
    if (v == TOMBSTONE && insertAt == (size_t)-1) insertAt = i;
    if (v == 0) {
      *found = false;
      return insertAt != (size_t)-1 ? insertAt : i;
    }
  }
}

static bool grow(struct cpurtHandles *t) {
  size_t cap = t->cap ? t->cap : 64;
  while (t->live * 2 + 2 > cap) cap *= 2;   /* keep the load under a half */
  uintptr_t *old = t->slots;
  size_t oldCap = t->cap;
  t->slots = calloc(cap, sizeof(uintptr_t));
  if (t->slots == NULL) {
    t->slots = old;
    return false;
  }
  t->cap = cap;
  t->used = t->live;
  for (size_t i = 0; i < oldCap; i++) {
    if (old[i] <= TOMBSTONE) continue;
    bool found;
    t->slots[probe(t, old[i], &found)] = old[i];
  }
  free(old);
  return true;
}

cudaError_t cpurtHandlesAdd(struct cpurtHandles *t, struct cpurtObj *o) {
  cudaError_t err = cudaSuccess;
  pthread_rwlock_wrlock(&t->lock);
  if ((t->used + 1) * 4 > t->cap * 3 && !grow(t)) {
    err = cudaErrorMemoryAllocation;
  } else {
    bool found;
    size_t i = probe(t, (uintptr_t)o, &found);
    if (!found) {
      if (t->slots[i] == 0) t->used++;
      t->slots[i] = (uintptr_t)o;
      t->live++;
    }
  }
  pthread_rwlock_unlock(&t->lock);
  return err;
}

struct cpurtObj *cpurtHandlesAcquire(struct cpurtHandles *t, const void *h) {
  struct cpurtObj *o = NULL;
  if ((uintptr_t)h <= TOMBSTONE) return NULL;
  pthread_rwlock_rdlock(&t->lock);
  if (t->cap != 0) {
    bool found;
    size_t i = probe(t, (uintptr_t)h, &found);
    if (found) {
      o = (struct cpurtObj *)t->slots[i];
      atomic_fetch_add(&o->refs, 1);
    }
  }
  pthread_rwlock_unlock(&t->lock);
  return o;
}

struct cpurtObj *cpurtHandlesRemove(struct cpurtHandles *t, const void *h) {
  struct cpurtObj *o = NULL;
  if ((uintptr_t)h <= TOMBSTONE) return NULL;
  pthread_rwlock_wrlock(&t->lock);
  if (t->cap != 0) {
    bool found;
    size_t i = probe(t, (uintptr_t)h, &found);
    if (found) {
      o = (struct cpurtObj *)t->slots[i];
      t->slots[i] = TOMBSTONE;
      t->live--;
    }
  }
  pthread_rwlock_unlock(&t->lock);
  return o;
}

/* Only for the fork handler, which holds the write lock already. */
void cpurtHandlesForEach(struct cpurtHandles *t, void (*fn)(struct cpurtObj *)) {
  for (size_t i = 0; i < t->cap; i++)
    if (t->slots[i] > TOMBSTONE) fn((struct cpurtObj *)t->slots[i]);
}

/* Held across fork() so that the child's copy is consistent. The child
 * reinitialises it: glibc knows a write lock's owner by thread id, and the
 * child's thread has a new one. */
void cpurtHandlesForkLock(struct cpurtHandles *t) { pthread_rwlock_wrlock(&t->lock); }
void cpurtHandlesForkUnlock(struct cpurtHandles *t, bool child) {
  if (child) pthread_rwlock_init(&t->lock, NULL);
  else pthread_rwlock_unlock(&t->lock);
}
