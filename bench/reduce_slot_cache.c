/* reduce_slot_cache: does it matter where the received FIFO slot sits in the
 * cache hierarchy when the cpu executor reduces it? The question behind
 * "pipeline the reduction into cache-sized pieces right after each receive"
 * (docs/p2p.md, Numbers). Build against the library's own reduction:
 *
 *   cc -O2 -std=gnu11 -Isrc/include -Iinclude -Ibuild/include bench/reduce_slot_cache.c \
 *      build/libanyccl_internal.a -lpthread -lm -ldl -o /tmp/reduce_slot_cache
 *   /tmp/reduce_slot_cache [piece_KiB (default 64)]
 *
 * The shape of a 2-rank all-reduce step across hosts: a FIFO of 8 slots of
 * 512 KB receives the peer's data (memcpy from a 64 MB source stands in for
 * the kernel's copy out of the socket), and the step reduces slot + input
 * (64 MB) into the output (64 MB), float sum. ns per reduced byte, best of
 * 15 repetitions (a ceiling, not a typical value), for:
 *
 *   reduce, slot filled on this core      the slot just written by this thread (hot)
 *   reduce, slot filled on the other core  written by a thread on CPU 0, reduced on CPU 1
 *   reduce, slot not read                  input + input: what a free slot read would leave
 *   copy, then reduce (whole slot)         one thread: fill 512 KB, reduce 512 KB
 *   copy, then reduce (pieces)             one thread: fill piece_KiB, reduce it, next piece
 *
 * The last two compare the receive-then-reduce order with the pipelined one
 * (the piece still in L1/L2 when reduced). Needs 2 CPUs for the cross-core
 * row (else it runs on one). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "reduce.h"

#define NSLOTS 8
static const size_t total = (size_t)64 << 20, slot = (size_t)512 << 10;
static char *src, *in, *out, *fifo;
static const anycclRedOp op = {ncclFloat32, anycclDevSum, 0, 0};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(pthread_t t, int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(t, sizeof(s), &s);
}

static size_t fillFrom; /* slots NSLOTS from this offset of src */
static void fillSlots(void) {
  for (int i = 0; i < NSLOTS; i++) memcpy(fifo + i * slot, src + fillFrom + i * slot, slot);
}
static void* fillThread(void* arg) {
  (void)arg;
  fillSlots();
  return NULL;
}

/* mode 0: fill here, 1: fill on the other core, 2: fill here, reduce input + input */
static double reduceAfterFill(int mode, int ncpu) {
  double t = 0;
  for (size_t o = 0; o < total; o += NSLOTS * slot) {
    fillFrom = o;
    if (mode == 1 && ncpu > 1) {
      pthread_t f;
      pthread_create(&f, NULL, fillThread, NULL);
      pin(f, 0);
      pthread_join(f, NULL);
    } else {
      fillSlots();
    }
    double t0 = now();
    for (int i = 0; i < NSLOTS; i++) {
      const char* a = mode == 2 ? in + o + i * slot : fifo + i * slot;
      anycclReduce(&op, slot / 4, a, in + o + i * slot, out + o + i * slot, NULL, 0);
    }
    t += now() - t0;
  }
  return t;
}

static double copyThenReduce(size_t piece) {
  double t0 = now();
  for (size_t o = 0, k = 0; o < total; o += slot, k++) {
    char* s = fifo + (k % NSLOTS) * slot;
    for (size_t p = 0; p < slot; p += piece) {
      memcpy(s + p, src + o + p, piece);
      anycclReduce(&op, piece / 4, s + p, in + o + p, out + o + p, NULL, 0);
    }
  }
  return now() - t0;
}

int main(int argc, char** argv) {
  size_t piece = (size_t)(argc > 1 ? atol(argv[1]) : 64) << 10;
  if (piece < 4096 || piece > slot || slot % piece != 0) {
    fprintf(stderr, "reduce_slot_cache: piece_KiB must divide 512 and be at least 4\n");
    return 2;
  }
  int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
  src = aligned_alloc(4096, total);
  in = aligned_alloc(4096, total);
  out = aligned_alloc(4096, total);
  fifo = aligned_alloc(4096, NSLOTS * slot);
  if (!src || !in || !out || !fifo) return 1;
  memset(src, 1, total), memset(in, 2, total), memset(out, 3, total), memset(fifo, 4, NSLOTS * slot);
  if (ncpu > 1) pin(pthread_self(), 1);
  double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
  for (int rep = 0; rep < 15; rep++) {
    double t[5] = {reduceAfterFill(0, ncpu), reduceAfterFill(1, ncpu), reduceAfterFill(2, ncpu), copyThenReduce(slot),
                   copyThenReduce(piece)};
    for (int i = 0; i < 5; i++)
      if (t[i] < best[i]) best[i] = t[i];
  }
  const char* name[5] = {"reduce, slot filled on this core", "reduce, slot filled on the other core",
                         "reduce, slot not read", "copy, then reduce (whole 512 KB slot)", "copy, then reduce (pieces)"};
  printf("# ns per reduced byte, best of 15; 64 MB input and output, 8 slots of 512 KB, pieces of %zu KB\n",
         piece >> 10);
  for (int i = 0; i < 5; i++) printf("%-40s %6.3f\n", name[i], best[i] * 1e9 / (double)total);
  return 0;
}
