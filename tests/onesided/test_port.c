/* One-sided layer tests: test_port MODE CASE (MODE: threads, procs, hosts).
 * Every run has a hard alarm() bound. Cases: order, fifo, sems, mems, bad,
 * dead, memchan, host, custom, encode, two, direct, mixed, big. */
#define _GNU_SOURCE
#include <sys/wait.h>
#include "port_harness.h"

static uint64_t pattern(uint64_t i, int round) { return i * 0x9E3779B97F4A7C15ull + (uint64_t)round * 77 + 1; }

/* put / signal / wait / poll / flush, in the orders that matter: rank 0 puts
 * chunk i then signals (four ways), rank 1 waits and checks chunk i. */
static int caseOrder(struct ctx* c) {
  enum { N = 64, CHUNK = 4096 };
  struct pair p;
  if (pairSetup(c, &p, N * CHUNK, 0, 1)) return 1;
  if (c->rank == 1) {
    EXPECT(anycclPortPoll(&p.ch) == 0, "poll before any signal");
    OK(anycclPortSignal(&p.ch)); /* go */
    for (int i = 0; i < N; i++) {
      OK(anycclPortWait(&p.ch));
      uint64_t* d = (uint64_t*)(p.buf + (size_t)i * CHUNK);
      for (int k = 0; k < CHUNK / 8; k++)
        EXPECT(d[k] == pattern(k, i), "chunk %d word %d: %llx, want %llx (signal overtook its put, or a flushed "
               "source changed the data)", i, k, (unsigned long long)d[k], (unsigned long long)pattern(k, i));
    }
    EXPECT(anycclPortPoll(&p.ch) == 0, "a signal too many");
    OK(anycclPortSignal(&p.ch)); /* all checked */
  } else {
    OK(anycclPortWait(&p.ch));
    for (int i = 0; i < N; i++) {
      uint64_t* s = (uint64_t*)(p.buf + (size_t)i * CHUNK);
      for (int k = 0; k < CHUNK / 8; k++) s[k] = pattern(k, i);
      uint64_t off = (uint64_t)i * CHUNK;
      switch (i % 4) {
        case 0:
          OK(anycclPortPut(&p.ch, off, off, CHUNK));
          OK(anycclPortSignal(&p.ch));
          break;
        case 1:
          OK(anycclPortPutWithSignal(&p.ch, off, off, CHUNK));
          break;
        case 2: /* flush: the source may change right after */
          OK(anycclPortPut(&p.ch, off, off, CHUNK));
          OK(anycclPortFlush(&p.ch));
          memset(s, 0xEE, CHUNK);
          OK(anycclPortSignal(&p.ch));
          break;
        case 3:
          OK(anycclPortPutWithSignalAndFlush(&p.ch, off, off, CHUNK));
          memset(s, 0xEE, CHUNK);
          break;
      }
    }
    /* poll: spins until the final signal, consuming it once */
    double t0 = nowSec();
    while (!anycclPortPoll(&p.ch)) EXPECT(nowSec() - t0 < 10, "poll never saw the signal");
  }
  return pairTeardown(c, &p);
}

/* Many producers through a FIFO of 8 entries: 8 threads x 300 puts (wrap-
 * around 300 times), the first ones made before the proxy starts (the
 * producers wait while the FIFO is full). */
enum { PRODUCERS = 8, PER = 300 };
struct prodArg { struct anycclPortChannel ch; int t; ncclResult_t r; };
static void* producer(void* p) {
  struct prodArg* a = p;
  for (int k = 0; k < PER && a->r == ncclSuccess; k++) {
    uint64_t off = ((uint64_t)a->t * PER + k) * 8;
    a->r = anycclPortPut(&a->ch, off, off, 8);
  }
  return NULL;
}

static int caseFifo(struct ctx* c) {
  struct pair p;
  if (pairSetup(c, &p, PRODUCERS * PER * 8, 8, c->rank == 1)) return 1;
  p.ch.directMax = 0; /* every call through the FIFO (the direct path would skip it) */
  if (c->rank == 0) {
    uint64_t* s = (uint64_t*)p.buf;
    for (int i = 0; i < PRODUCERS * PER; i++) s[i] = pattern(i, 5);
    struct prodArg a[PRODUCERS];
    pthread_t t[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
      a[i] = (struct prodArg){p.ch, i, ncclSuccess};
      pthread_create(&t[i], NULL, producer, &a[i]);
    }
    usleep(100 * 1000);
    struct anycclPortShared* sh = p.ch.fifo.shared;
    uint64_t head = __atomic_load_n(p.ch.fifo.head, __ATOMIC_ACQUIRE), tail = __atomic_load_n(&sh->tail, __ATOMIC_ACQUIRE);
    EXPECT(head >= 8 && tail == 0, "before the proxy starts the FIFO fills and nothing is taken (head %llu tail %llu)",
           (unsigned long long)head, (unsigned long long)tail);
    OK(anycclProxyServiceStart(p.svc));
    for (int i = 0; i < PRODUCERS; i++) {
      pthread_join(t[i], NULL);
      OK(a[i].r);
    }
    OK(anycclPortSignal(&p.ch));
    OK(anycclPortFlush(&p.ch));
    tail = __atomic_load_n(&sh->tail, __ATOMIC_ACQUIRE);
    uint64_t done = __atomic_load_n(&sh->done, __ATOMIC_ACQUIRE);
    EXPECT(tail == PRODUCERS * PER + 2 && done == tail, "tail %llu done %llu", (unsigned long long)tail,
           (unsigned long long)done);
  } else {
    OK(anycclPortWait(&p.ch));
    uint64_t* d = (uint64_t*)p.buf;
    for (int i = 0; i < PRODUCERS * PER; i++) EXPECT(d[i] == pattern(i, 5), "word %d lost", i);
  }
  return pairTeardown(c, &p);
}

/* 1024 semaphores (+1 for the barrier): rank 0 signals the odd ones only. */
static int caseSems(struct ctx* c) {
  enum { NS = 1024 };
  struct pair p;
  if (pairSetup(c, &p, 64, 0, 1)) return 1;
  static anycclSemaphoreId ids[2][NS];
  anycclSemaphoreId* id = ids[c->rank];
  for (int k = 0; k < NS; k++) OK(anycclSemaphoreCreate(p.svc, c->peer, &id[k]));
  if (c->rank == 0) {
    for (int k = 1; k < NS; k += 2) {
      struct anycclPortChannel ch;
      OK(anycclPortChannelCreate(p.svc, id[k], p.remote, p.local, &ch));
      OK(anycclPortSignal(&ch));
      if (k == NS - 1) OK(anycclPortFlush(&ch));
    }
    OK(anycclPortSignal(&p.ch));
  } else {
    OK(anycclPortWait(&p.ch));
    for (int k = 0; k < NS; k++) {
      struct anycclPortSemaphore s;
      OK(anycclSemaphoreDevice(p.svc, id[k], &s));
      if (k & 1) OK(anycclSemaphoreWait(&s));
      EXPECT(anycclSemaphorePoll(&s) == 0, "semaphore %d got a signal meant for another", k);
    }
  }
  return pairTeardown(c, &p);
}

/* 512 memories of rank 1 (slices of one buffer), a channel to each. */
static int caseMems(struct ctx* c) {
  enum { NM = 512, SLICE = 64 };
  struct pair p;
  if (pairSetup(c, &p, NM * SLICE, 0, 1)) return 1;
  anycclMemoryId all[2];
  OK(anycclMemoryAllGather(p.svc, p.local, all));
  EXPECT(all[c->rank] == p.local && all[c->peer] != p.local, "all-gathered ids %d %d", all[0], all[1]);
  if (c->rank == 0) { /* through the all-gathered id: the last word of the peer's buffer */
    struct anycclPortChannel ch;
    OK(anycclPortChannelCreate(p.svc, p.sem, all[1], p.local, &ch));
    *(uint64_t*)(p.buf + NM * SLICE - 8) = pattern(7777, 9);
    OK(anycclPortPut(&ch, NM * SLICE - 8, NM * SLICE - 8, 8));
  }
  if (c->rank == 1) {
    for (int k = 0; k < NM; k++) {
      anycclMemoryId m;
      OK(anycclRegisterMemory(p.svc, p.buf + k * SLICE, SLICE, &m));
      OK(anycclMemorySend(p.svc, m, c->peer));
    }
    OK(anycclPortWait(&p.ch));
    for (int k = 0; k < NM; k++) {
      uint64_t* d = (uint64_t*)(p.buf + k * SLICE);
      EXPECT(d[1] == pattern(k, 9) && d[0] == 0 && d[2] == 0, "memory %d: %llx", k, (unsigned long long)d[1]);
    }
    EXPECT(*(uint64_t*)(p.buf + NM * SLICE - 8) == pattern(7777, 9), "put through the all-gathered memory");
  } else {
    uint64_t* s = (uint64_t*)p.buf;
    for (int k = 0; k < NM; k++) s[k] = pattern(k, 9);
    for (int k = 0; k < NM; k++) {
      anycclMemoryId m;
      struct anycclPortChannel ch;
      OK(anycclMemoryRecv(p.svc, c->peer, &m));
      OK(anycclPortChannelCreate(p.svc, p.sem, m, p.local, &ch));
      EXPECT(ch.dstSize == SLICE, "slice size %llu", (unsigned long long)ch.dstSize);
      OK(anycclPortPut(&ch, 8, (uint64_t)k * 8, 8));
    }
    OK(anycclPortSignal(&p.ch));
  }
  return pairTeardown(c, &p);
}

/* Bad handles and offsets: ncclInvalidArgument, nothing written (rank 1's
 * registered window has guard bytes on both sides). */
static int caseBad(struct ctx* c) {
  enum { G = 256, S = 4096 };
  struct pair p;
  if (pairSetup(c, &p, 2 * G + S, 0, 1)) return 1;
  anycclMemoryId win;
  if (c->rank == 1) {
    memset(p.buf, 0xAB, 2 * G + S);
    OK(anycclRegisterMemory(p.svc, p.buf + G, S, &win));
    OK(anycclMemorySend(p.svc, win, c->peer));
    OK(anycclPortWait(&p.ch));
    for (int i = 0; i < G; i++)
      EXPECT((unsigned char)p.buf[i] == 0xAB && (unsigned char)p.buf[G + S + i] == 0xAB, "guard byte %d written", i);
    for (int i = 0; i < S; i++) EXPECT(p.buf[G + i] == (char)(i * 7), "window byte %d", i);
  } else {
    for (int i = 0; i < 2 * G + S; i++) p.buf[i] = (char)(i * 7);
    OK(anycclMemoryRecv(p.svc, c->peer, &win));
    struct anycclPortChannel ch, zero;
    OK(anycclPortChannelCreate(p.svc, p.sem, win, p.local, &ch));
    memset(&zero, 0, sizeof(zero));
    EXPECT(anycclPortPut(&ch, S - 8, 0, 16) == ncclInvalidArgument, "dst end past the window");
    EXPECT(strstr(ncclGetLastError(NULL), "invalid argument") != NULL, "last error: %s", ncclGetLastError(NULL));
    EXPECT(anycclPortPut(&ch, 0, 2 * G + S, 1) == ncclInvalidArgument, "src end past the source");
    EXPECT(anycclPortPutWithSignal(&ch, 1ull << 40, 0, 1) == ncclInvalidArgument, "huge offset");
    EXPECT(anycclPortPut(&zero, 0, 0, 8) == ncclInvalidArgument, "zeroed handle");
    EXPECT(anycclPortWait(&zero) == ncclInvalidArgument, "zeroed handle wait");
    EXPECT(anycclPortPut(NULL, 0, 0, 8) == ncclInvalidArgument, "NULL handle");
    /* a corrupted id passes the device checks; the proxy drops it */
    struct anycclPortChannel bad = ch;
    bad.id = 5000;
    bad.directMax = 0; /* through the proxy (a direct put does not use the id) */
    OK(anycclPortPut(&bad, 0, 0, 8));
    EXPECT(anycclPortFlush(&ch) == ncclInvalidArgument, "flush reports the dropped trigger");
    EXPECT(anycclProxyServiceGetError(p.svc, 1) == ncclInvalidArgument, "service error");
    OK(anycclPortFlush(&ch));
    /* host API */
    struct anycclPortChannel tmp;
    struct anycclMemoryChannel mc;
    anycclMemoryId m;
    anycclSemaphoreId sid;
    EXPECT(anycclPortChannelCreate(p.svc, 9999, win, p.local, &tmp) == ncclInvalidArgument, "bad semaphore id");
    EXPECT(anycclPortChannelCreate(p.svc, p.sem, 9999, p.local, &tmp) == ncclInvalidArgument, "bad memory id");
    EXPECT(anycclPortChannelCreate(p.svc, p.sem, win, win, &tmp) == ncclInvalidArgument, "remote memory as source");
    EXPECT(anycclRegisterMemory(p.svc, NULL, 8, &m) == ncclInvalidArgument, "NULL memory");
    EXPECT(anycclMemorySend(p.svc, 77777, c->peer) == ncclInvalidArgument, "bad memory id to send");
    EXPECT(anycclSemaphoreCreate(p.svc, c->rank, &sid) == ncclInvalidArgument, "semaphore with myself");
    EXPECT(anycclSemaphoreCreate(p.svc, 7, &sid) == ncclInvalidArgument, "peer out of range");
    EXPECT(anycclHostSemaphoreSignal(p.svc, p.sem) == ncclInvalidArgument, "not a host semaphore");
    EXPECT(anycclProxyServiceCreate(c->comm, 3, NULL) == ncclInvalidArgument, "NULL service");
    anycclProxyService_t s2;
    EXPECT(anycclProxyServiceCreate(c->comm, 3, &s2) == ncclInvalidArgument, "FIFO size not a power of two");
    if (strcmp(c->mode, "hosts") != 0) {
      OK(anycclMemoryChannelCreate(p.svc, p.sem, win, p.local, -1, &mc));
      EXPECT(anycclMemChanPut(&mc, S, 0, 1, 0, 1) == ncclInvalidArgument, "memory channel past the window");
      EXPECT(anycclMemChanUnpackPackets(&mc, 0, 0, 8, 1, 0, 1) == ncclInvalidArgument, "no packet buffer");
    } else {
      EXPECT(anycclMemoryChannelCreate(p.svc, p.sem, win, p.local, -1, &mc) == ncclInvalidArgument,
             "memory channel to another host");
    }
    /* still works */
    OK(anycclPortPutWithSignalAndFlush(&ch, 0, G, S));
  }
  return pairTeardown(c, &p);
}

/* A wait on a peer that never signals is bounded. Threads: the timeout
 * (ANYCCL_PORT_TIMEOUT=1). Processes: rank 1 dies, rank 0 hears of it
 * (same host: the liveness check; other host: the dropped connection)
 * well before its timeout (10 s). */
static int caseDead(struct ctx* c) {
  struct pair p;
  if (pairSetup(c, &p, 4096, 0, 1)) return 1;
  if (pairBarrier(c, &p)) return 1;
  static int waited; /* threads: rank 0's wait has returned */
  if (c->rank == 1) {
    if (c->procs) {
      OK(anycclPortFlush(&p.ch)); /* the barrier's signal has left */
      _exit(0);                   /* then dies without a word */
    }
    double t0 = nowSec();
    while (!__atomic_load_n(&waited, __ATOMIC_ACQUIRE)) {
      EXPECT(nowSec() - t0 < 10, "rank 0's wait never returned");
      usleep(1000);
    }
  }
  if (c->rank == 0) {
    double t0 = nowSec();
    ncclResult_t r = anycclPortWait(&p.ch);
    double t = nowSec() - t0;
    EXPECT(r != ncclSuccess, "wait on a silent peer returned success");
    if (c->procs) {
      EXPECT(t < 6, "dead peer noticed after %.1f s", t);
      EXPECT(r == ncclRemoteError || r == ncclSystemError, "result %s", ncclGetErrorString(r));
      EXPECT(anycclPortPut(&p.ch, 0, 0, 8) == r, "later calls report the failure");
      anycclProxyServiceStop(p.svc);
      OK(anycclProxyServiceDestroy(p.svc));
      return 0;
    }
    __atomic_store_n(&waited, 1, __ATOMIC_RELEASE);
    EXPECT(r == ncclSystemError && t > 0.8 && t < 5, "timeout: %s after %.1f s", ncclGetErrorString(r), t);
  }
  /* threads: now both are alive again */
  if (c->rank == 1) OK(anycclPortSignal(&p.ch));
  if (c->rank == 0) OK(anycclPortWait(&p.ch));
  return pairTeardown(c, &p);
}

/* Processes: a peer that signals and dies before this proxy starts. Its
 * signal and the end of the connection then arrive together: the signal is
 * taken at most once (the P2P engine may fail the connection before the
 * proxy takes it), and a wait after it fails. */
static int caseDeadLate(struct ctx* c) {
  struct pair p;
  if (pairSetup(c, &p, 4096, 0, c->rank == 1)) return 1;
  if (c->rank == 1) {
    OK(anycclPortSignal(&p.ch));
    OK(anycclPortFlush(&p.ch)); /* it has left */
    _exit(0);
  }
  usleep(200000); /* rank 1 is gone */
  OK(anycclProxyServiceStart(p.svc));
  ncclResult_t r = anycclPortWait(&p.ch);
  if (r == ncclSuccess) r = anycclPortWait(&p.ch);
  EXPECT(r != ncclSuccess, "a second wait returned success: the one signal was taken twice");
  anycclProxyServiceStop(p.svc);
  OK(anycclProxyServiceDestroy(p.svc));
  return 0;
}

/* Processes: rank 0's third receive of headers is refused (a network whose
 * connection failed right after a signal arrived), so the second signal is
 * taken and then the connection fails: that signal counts once (a third
 * wait fails; nothing more shows up), however often the proxy runs after. */
static int caseRecvFail(struct ctx* c) {
  if (c->rank == 0) setenv("ANYCCL_TEST_PORT_REFUSE_HDR", "3", 1); /* 1: the first receive, 2: after signal 1 */
  struct pair p;
  if (pairSetup(c, &p, 4096, 0, 1)) return 1;
  if (c->rank == 1) {
    OK(anycclPortSignal(&p.ch));
    OK(anycclPortWait(&p.ch));
    OK(anycclPortSignal(&p.ch));
    OK(anycclPortFlush(&p.ch));
    usleep(300000); /* alive while rank 0 looks */
    anycclProxyServiceStop(p.svc);
    OK(anycclProxyServiceDestroy(p.svc));
    return 0;
  }
  OK(anycclPortWait(&p.ch));
  OK(anycclPortSignal(&p.ch));
  OK(anycclPortWait(&p.ch));
  ncclResult_t r = anycclPortWait(&p.ch);
  EXPECT(r == ncclSystemError, "a third wait after the connection failed: %s (want ncclSystemError; success: the "
         "second signal was taken again)", ncclGetErrorString(r));
  usleep(50000); /* the proxy goes on running */
  EXPECT(anycclPortPoll(&p.ch) == 0, "a signal showed up after the connection failed");
  anycclProxyServiceStop(p.svc);
  OK(anycclProxyServiceDestroy(p.svc));
  return 0;
}

/* Memory channel: put, get, signal/wait, LL packets (two rounds). */
static int caseMemchan(struct ctx* c) {
  enum { H = 8192, PK = 2048 };
  struct pair p;
  if (pairSetup(c, &p, 2 * H, 0, 1)) return 1;
  char* pkt;
  EXPECT(cudaMalloc((void**)&pkt, 2 * PK) == cudaSuccess, "cudaMalloc");
  memset(pkt, 0, 2 * PK);
  anycclMemoryId lp, rp;
  OK(anycclRegisterMemory(p.svc, pkt, 2 * PK, &lp));
  OK(anycclMemorySend(p.svc, lp, c->peer));
  OK(anycclMemoryRecv(p.svc, c->peer, &rp));
  struct anycclMemoryChannel md, mp;
  OK(anycclMemoryChannelCreate(p.svc, p.sem, p.remote, p.local, -1, &md));
  OK(anycclMemoryChannelCreate(p.svc, p.sem, rp, p.local, lp, &mp));
  uint32_t* w = (uint32_t*)p.buf;
  int me = c->rank, peer = c->peer;
  for (int i = 0; i < H / 4; i++) w[me * H / 4 + i] = (uint32_t)pattern(i, me);
  for (int t = 0; t < 3; t++) OK(anycclMemChanPut(&md, (uint64_t)me * H, (uint64_t)me * H, H, t, 3)); /* a "group" of 3 */
  OK(anycclMemChanSignal(&md));
  OK(anycclMemChanWait(&md));
  for (int i = 0; i < H / 4; i++) EXPECT(w[peer * H / 4 + i] == (uint32_t)pattern(i, peer), "put word %d", i);
  if (pairBarrier(c, &p)) return 1;
  /* get: the peer's own half back into my half's place */
  memset(p.buf + (size_t)me * H, 0, 64); /* the peer's buffer still has my half (my put) */
  OK(anycclMemChanGet(&md, (uint64_t)me * H, (uint64_t)me * H, 64, 0, 1));
  for (int i = 0; i < 16; i++) EXPECT(w[me * H / 4 + i] == (uint32_t)pattern(i, me), "get word %d", i);
  if (pairBarrier(c, &p)) return 1;
  /* LL packets: 1 KB of my half as lines, flags 1 then 2 */
  for (uint32_t flag = 1; flag <= 2; flag++) {
    for (int i = 0; i < 256; i++) w[me * H / 4 + i] = (uint32_t)pattern(i, 10 * flag + me);
    OK(anycclMemChanPutPackets(&mp, 0, (uint64_t)me * H, 1024, flag, 0, 1));
    OK(anycclMemChanUnpackPackets(&mp, (uint64_t)peer * H, 0, 1024, flag, 0, 1));
    for (int i = 0; i < 256; i++)
      EXPECT(w[peer * H / 4 + i] == (uint32_t)pattern(i, 10 * flag + peer), "packet word %d round %u", i, flag);
    if (pairBarrier(c, &p)) return 1;
  }
  EXPECT(anycclMemChanPutPackets(&mp, 0, 0, 1024, 0, 0, 1) == ncclInvalidArgument, "flag 0");
  if (pairTeardown(c, &p)) return 1;
  EXPECT(cudaFree(pkt) == cudaSuccess, "cudaFree");
  return 0;
}

/* Host -> device semaphore. */
struct hostArg { struct anycclPortSemaphore s; ncclResult_t r; };
static void* hostWaiter(void* p) {
  struct hostArg* a = p;
  a->r = anycclSemaphoreWait(&a->s);
  if (a->r == ncclSuccess) a->r = anycclSemaphoreWait(&a->s);
  return NULL;
}
static int caseHost(struct ctx* c) {
  struct pair p;
  if (pairSetup(c, &p, 64, 0, 1)) return 1;
  anycclSemaphoreId h;
  OK(anycclHostSemaphoreCreate(p.svc, &h));
  struct hostArg a = {{0}, ncclInvalidUsage};
  OK(anycclSemaphoreDevice(p.svc, h, &a.s));
  EXPECT(anycclSemaphorePoll(&a.s) == 0, "fresh host semaphore");
  pthread_t t;
  pthread_create(&t, NULL, hostWaiter, &a);
  usleep(50 * 1000);
  OK(anycclHostSemaphoreSignal(p.svc, h));
  OK(anycclHostSemaphoreSignal(p.svc, h));
  pthread_join(t, NULL);
  OK(a.r);
  EXPECT(anycclSemaphorePoll(&a.s) == 0, "two signals, two waits");
  return pairTeardown(c, &p);
}

/* Custom triggers reach the handler, payload intact, in order. */
struct custom { uint64_t n, sum, lastW1; int ordered; };
static ncclResult_t onCustom(void* arg, uint64_t w0, uint64_t w1) {
  struct custom* k = arg;
  if (w0 != k->n) k->ordered = 0;
  k->n++;
  k->sum += w0;
  k->lastW1 = w1;
  return ncclSuccess;
}
static int caseCustom(struct ctx* c) {
  struct pair p;
  struct custom k = {0, 0, 0, 1};
  if (pairSetup(c, &p, 64, 0, 0)) return 1;
  OK(anycclProxyServiceSetHandler(p.svc, onCustom, &k));
  OK(anycclProxyServiceStart(p.svc));
  for (uint64_t i = 0; i < 1000; i++) OK(anycclPortPushCustom(&p.ch.fifo, i, 0x1234567ull | (0x5a5aull << 47)));
  OK(anycclPortFlush(&p.ch));
  EXPECT(k.n == 1000 && k.sum == 999 * 1000 / 2 && k.ordered, "handler saw %llu triggers", (unsigned long long)k.n);
  EXPECT((k.lastW1 & 0x7ffffffffffull) == 0x1234567ull && ((k.lastW1 >> 47) & 0xffff) == 0x5a5a &&
         ((k.lastW1 >> 43) & 0xf) == ANYCCL_TRIG_CUSTOM, "payload %llx", (unsigned long long)k.lastW1);
  return pairTeardown(c, &p);
}

/* The trigger carries 4 GiB, 37-bit offsets and 16-bit channel ids. */
static int caseEncode(struct ctx* c) {
  uint64_t w0, w1;
  uint64_t sizes[] = {0, 1, (1ull << 27) - 1, 1ull << 27, (1ull << 32) - 1, 1ull << 32};
  for (int i = 0; i < 6; i++) {
    anycclPortEncode(ANYCCL_TRIG_PUT | ANYCCL_TRIG_SIGNAL, 0xfffe, ANYCCL_TRIG_OFF_MASK, 12345, sizes[i], &w0, &w1);
    uint64_t bytes = (w0 >> 37) | (((w1 >> 37) & 0x3f) << 27);
    EXPECT(bytes == sizes[i] && (w0 & ANYCCL_TRIG_OFF_MASK) == 12345 && (w1 & ANYCCL_TRIG_OFF_MASK) == ANYCCL_TRIG_OFF_MASK &&
           ((w1 >> 47) & 0xffff) == 0xfffe && ((w1 >> 43) & 0xf) == 3 && !(w1 & ANYCCL_TRIG_COMMIT),
           "size %llu", (unsigned long long)sizes[i]);
  }
  return 0;
}

/* Two services on one communicator: their exchanges do not mix, even made
 * in the opposite order of creation. */
static int caseTwo(struct ctx* c) {
  anycclProxyService_t sa, sb;
  OK(anycclProxyServiceCreate(c->comm, 16, &sa));
  OK(anycclProxyServiceCreate(c->comm, 16, &sb));
  char *ba, *bb;
  EXPECT(cudaMalloc((void**)&ba, 512) == cudaSuccess && cudaMalloc((void**)&bb, 256) == cudaSuccess, "cudaMalloc");
  memset(ba, 0, 512);
  memset(bb, c->rank + 1, 256);
  anycclMemoryId la, lb, ra, rb;
  anycclSemaphoreId semb;
  OK(anycclRegisterMemory(sa, ba, 512, &la));
  OK(anycclRegisterMemory(sb, bb, 256, &lb));
  OK(anycclMemorySend(sb, lb, c->peer)); /* the second service first */
  OK(anycclMemorySend(sa, la, c->peer));
  OK(anycclMemoryRecv(sa, c->peer, &ra));
  OK(anycclMemoryRecv(sb, c->peer, &rb));
  OK(anycclSemaphoreCreate(sb, c->peer, &semb));
  struct anycclPortChannel chb;
  OK(anycclPortChannelCreate(sb, semb, rb, lb, &chb));
  size_t szA = 0;
  void* pa;
  OK(anycclMemoryPointer(sa, ra, &pa, &szA));
  EXPECT(chb.dstSize == 256 && szA == 512, "memories mixed between services (%llu, %zu bytes)",
         (unsigned long long)chb.dstSize, szA);
  OK(anycclProxyServiceStart(sb));
  uint64_t mine = (uint64_t)c->rank * 128, theirs = (uint64_t)c->peer * 128;
  OK(anycclPortPutWithSignal(&chb, mine, mine, 128)); /* my half to the same place in the peer's */
  OK(anycclPortWait(&chb));
  for (int i = 0; i < 128; i++)
    EXPECT(bb[theirs + i] == c->peer + 1 && bb[mine + i] == c->rank + 1, "byte %d", i);
  OK(anycclPortSignal(&chb)); /* the peer has read my half: done */
  OK(anycclPortWait(&chb));
  OK(anycclProxyServiceDestroy(sb));
  OK(anycclProxyServiceDestroy(sa));
  EXPECT(cudaFree(ba) == cudaSuccess && cudaFree(bb) == cudaSuccess, "cudaFree");
  return 0;
}

/* Large puts both ways at once, in rounds: each rank puts its whole buffer
 * (cut into many messages; with ANYCCL_PORT_STAGE=1 and small bounce
 * buffers the pools run dry on both sides), then a zero-byte put with a
 * signal, flushes and overwrites its source at once (flush means the source
 * was read), and checks what the peer put; at the end no signal is left over. */
static int caseBig(struct ctx* c) {
  enum { HALF = (1 << 20) + 24, ROUNDS = 6 };
  struct pair p;
  if (pairSetup(c, &p, 2 * HALF, 0, 1)) return 1;
  uint64_t mine = (uint64_t)c->rank * HALF, theirs = (uint64_t)c->peer * HALF;
  for (int round = 0; round < ROUNDS; round++) {
    uint64_t* src = (uint64_t*)(p.buf + mine);
    for (int k = 0; k < HALF / 8; k++) src[k] = pattern(k, round * 2 + c->rank);
    if (pairBarrier(c, &p)) return 1; /* the peer checked my last round before I overwrite its copy */
    uint64_t cut = (uint64_t)(round * 4099) % HALF;
    OK(anycclPortPut(&p.ch, mine, mine, cut));
    OK(anycclPortPut(&p.ch, mine + cut, mine + cut, HALF - cut));
    OK(anycclPortPutWithSignalAndFlush(&p.ch, mine, mine, 0));
    memset(src, 0xEE, HALF);
    OK(anycclPortWait(&p.ch));
    const uint64_t* got = (const uint64_t*)(p.buf + theirs);
    for (int k = 0; k < HALF / 8; k++)
      EXPECT(got[k] == pattern(k, round * 2 + c->peer), "round %d word %d: %llx, want %llx", round, k,
             (unsigned long long)got[k], (unsigned long long)pattern(k, round * 2 + c->peer));
  }
  /* a signal too many (one applied twice) shows here: each rank polls while the peer waits for it */
  if (c->rank == 1) OK(anycclPortWait(&p.ch));
  if (c->rank == 0) OK(anycclPortSignal(&p.ch));
  if (c->rank == 0) OK(anycclPortWait(&p.ch));
  EXPECT(anycclPortPoll(&p.ch) == 0, "a signal too many");
  OK(anycclPortSignal(&p.ch));
  if (c->rank == 1) OK(anycclPortWait(&p.ch));
  return pairTeardown(c, &p);
}

/* The direct path beside the proxy on one channel (directMax 1 KB here):
 * rank 0 puts, rank 1 checks its memory against a model of the puts.
 * 1. The proxy is not running: a big put waits in the FIFO, and a small
 *    putWithSignal over its end must queue behind it (not overtake it).
 * 2. 200 rounds through a FIFO of 8 (it wraps): a big put then a small
 *    putWithSignal over its end; a small put direct (after a flush the
 *    service is idle: nothing may enter the FIFO); a small put then a
 *    signal; a big putWithSignal. Each signal counts exactly once. */
static uint64_t getHead(const struct pair* p) { return __atomic_load_n(p->ch.fifo.head, __ATOMIC_ACQUIRE); }
static int directRound(int i, uint64_t* off) { /* the round's kind; off: where its small put lands */
  *off = (uint64_t)(i * 8) % 2048;
  return i % 4;
}
static int caseDirect(struct ctx* c) {
  enum { SMALL = 512, BIG = 4096, N = 200, SRC = 8192 };
  struct pair p, q;
  if (pairSetup(c, &p, SRC + BIG + SMALL, 8, 0)) return 1; /* [0, BIG): the peer's target; sources from SRC */
  if (pairSetup(c, &q, 64, 0, 1)) return 1;                 /* barriers */
  EXPECT(p.ch.dst != NULL && p.ch.directMax > 0, "no direct path to a peer of this host (directMax %llu)",
         (unsigned long long)p.ch.directMax);
  p.ch.directMax = 1024;
  char* b = p.buf;
  char model[BIG];
  memset(model, 0, sizeof(model));
  const uint64_t srcA = SRC, srcB = SRC + BIG; /* BIG bytes, SMALL bytes */
  /* 1 */
  if (c->rank == 0) {
    for (int k = 0; k < BIG; k++) b[srcA + k] = (char)pattern(k, 1);
    for (int k = 0; k < SMALL; k++) b[srcB + k] = (char)pattern(k, 2);
    OK(anycclPortPut(&p.ch, 0, srcA, BIG));
    OK(anycclPortPutWithSignal(&p.ch, BIG - SMALL, srcB, SMALL));
    EXPECT(getHead(&p) == 2, "the small put did not queue behind the big one (%llu triggers)",
           (unsigned long long)getHead(&p));
  }
  if (pairBarrier(c, &q)) return 1;
  if (c->rank == 1) {
    EXPECT(anycclPortPoll(&p.ch) == 0, "a signal overtook the queued put");
    for (int k = 0; k < BIG; k++) EXPECT(b[k] == 0, "byte %d landed before the proxy ran", k);
  }
  if (pairBarrier(c, &q)) return 1;
  OK(anycclProxyServiceStart(p.svc));
  if (c->rank == 1) {
    OK(anycclPortWait(&p.ch));
    for (int k = 0; k < BIG; k++) model[k] = (char)pattern(k, 1);
    for (int k = 0; k < SMALL; k++) model[BIG - SMALL + k] = (char)pattern(k, 2);
    EXPECT(memcmp(b, model, BIG) == 0, "phase 1: the small put was overwritten by the big one before it");
    OK(anycclPortSignal(&p.ch));
  } else {
    OK(anycclPortWait(&p.ch));
  }
  /* 2 */
  for (int i = 0; i < N; i++) {
    uint64_t off;
    int kind = directRound(i, &off);
    if (c->rank == 0) {
      for (int k = 0; k < BIG; k++) b[srcA + k] = (char)pattern(k, 3 * i);
      for (int k = 0; k < SMALL; k++) b[srcB + k] = (char)pattern(k, 3 * i + 1);
      uint64_t h0;
      switch (kind) {
        case 0:
          OK(anycclPortPut(&p.ch, 0, srcA, BIG));
          OK(anycclPortPutWithSignal(&p.ch, BIG - SMALL, srcB, SMALL));
          break;
        case 1:
          OK(anycclPortFlush(&p.ch));
          h0 = getHead(&p);
          OK(anycclPortPutWithSignal(&p.ch, off, srcB, SMALL));
          EXPECT(getHead(&p) == h0, "round %d: an idle service's small put went through the FIFO", i);
          break;
        case 2:
          OK(anycclPortPut(&p.ch, off, srcB, SMALL));
          OK(anycclPortSignal(&p.ch));
          break;
        default:
          OK(anycclPortPutWithSignal(&p.ch, 0, srcA, BIG));
      }
      OK(anycclPortWait(&p.ch)); /* rank 1 checked: my sources and its memory are free again */
    } else {
      OK(anycclPortWait(&p.ch));
      if (kind == 0 || kind == 3)
        for (int k = 0; k < BIG; k++) model[k] = (char)pattern(k, 3 * i);
      if (kind == 0)
        for (int k = 0; k < SMALL; k++) model[BIG - SMALL + k] = (char)pattern(k, 3 * i + 1);
      if (kind == 1 || kind == 2)
        for (int k = 0; k < SMALL; k++) model[off + k] = (char)pattern(k, 3 * i + 1);
      for (int k = 0; k < BIG; k++)
        EXPECT(b[k] == model[k], "round %d (kind %d): byte %d is %d, want %d", i, kind, k, b[k], model[k]);
      OK(anycclPortSignal(&p.ch));
    }
  }
  if (c->rank == 0) {
    /* every big put goes through the FIFO (it is over directMax); the small
     * put behind it in a kind-0 round goes direct when the proxy has already
     * finished the big one, so it counts for nothing here */
    EXPECT(getHead(&p) >= 2 + N / 2, "%llu triggers: fewer than the big puts need", (unsigned long long)getHead(&p));
    EXPECT(getHead(&p) > 8 * 10, "the FIFO of 8 wrapped only %llu times", (unsigned long long)getHead(&p) / 8);
  }
  /* exactly once: every signal was waited for, none is left over */
  EXPECT(anycclPortPoll(&p.ch) == 0, "a signal counted twice");
  if (p.ch.sem.hostInbound == NULL)
    EXPECT(p.ch.sem.inbound->value == *p.ch.sem.expected && *p.ch.sem.expected == (uint64_t)N + 1,
           "semaphore at %llu after %llu waits", (unsigned long long)p.ch.sem.inbound->value,
           (unsigned long long)*p.ch.sem.expected);
  if (pairTeardown(c, &q)) return 1;
  return pairTeardown(c, &p);
}

/* Many producers on one service, direct and proxied puts at once: 8
 * threads x 300 puts to their own words, the even ones of 200 bytes (the
 * proxy), the odd ones of 8 (directMax 64: direct whenever the service is
 * idle, which pauses between calls make frequent), through a FIFO of 64,
 * then a put of 256 KB and a signal, which must wait for it; every byte
 * checked. */
struct mixArg { struct anycclPortChannel ch; int t; ncclResult_t r; };
enum { MIX_SLOT = 256, MIX_LAST = 256 << 10 };
static void* mixProducer(void* p) {
  struct mixArg* a = p;
  for (int k = 0; k < PER && a->r == ncclSuccess; k++) {
    uint64_t off = ((uint64_t)a->t * PER + k) * MIX_SLOT;
    a->r = anycclPortPut(&a->ch, off, off, a->t % 2 ? 8 : 200);
    if (k % 4 == 0) usleep(10);
  }
  return NULL;
}
static int caseMixed(struct ctx* c) {
  struct pair p;
  const size_t slots = (size_t)PRODUCERS * PER * MIX_SLOT, bytes = slots + MIX_LAST;
  if (pairSetup(c, &p, bytes, 64, 1)) return 1;
  p.ch.directMax = 64;
  if (c->rank == 0) {
    for (size_t i = 0; i < bytes; i++) p.buf[i] = (char)pattern(i, 11);
    struct mixArg a[PRODUCERS];
    pthread_t t[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
      a[i] = (struct mixArg){p.ch, i, ncclSuccess};
      pthread_create(&t[i], NULL, mixProducer, &a[i]);
    }
    for (int i = 0; i < PRODUCERS; i++) {
      pthread_join(t[i], NULL);
      OK(a[i].r);
    }
    OK(anycclPortPut(&p.ch, slots, slots, MIX_LAST));
    OK(anycclPortSignal(&p.ch));
    uint64_t h = __atomic_load_n(p.ch.fifo.head, __ATOMIC_ACQUIRE);
    EXPECT(h >= PRODUCERS * PER / 2, "%llu triggers for %d big puts", (unsigned long long)h, PRODUCERS * PER / 2);
    fprintf(stderr, "mixed: %llu of %d calls through the FIFO\n", (unsigned long long)h, PRODUCERS * PER + 2);
  } else {
    OK(anycclPortWait(&p.ch));
    for (size_t i = slots; i < bytes; i++)
      EXPECT(p.buf[i] == (char)pattern(i, 11), "byte %zu of the last put: the signal overtook it", i - slots);
    for (int t = 0; t < PRODUCERS; t++)
      for (int k = 0; k < PER; k++) {
        size_t off = ((size_t)t * PER + k) * MIX_SLOT, n = t % 2 ? 8 : 200;
        for (size_t i = 0; i < MIX_SLOT; i++)
          EXPECT(p.buf[off + i] == (i < n ? (char)pattern(off + i, 11) : 0), "producer %d put %d byte %zu", t, k, i);
      }
  }
  return pairTeardown(c, &p);
}

static const struct { const char* name; caseFn fn; } kCases[] = {
  {"big", caseBig},
  {"order", caseOrder}, {"fifo", caseFifo}, {"sems", caseSems}, {"mems", caseMems}, {"bad", caseBad},
  {"dead", caseDead}, {"memchan", caseMemchan}, {"host", caseHost}, {"custom", caseCustom}, {"encode", caseEncode}, {"two", caseTwo},
  {"direct", caseDirect}, {"mixed", caseMixed}, {"deadlate", caseDeadLate}, {"recvfail", caseRecvFail},
};

static caseFn findCase(const char* name) {
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); i++)
    if (strcmp(kCases[i].name, name) == 0) return kCases[i].fn;
  return NULL;
}

static int runChild(const char* mode, caseFn fn, int rank, const char* hex) {
  ncclUniqueId id;
  unhexId(hex, &id);
  struct ctx cx = {NULL, rank, 1 - rank, 1, mode}, *c = &cx;
  EXPECT(cudaSetDevice(strcmp(mode, "hosts") == 0 ? 0 : rank) == cudaSuccess, "cudaSetDevice");
  OK(ncclCommInitRank(&cx.comm, 2, id, rank));
  int r = fn(&cx);
  if (fn == caseDead || fn == caseDeadLate || fn == caseRecvFail) ncclCommAbort(cx.comm);
  else ncclCommDestroy(cx.comm);
  return r;
}

int main(int argc, char** argv) {
  alarm(25); /* hard bound of every run */
  if (argc == 6 && strcmp(argv[1], "--child") == 0) {
    caseFn fn = findCase(argv[3]);
    return fn ? runChild(argv[2], fn, atoi(argv[4]), argv[5]) : 2;
  }
  caseFn fn = argc == 3 ? findCase(argv[2]) : NULL;
  if (fn == NULL) {
    fprintf(stderr, "usage: %s threads|procs|hosts CASE\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  int fails = 0;
  if (strcmp(mode, "threads") == 0) {
    if (fn == caseDead) { /* the bound under test: 1 s */
      unsetenv("ANYCCL_OP_TIMEOUT");
      setenv("ANYCCL_PORT_TIMEOUT", "1", 1);
    }
    ncclComm_t comms[2];
    if (ncclCommInitAll(comms, 2, NULL) != ncclSuccess) return 1;
    struct caseArg a[2];
    pthread_t t[2];
    for (int r = 0; r < 2; r++) {
      a[r] = (struct caseArg){{comms[r], r, 1 - r, 0, mode}, fn, 1};
      pthread_create(&t[r], NULL, caseThread, &a[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    for (int r = 0; r < 2; r++) ncclCommDestroy(comms[r]);
    fails = a[0].result + a[1].result;
  } else {
    if (fn == caseDead || fn == caseDeadLate || fn == caseRecvFail) {
      unsetenv("ANYCCL_OP_TIMEOUT");
      setenv("ANYCCL_PORT_TIMEOUT", "10", 1);
    }
    fails = forkPair(argv[0], mode, argv[2], strcmp(mode, "hosts") == 0);
  }
  if (fails) return 1;
  printf("PASS: %s %s\n", argv[2], mode);
  return 0;
}
