/* The host half of GIN across hosts (src/backend/cuda_gin.c) on the cpu
 * backend: two processes on two virtual hosts (NCCL_HOSTID), a host thread
 * standing in for device code writes descriptors and triggers the way
 * include/nccl_device/gin.h does, the proxies move them.
 *   test_gin CASE     (CASE: ops, bad, reuse, order, producers, pingpong)
 * Every rank zeroes its window, then the pair meets (a bootstrap barrier, as
 * ncclDevCommCreate's) before any operation: a window is written only once
 * its owner registered and zeroed it. GIN_LATE_ZERO_US (test-only) makes the
 * receiver that slow to zero it (gin.hosts.ops_late). Waits fail after 10 s
 * without progress, not after 10 s in all: a staged put costs several
 * thread hand-offs (copy workers, socket helpers, two proxies) that take
 * milliseconds each on a loaded machine.
 * ops: rank 0 pushes a descriptor of zeros (peer 0, itself: dropped, the
 *   "bad peer" WARN every run prints), a bare signal, puts 3 regions (each
 *   with a signal add, one with a counter), a put-value with a signal, and
 *   64 small puts more than the FIFO holds, then flush: the counter is
 *   raised once per counted put, done has passed every entry. Rank 1 waits on its host signal words, checks every
 *   byte and that each signal arrived exactly once (no more after).
 * bad: descriptors with a bad peer, an unknown device communicator, a counter
 *   out of range and a window nobody registered are dropped with one WARN
 *   and the service's error; nothing is written; later operations work.
 * reuse: 1500 windows registered and deregistered in turn (more than
 *   ANYCCL_PORT_MAX_MEMORIES) each take id 0 again; with two live and the
 *   first deregistered, the next takes its id; then ops on that window.
 * order: GIN_ROUNDS (1000) rounds of a put (1 byte to 40 KB, a quarter
 *   around the 1 KB that travels inside a header message; several
 *   messages with a small ANYCCL_PORT_CHUNK or bounce buffer) with its
 *   signal, sometimes a
 *   put-value with its signal, then 0-23 bare signals (batches of headers,
 *   some ending in the next put's header); rank 1 checks each round's bytes
 *   as soon as its signal arrived (a signal that overtook its put's bytes
 *   shows as stale bytes); 16 rounds in flight, then an acknowledgement.
 * producers: 4 threads push at once while device communicators and windows
 *   come and go (caseProducers). */
#define _GNU_SOURCE
#include <sched.h>
#include "port_harness.h"
#include "bootstrap.h"
#include "comm.h"
#include "nccl_device/core.h"
#include "../../src/onesided/port.h"

static struct ctx gctx, *c = &gctx; /* the harness's EXPECT names c->rank */

/* A wait's bound: STALL_S seconds in which the watched word did not move. */
enum { STALL_S = 10 };
struct stall { uint64_t last; double since; };
static int stalled(struct stall* st, uint64_t now) {
  double t = nowSec();
  if (st->since == 0 || now != st->last) st->last = now, st->since = t;
  return t - st->since >= STALL_S;
}

/* gin.h's anycclGinPush, on the host. */
static int push(const ncclDevComm_t* dc, const struct anycclGinDesc* d) {
  uint64_t s = __atomic_fetch_add(dc->ginProxy->fifoHead, 1ULL, __ATOMIC_RELAXED);
  struct stall st = {0};
  uint64_t t;
  while (s - (t = __atomic_load_n(dc->ginProxy->tail, __ATOMIC_ACQUIRE)) >= dc->ginProxy->fifoSize) {
    EXPECT(__atomic_load_n(dc->ginProxy->state, __ATOMIC_ACQUIRE) == 0, "the proxy failed");
    EXPECT(!stalled(&st, t), "no room in the FIFO: the proxy took nothing for %d s (tail %llu)", STALL_S,
           (unsigned long long)t);
    sched_yield(); /* the proxy and the stream workers need the cores */
  }
  uint32_t slot = (uint32_t)(s & (dc->ginProxy->fifoSize - 1));
  memcpy(&dc->ginProxy->descs[slot], d, sizeof(*d));
  __atomic_store_n(&dc->ginProxy->fifoTrig[2 * slot], s, __ATOMIC_RELAXED);
  __atomic_store_n(&dc->ginProxy->fifoTrig[2 * slot + 1], ANYCCL_GIN_TRIGGER, __ATOMIC_SEQ_CST);
  /* a GPU cannot wake the proxy (it polls); a host thread can, as anycclPortPush does */
  struct anycclPortShared* sh = (struct anycclPortShared*)dc->ginProxy->tail; /* tail is its first word */
  if (__atomic_load_n(&sh->sleeping, __ATOMIC_SEQ_CST)) anycclPortHostKick(sh);
  return 0;
}

static int flush(const ncclDevComm_t* dc) {
  uint64_t want = __atomic_load_n(dc->ginProxy->fifoHead, __ATOMIC_ACQUIRE), d;
  struct stall st = {0};
  while ((int64_t)((d = __atomic_load_n(dc->ginProxy->done, __ATOMIC_ACQUIRE)) - want) < 0) {
    EXPECT(!stalled(&st, d), "flush: done stayed at %llu for %d s, want %llu", (unsigned long long)d, STALL_S,
           (unsigned long long)want);
    sched_yield();
  }
  return 0;
}

/* Bounded (10 s); on a timeout it tells a word still moving (a slow run) from a stuck one. */
static int waitWord(const uint64_t* w, uint64_t least, const char* what) {
  struct stall st = {0};
  uint64_t v;
  while ((v = __atomic_load_n(w, __ATOMIC_ACQUIRE)) < least) {
    EXPECT(!stalled(&st, v), "%s stayed at %llu for %d s, want %llu", what, (unsigned long long)v, STALL_S,
           (unsigned long long)least);
    sched_yield();
  }
  return 0;
}

static struct anycclGinDesc desc(uint32_t op, int peer, int mem, uint64_t dstOff, uint64_t src, uint64_t bytes,
                                 int signal, uint64_t add, int counter) {
  struct anycclGinDesc d = {op, peer, mem, 0, dstOff, src, bytes, add, signal, counter, 0};
  return d;
}

static uint8_t pat(size_t i) { return (uint8_t)(i * 131 + 7); }

/* want(i) for every byte of win[from, to); on a mismatch, whether the right
 * byte shows up 100 ms later (it landed after the signal: an ordering bug)
 * or not (it was never sent, or erased after it landed). */
static int checkBytes(const char* win, size_t from, size_t to, uint8_t (*want)(size_t, uint64_t), uint64_t arg,
                      const char* what) {
  for (size_t i = from; i < to; i++) {
    uint8_t got = (uint8_t)__atomic_load_n(&win[i], __ATOMIC_RELAXED);
    if (got == want(i, arg)) continue;
    usleep(100000);
    uint8_t later = (uint8_t)__atomic_load_n(&win[i], __ATOMIC_RELAXED);
    const int bytesRight = 0;
    EXPECT(bytesRight, "%s, byte %zu: %u, want %u (100 ms later: %u: %s)", what, i, got, want(i, arg), later,
           later == want(i, arg) ? "it landed after its signal" : "never landed, or erased");
  }
  return 0;
}
/* the bytes of round k (0: the ops case's), or zero */
static uint8_t patArg(size_t i, uint64_t k) { return (uint8_t)(pat(i) ^ (k * 37)); }
static uint8_t zeroArg(size_t i, uint64_t k) { return (void)i, (void)k, 0; }


enum { WIN = 1 << 20 };

/* Small puts that more than fill the FIFO (ANYCCL_PORT_FIFO_SIZE), no more:
 * the same count on both ranks (the same setting). */
static int smallPuts(const ncclDevComm_t* dc) {
  uint32_t n = dc->ginProxy->fifoSize + 64;
  return n < WIN / 2 / 16 ? (int)n : WIN / 2 / 16;
}

static int caseOps(ncclComm_t comm, const ncclDevComm_t* dc, char* win, int mem) {
  const size_t a = 40000, b = 300000, e = 3; /* 3 regions: [0,a) [a,a+b) [a+b,a+b+e) */
  const int SMALL = smallPuts(dc);
  if (c->rank == 0) {
    for (size_t i = 0; i < WIN; i++) win[i] = (char)pat(i);
    if (push(dc, &(struct anycclGinDesc){0}) != 0) return 1; /* op 0: dropped (a bad descriptor first) */
    if (push(dc, &(struct anycclGinDesc){ANYCCL_GIN_SIGNAL, 1, -1, 0, 0, 0, 0, 3, 3, -1, 0}) != 0) return 1;
    struct anycclGinDesc d[3] = {
      desc(ANYCCL_GIN_PUT, 1, mem, 0, (uint64_t)(uintptr_t)win, a, 0, 1, 0),
      desc(ANYCCL_GIN_PUT, 1, mem, a, (uint64_t)(uintptr_t)(win + a), b, 0, 1, -1),
      desc(ANYCCL_GIN_PUT, 1, mem, a + b, (uint64_t)(uintptr_t)(win + a + b), e, 1, 7, 0),
    };
    for (int k = 0; k < 3; k++)
      if (push(dc, &d[k]) != 0) return 1;
    uint64_t value = 0x1122334455667788ull;
    struct anycclGinDesc v = desc(ANYCCL_GIN_PUT_VALUE, 1, mem, WIN - 8, value, 8, 2, 5, -1);
    if (push(dc, &v) != 0) return 1;
    /* many small counted puts from the second half: more than the FIFO holds */
    for (int k = 0; k < SMALL; k++) {
      struct anycclGinDesc s = desc(ANYCCL_GIN_PUT, 1, mem, WIN / 2 + 16 * k, (uint64_t)(uintptr_t)(win + WIN / 2 + 16 * k),
                                    16, 1, 1, 1);
      if (push(dc, &s) != 0) return 1;
    }
    if (flush(dc) != 0) return 1;
    EXPECT(dc->ginProxy->hostCounters[0] == 2, "counter 0: %llu, want 2 (two counted puts)", (unsigned long long)dc->ginProxy->hostCounters[0]);
    EXPECT(dc->ginProxy->hostCounters[1] == SMALL, "counter 1: %llu, want %d", (unsigned long long)dc->ginProxy->hostCounters[1], SMALL);
    EXPECT(anycclProxyServiceGetError(anycclGinService(comm), 1) == ncclInvalidArgument,
           "the descriptor of op 0 was not reported");
    memset(win, 0xEE, WIN); /* flushed: the sources may change */
    return 0;
  }
  if (waitWord(&dc->ginProxy->hostSignals[0], 2, "signal 0") || waitWord(&dc->ginProxy->hostSignals[1], 7 + SMALL, "signal 1") ||
      waitWord(&dc->ginProxy->hostSignals[2], 5, "signal 2") || waitWord(&dc->ginProxy->hostSignals[3], 3, "signal 3"))
    return 1;
  if (checkBytes(win, 0, a + b + e, patArg, 0, "the 3 puts") || checkBytes(win, a + b + e, WIN / 2, zeroArg, 0, "unwritten") ||
      checkBytes(win, WIN / 2, WIN / 2 + 16 * SMALL, patArg, 0, "the small puts"))
    return 1;
  uint64_t v;
  memcpy(&v, win + WIN - 8, 8);
  EXPECT(v == 0x1122334455667788ull, "put-value %llx", (unsigned long long)v);
  usleep(100000); /* a signal applied twice would show by now */
  EXPECT(dc->ginProxy->hostSignals[0] == 2 && dc->ginProxy->hostSignals[1] == 7 + SMALL && dc->ginProxy->hostSignals[2] == 5 &&
             dc->ginProxy->hostSignals[3] == 3,
         "signals %llu %llu %llu %llu, want 2 %d 5 3", (unsigned long long)dc->ginProxy->hostSignals[0],
         (unsigned long long)dc->ginProxy->hostSignals[1], (unsigned long long)dc->ginProxy->hostSignals[2],
         (unsigned long long)dc->ginProxy->hostSignals[3], 7 + SMALL);
  return 0;
}

static int caseBad(ncclComm_t comm, const ncclDevComm_t* dc, char* win, int mem) {
  (void)comm;
  if (c->rank == 0) {
    uint64_t src = (uint64_t)(uintptr_t)win;
    struct anycclGinDesc bad[] = {
      desc(ANYCCL_GIN_PUT, 7, mem, 0, src, 64, 0, 1, -1),        /* peer out of range */
      desc(ANYCCL_GIN_PUT, 0, mem, 0, src, 64, 0, 1, -1),        /* myself (no network peer) */
      desc(ANYCCL_GIN_PUT, 1, mem, 0, src, 64, 0, 1, 9),         /* counter out of range */
      desc(ANYCCL_GIN_PUT, 1, mem + 50, 0, src, 64, 0, 1, -1),   /* a window the peer never registered */
      desc(ANYCCL_GIN_PUT, 1, mem, WIN - 8, src, 64, 0, 1, -1),  /* past the end of the peer's window */
      desc(ANYCCL_GIN_SIGNAL, 1, -1, 0, 0, 0, 99, 1, -1),        /* signal out of range (at the peer) */
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
      if (push(dc, &bad[k]) != 0) return 1;
    struct anycclGinDesc d = desc(ANYCCL_GIN_PUT, 1, mem, 64, src + 64, 64, 0, 1, -1);
    for (int k = 0; k < 64; k++) win[64 + k] = (char)(k + 1);
    if (push(dc, &d) != 0 || flush(dc) != 0) return 1;
    return 0;
  }
  if (waitWord(&dc->ginProxy->hostSignals[0], 1, "signal 0")) return 1;
  for (int k = 0; k < 64; k++) EXPECT(win[64 + k] == (char)(k + 1), "the good put, byte %d", k);
  for (size_t i = 0; i < WIN; i++)
    if (i < 64 || i >= 128) EXPECT(win[i] == 0, "byte %zu written by a dropped operation", i);
  usleep(50000);
  EXPECT(dc->ginProxy->hostSignals[0] == 1, "signal 0 = %llu: a dropped operation signalled", (unsigned long long)dc->ginProxy->hostSignals[0]);
  return 0;
}

enum { ORDER_FLIGHT = 16, ORDER_REGION = 40000, ORDER_VALUES = 16 * ORDER_REGION };
/* a put's bytes in round k: up to the region, a quarter of them around
 * PORT_INLINE (carried inside the header message up to it) and some at it
 * and one past it */
static uint64_t orderBytes(int k) {
  if (k % 8 == 3) return PORT_INLINE + (uint64_t)(k / 8 % 2);
  if (k % 4 == 1) return 1 + (uint64_t)k * 7919 % (PORT_INLINE + 64);
  return 1 + (uint64_t)k * 7919 % ORDER_REGION;
}
static uint64_t orderValue(int k) { return (uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull; }

/* Signals: 0 the puts', 1 the bare ones, 2 the put-values', 3 rank 1's
 * acknowledgements (rank 0 reuses a region only after it). */
static int caseOrder(const ncclDevComm_t* dc, char* win, int mem) {
  const int rounds = getenv("GIN_ROUNDS") ? atoi(getenv("GIN_ROUNDS")) : 1000;
  uint64_t bare = 0, values = 0;
  for (int k0 = 0; k0 < rounds; k0 += ORDER_FLIGHT) {
    for (int k = k0; k < k0 + ORDER_FLIGHT; k++) {
      const size_t off = (size_t)(k % ORDER_FLIGHT) * ORDER_REGION;
      const int nbare = k * 5 % 24, value = k % 3 == 0;
      if (c->rank == 0) { /* rounds k0.. of sources: unchanged until flushed and acknowledged */
        for (size_t i = 0; i < orderBytes(k); i++) win[off + i] = (char)patArg(off + i, (uint64_t)k);
        struct anycclGinDesc d = desc(ANYCCL_GIN_PUT, 1, mem, off, (uint64_t)(uintptr_t)(win + off), orderBytes(k), 0, 1, -1);
        if (push(dc, &d) != 0) return 1;
        if (value) {
          d = desc(ANYCCL_GIN_PUT_VALUE, 1, mem, ORDER_VALUES + 8 * (k % ORDER_FLIGHT), orderValue(k), 8, 2, 1, -1);
          if (push(dc, &d) != 0) return 1;
        }
        for (int i = 0; i < nbare; i++)
          if (push(dc, &(struct anycclGinDesc){ANYCCL_GIN_SIGNAL, 1, -1, 0, 0, 0, 0, 1, 1, -1, 0}) != 0) return 1;
        continue;
      }
      /* rank 1: its bytes as soon as its signal is there (the later rounds' may still be arriving) */
      if (waitWord(&dc->ginProxy->hostSignals[0], (uint64_t)k + 1, "the puts' signal")) return 1;
      char what[64];
      snprintf(what, sizeof(what), "round %d's put of %llu bytes", k, (unsigned long long)orderBytes(k));
      if (checkBytes(win, off, off + orderBytes(k), patArg, (uint64_t)k, what)) return 1;
      bare += (uint64_t)nbare;
      if (value) {
        if (waitWord(&dc->ginProxy->hostSignals[2], ++values, "the put-values' signal")) return 1;
        uint64_t v;
        memcpy(&v, win + ORDER_VALUES + 8 * (k % ORDER_FLIGHT), 8);
        EXPECT(v == orderValue(k), "round %d's put-value: %llx, want %llx", k, (unsigned long long)v,
               (unsigned long long)orderValue(k));
      }
    }
    const uint64_t acks = (uint64_t)(k0 / ORDER_FLIGHT + 1);
    if (c->rank == 0) {
      if (flush(dc) != 0 || waitWord(&dc->ginProxy->hostSignals[3], acks, "rank 1's acknowledgement")) return 1;
    } else {
      if (waitWord(&dc->ginProxy->hostSignals[1], bare, "the bare signals")) return 1;
      if (push(dc, &(struct anycclGinDesc){ANYCCL_GIN_SIGNAL, 0, -1, 0, 0, 0, 0, 1, 3, -1, 0}) != 0) return 1;
    }
  }
  if (c->rank == 1) {
    usleep(20000); /* a signal applied twice would show by now */
    EXPECT(dc->ginProxy->hostSignals[0] == (uint64_t)((rounds + ORDER_FLIGHT - 1) / ORDER_FLIGHT * ORDER_FLIGHT) && dc->ginProxy->hostSignals[1] == bare &&
               dc->ginProxy->hostSignals[2] == values,
           "signals %llu %llu %llu, want %d %llu %llu", (unsigned long long)dc->ginProxy->hostSignals[0],
           (unsigned long long)dc->ginProxy->hostSignals[1], (unsigned long long)dc->ginProxy->hostSignals[2],
           (rounds + ORDER_FLIGHT - 1) / ORDER_FLIGHT * ORDER_FLIGHT, (unsigned long long)bare, (unsigned long long)values);
  }
  return flush(dc);
}

/* producers: PRODUCERS threads of rank 0 push PER_PRODUCER descriptors each
 * at once (the blocks of a kernel): bare signals and put-values, each with
 * its own signal add, through a FIFO they wrap many times; meanwhile both
 * ranks attach more device communicators and register and deregister a
 * window (id 1) again and again. Rank 1 checks every put-value's 8 bytes and
 * each signal's exact sum: a descriptor read before it was written, read
 * twice, or a commit lost shows as a wrong value, a wrong sum or a stall. */
enum { PRODUCERS = 4, PER_PRODUCER = 250 };
struct producer { const ncclDevComm_t* dc; int mem, t, res; };
static uint64_t addOf(int k) { return 1 + (uint64_t)(k % 5); }
static uint64_t valueOf(int t, int k) { return ((uint64_t)(t + 1) << 32) | (uint64_t)(k + 1); }
static void* producerMain(void* arg) {
  struct producer* p = arg;
  for (int k = 0; k < PER_PRODUCER && p->res == 0; k++) {
    struct anycclGinDesc d = k % 3 == 0
      ? desc(ANYCCL_GIN_PUT_VALUE, 1, p->mem, 8 * (uint64_t)(p->t * PER_PRODUCER + k), valueOf(p->t, k), 8, p->t, addOf(k), -1)
      : desc(ANYCCL_GIN_SIGNAL, 1, -1, 0, 0, 0, p->t, addOf(k), -1);
    p->res = push(p->dc, &d);
  }
  return NULL;
}

static int churn(ncclComm_t comm, char* win) {
  ncclDevComm_t more;
  for (int i = 1; i < 16; i++) OK(anycclGinAttach(comm, i, 4, 2, &more));
  for (int k = 0; k < 300; k++) {
    int m;
    OK(anycclGinRegister(comm, win + WIN - 4096, 4096, &m));
    EXPECT(m == 1, "the churned window took id %d, not 1", m);
    anycclGinUnregister(comm, m);
    sched_yield();
  }
  return 0;
}

static int caseProducers(ncclComm_t comm, const ncclDevComm_t* dc, char* win, int mem) {
  uint64_t sum = 0;
  for (int k = 0; k < PER_PRODUCER; k++) sum += addOf(k);
  if (c->rank == 0) {
    struct producer p[PRODUCERS];
    pthread_t th[PRODUCERS];
    for (int t = 0; t < PRODUCERS; t++) {
      p[t] = (struct producer){dc, mem, t, 0};
      EXPECT(pthread_create(&th[t], NULL, producerMain, &p[t]) == 0, "pthread_create");
    }
    int bad = churn(comm, win);
    for (int t = 0; t < PRODUCERS; t++) {
      pthread_join(th[t], NULL);
      bad |= p[t].res;
    }
    if (bad || flush(dc) != 0) return 1;
    EXPECT(anycclProxyServiceGetError(anycclGinService(comm), 0) == ncclSuccess, "the proxy dropped a descriptor");
    return 0;
  }
  if (churn(comm, win)) return 1;
  for (int t = 0; t < PRODUCERS; t++) {
    char what[32];
    snprintf(what, sizeof(what), "signal %d", t);
    if (waitWord(&dc->ginProxy->hostSignals[t], sum, what)) return 1;
  }
  for (int t = 0; t < PRODUCERS; t++)
    for (int k = 0; k < PER_PRODUCER; k++) {
      uint64_t v;
      memcpy(&v, win + 8 * (size_t)(t * PER_PRODUCER + k), 8);
      EXPECT(v == (k % 3 == 0 ? valueOf(t, k) : 0), "producer %d, descriptor %d: %llx", t, k, (unsigned long long)v);
    }
  usleep(50000); /* a descriptor taken twice would show by now */
  for (int t = 0; t < PRODUCERS; t++)
    EXPECT(dc->ginProxy->hostSignals[t] == sum, "signal %d: %llu, want %llu", t,
           (unsigned long long)dc->ginProxy->hostSignals[t], (unsigned long long)sum);
  EXPECT(anycclProxyServiceGetError(anycclGinService(comm), 0) == ncclSuccess, "the proxy dropped a message");
  return 0;
}

/* Timing, not a test (`test_gin pingpong`): rounds in which each rank
 * signals the other N times (as N blocks' GIN barriers do) and waits for the
 * other's N; GIN_ROUNDS, GIN_SIGNALS, GIN_PUT (bytes of a put before the
 * signals, 0: none). Rank 0 prints the mean round. */
static int casePingpong(const ncclDevComm_t* dc, char* win, int mem) {
  const int rounds = getenv("GIN_ROUNDS") ? atoi(getenv("GIN_ROUNDS")) : 200;
  const int nsig = getenv("GIN_SIGNALS") ? atoi(getenv("GIN_SIGNALS")) : 16;
  const uint64_t put = getenv("GIN_PUT") ? strtoull(getenv("GIN_PUT"), NULL, 0) : 0;
  double t0 = 0;
  for (int k = -10; k < rounds; k++) {
    if (k == 0) t0 = nowSec();
    if (put && push(dc, &(struct anycclGinDesc){ANYCCL_GIN_PUT, c->peer, mem, 0, 0, (uint64_t)(uintptr_t)win, put, 0, -1, -1, 0}))
      return 1;
    for (int i = 0; i < nsig; i++)
      if (push(dc, &(struct anycclGinDesc){ANYCCL_GIN_SIGNAL, c->peer, -1, 0, 0, 0, 0, 1, 0, -1, 0}) != 0) return 1;
    if (waitWord(&dc->ginProxy->hostSignals[0], (uint64_t)nsig * (k + 11), "signal 0")) return 1;
  }
  if (flush(dc) != 0) return 1;
  if (c->rank == 0)
    printf("gin pingpong: %d rounds of %d signals each way%s: %.1f us a round\n", rounds, nsig,
           put ? " after a put" : "", (nowSec() - t0) * 1e6 / rounds);
  return 0;
}

static int runRank(const char* name, int r, const char* hex) {
  c->rank = r;
  c->peer = 1 - r;
  ncclUniqueId id;
  unhexId(hex, &id);
  ncclComm_t comm;
  OK(ncclCommInitRank(&comm, 2, id, c->rank));
  char* win;
  EXPECT(cudaMalloc((void**)&win, WIN) == cudaSuccess, "cudaMalloc");
  OK(anycclGinSetup(comm));
  int mem, keep = -1;
  if (strcmp(name, "reuse") == 0) {
    for (int k = 0; k < 1500; k++) {
      int m;
      OK(anycclGinRegister(comm, win + 64 * (k % 16), 4096, &m));
      EXPECT(m == 0, "window %d took id %d, not the freed 0", k, m);
      anycclGinUnregister(comm, m);
    }
    int a, b;
    OK(anycclGinRegister(comm, win, 4096, &a));
    OK(anycclGinRegister(comm, win + 4096, 4096, &keep));
    EXPECT(a == 0 && keep == 1, "ids %d %d, want 0 1", a, keep);
    anycclGinUnregister(comm, a);
    OK(anycclGinRegister(comm, win, WIN, &b));
    EXPECT(b == 0, "the window after a freed id took %d, not 0", b);
    mem = b;
  } else {
    OK(anycclGinRegister(comm, win, WIN, &mem));
  }
  EXPECT(mem >= 0, "no memory id");
  ncclDevComm_t dc;
  memset(&dc, 0, sizeof(dc));
  OK(anycclGinAttach(comm, 0, 4, 2, &dc));
  EXPECT(dc.ginProxy && dc.ginProxy->fifoSize >= 2 && dc.ginProxy->hostSignals && dc.ginProxy->hostCounters,
         "device view");
  if (c->rank == 1 && getenv("GIN_LATE_ZERO_US")) usleep((useconds_t)atoi(getenv("GIN_LATE_ZERO_US")));
  memset(win, 0, WIN);
  OK(bootstrapBarrier(comm->bootstrap, 0x61e0)); /* registered and zeroed everywhere */
  int res = strcmp(name, "pingpong") == 0    ? casePingpong(&dc, win, mem)
            : strcmp(name, "order") == 0     ? caseOrder(&dc, win, mem)
            : strcmp(name, "producers") == 0 ? caseProducers(comm, &dc, win, mem)
            : strcmp(name, "bad") != 0    ? caseOps(comm, &dc, win, mem)
                                          : caseBad(comm, &dc, win, mem);
  (void)keep;
  anycclGinFree(comm);
  cudaFree(win);
  ncclCommDestroy(comm);
  return res;
}

int main(int argc, char** argv) {
  alarm(25);
  if (argc == 6 && strcmp(argv[1], "--child") == 0) return runRank(argv[3], atoi(argv[4]), argv[5]);
  if (argc != 2 || (strcmp(argv[1], "ops") != 0 && strcmp(argv[1], "bad") != 0 && strcmp(argv[1], "reuse") != 0 &&
                    strcmp(argv[1], "order") != 0 && strcmp(argv[1], "pingpong") != 0 &&
                    strcmp(argv[1], "producers") != 0)) {
    fprintf(stderr, "usage: %s ops|bad|reuse|order|producers|pingpong\n", argv[0]);
    return 2;
  }
  if (forkPair(argv[0], "hosts", argv[1], 1)) return 1;
  printf("PASS: gin %s\n", argv[1]);
  return 0;
}
