/* Bootstrap and socket-layer tests. One binary, one case per argument:
 *   socket threads processes commid commid6 ipv6 junk unreachable timeout mismatch abort
 * Parameters are read once per process, so each case that needs its own
 * environment sets it at the start of main, before any library call. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "socket.h"

#define CHECK(cond)                                                                    \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);                \
      fflush(stderr);                                                                  \
      _exit(1);                                                                        \
    }                                                                                  \
  } while (0)
#define CHECKOK(call)                                                                  \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) {                                                           \
      fprintf(stderr, "FAILED %s:%d: %s returned %d\n", __FILE__, __LINE__, #call, r_); \
      fflush(stderr);                                                                  \
      _exit(1);                                                                        \
    }                                                                                  \
  } while (0)

/* Mirrors the id layout in src/bootstrap/bootstrap.c (to aim junk at the root
 * and to forge ids for unreachable roots). */
struct testHandle {
  uint64_t magic;
  union ncclSocketAddress addr;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleepMs(int ms) { poll(NULL, 0, ms); }

/* A shared (across fork) counter for barrier checks. */
static int* sharedCounter;

/* ---- the workload every successful communicator runs --------------------- */

struct p2pMsg {
  int from, to, tag, seq;
  char pad[20];
};

static void exercise(struct bootstrapState* st, int rank, int n, int* counter) {
  /* all-gather of distinct data, twice, and one of size 0 */
  for (int round = 0; round < 2; round++) {
    int per = 6;
    int* all = calloc((size_t)n * per, sizeof(int));
    for (int j = 0; j < per; j++) all[rank * per + j] = rank * 1000 + j + round * 100000;
    CHECKOK(bootstrapAllGather(st, all, per * sizeof(int)));
    for (int r = 0; r < n; r++)
      for (int j = 0; j < per; j++) CHECK(all[r * per + j] == r * 1000 + j + round * 100000);
    free(all);
  }
  CHECKOK(bootstrapAllGather(st, NULL, 0));

  /* send/recv: to every peer (self included) tags 1,2,3 then tag 5 three times;
   * received in the opposite order of tags and of peers. */
  for (int p = 0; p < n; p++) {
    int tags[] = {1, 2, 3, 5, 5, 5};
    for (int i = 0; i < 6; i++) {
      struct p2pMsg m = {.from = rank, .to = p, .tag = tags[i], .seq = i};
      CHECKOK(bootstrapSend(st, p, tags[i], &m, sizeof(m)));
    }
  }
  for (int p = n - 1; p >= 0; p--) {
    int tags[] = {3, 2, 1, 5, 5, 5};
    int seqs[] = {2, 1, 0, 3, 4, 5};
    for (int i = 0; i < 6; i++) {
      struct p2pMsg m;
      memset(&m, 0, sizeof(m));
      CHECKOK(bootstrapRecv(st, p, tags[i], &m, sizeof(m)));
      CHECK(m.from == p && m.to == rank && m.tag == tags[i] && m.seq == seqs[i]);
    }
  }

  /* large messages around the ring in both directions at once: needs the
   * sender to keep draining its own incoming data */
  if (n > 1) {
    size_t big = 4 << 20;
    char* out = malloc(big);
    char* in = malloc(big);
    for (size_t i = 0; i < big; i++) out[i] = (char)(rank * 7 + i);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    CHECKOK(bootstrapSend(st, next, 77, out, (int)big));
    CHECKOK(bootstrapSend(st, prev, 78, out, (int)big));
    CHECKOK(bootstrapRecv(st, prev, 77, in, (int)big));
    for (size_t i = 0; i < big; i += 4093) CHECK(in[i] == (char)(prev * 7 + i));
    CHECKOK(bootstrapRecv(st, next, 78, in, (int)big));
    for (size_t i = 0; i < big; i += 4093) CHECK(in[i] == (char)(next * 7 + i));
    free(out);
    free(in);
  }

  /* barriers: nobody leaves round k before everybody entered it */
  for (int k = 1; k <= 3; k++) {
    __atomic_fetch_add(counter, 1, __ATOMIC_SEQ_CST);
    CHECKOK(bootstrapBarrier(st, k));
    CHECK(__atomic_load_n(counter, __ATOMIC_SEQ_CST) >= k * n);
    CHECKOK(bootstrapBarrier(st, 100 + k));
  }
}

/* ---- threads mode -------------------------------------------------------- */

struct rankArg {
  ncclUniqueId id;
  int rank, nranks;
  int selfId;   /* call bootstrapGetUniqueId in the thread (NCCL_COMM_ID) */
  int* counter;
  ncclResult_t res;
  double elapsed;
  volatile uint32_t* abortFlag;
  int noExercise;
  int holdMs;   /* stay joined (silent) this long before closing */
};

static void* rankMain(void* a) {
  struct rankArg* arg = a;
  struct bootstrapState* st = NULL;
  if (arg->selfId) CHECKOK(bootstrapGetUniqueId(&arg->id));
  double t0 = now();
  arg->res = bootstrapInit(&arg->id, arg->rank, arg->nranks, arg->abortFlag, &st);
  arg->elapsed = now() - t0;
  if (arg->res != ncclSuccess) return NULL;
  if (!arg->noExercise) exercise(st, arg->rank, arg->nranks, arg->counter);
  if (arg->holdMs) sleepMs(arg->holdMs);
  CHECKOK(bootstrapClose(st));
  return NULL;
}

/* ncomms communicators of n ranks each, all at once. */
static void runThreads(int ncomms, int n, int selfId) {
  int total = ncomms * n;
  pthread_t* th = calloc(total, sizeof(*th));
  struct rankArg* args = calloc(total, sizeof(*args));
  int* counters = calloc(ncomms, sizeof(int));
  for (int c = 0; c < ncomms; c++) {
    ncclUniqueId id;
    if (!selfId) CHECKOK(bootstrapGetUniqueId(&id));
    for (int r = 0; r < n; r++) {
      struct rankArg* a = &args[c * n + r];
      if (!selfId) a->id = id;
      a->rank = r;
      a->nranks = n;
      a->selfId = selfId;
      a->counter = &counters[c];
    }
  }
  for (int i = 0; i < total; i++) CHECK(pthread_create(&th[i], NULL, rankMain, &args[i]) == 0);
  for (int i = 0; i < total; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < total; i++) CHECK(args[i].res == ncclSuccess);
  free(th);
  free(args);
  free(counters);
}

/* ---- processes mode ------------------------------------------------------ */

/* The ranks are forked before this process makes the id (the root is a
 * thread of this process), and get it through a pipe: a child forked while
 * another thread holds an allocator lock can deadlock in malloc (ASan's
 * allocator in older runtimes). */
static void runProcesses(int n, int selfId, ncclUniqueId* sharedIds) {
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  __atomic_store_n(sharedCounter, 0, __ATOMIC_SEQ_CST);
  pid_t* pids = calloc(n, sizeof(pid_t));
  int(*pipes)[2] = calloc(n, sizeof(*pipes));
  for (int r = 0; r < n; r++) {
    CHECK(pipe(pipes[r]) == 0);
    pids[r] = fork();
    CHECK(pids[r] >= 0);
    if (pids[r] == 0) {
      alarm(25);
      struct bootstrapState* st;
      close(pipes[r][1]);
      if (selfId) {
        CHECKOK(bootstrapGetUniqueId(&id));
        if (sharedIds) sharedIds[r] = id;
      } else {
        size_t got = 0;
        while (got < sizeof(id)) {
          ssize_t k = read(pipes[r][0], (char*)&id + got, sizeof(id) - got);
          CHECK(k > 0);
          got += (size_t)k;
        }
      }
      CHECKOK(bootstrapInit(&id, r, n, NULL, &st));
      exercise(st, r, n, sharedCounter);
      CHECKOK(bootstrapClose(st));
      _exit(0);
    }
  }
  for (int r = 0; r < n; r++) close(pipes[r][0]);
  if (!selfId) CHECKOK(bootstrapGetUniqueId(&id)); /* the root lives in this process */
  for (int r = 0; r < n; r++) {
    if (!selfId) CHECK(write(pipes[r][1], &id, sizeof(id)) == (ssize_t)sizeof(id));
    close(pipes[r][1]);
  }
  for (int r = 0; r < n; r++) {
    int status;
    CHECK(waitpid(pids[r], &status, 0) == pids[r]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fprintf(stderr, "rank %d: status 0x%x\n", r, status);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  if (sharedIds)
    for (int r = 1; r < n; r++) CHECK(memcmp(&sharedIds[0], &sharedIds[r], sizeof(ncclUniqueId)) == 0);
  free(pids);
  free(pipes);
}

/* ---- helpers ------------------------------------------------------------- */

/* A local port nobody listens on (bound, then released). */
static int freePort(int family) {
  union ncclSocketAddress a;
  memset(&a, 0, sizeof(a));
  a.sa.sa_family = family;
  if (family == AF_INET) a.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  else a.sin6.sin6_addr = in6addr_loopback;
  int fd = socket(family, SOCK_STREAM, 0);
  CHECK(fd >= 0);
  CHECK(bind(fd, &a.sa, ncclSocketAddrLen(&a)) == 0);
  socklen_t len = sizeof(a);
  CHECK(getsockname(fd, &a.sa, &len) == 0);
  close(fd);
  return ncclSocketAddrPort(&a);
}

static int rawConnect(const union ncclSocketAddress* addr) {
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0);
  CHECK(connect(fd, &addr->sa, ncclSocketAddrLen(addr)) == 0);
  return fd;
}

/* Listening TCP sockets of this process, from /proc (what a port scanner would find). */
static int findListeners(union ncclSocketAddress* out, int max) {
  unsigned long inodes[4096];
  int ninodes = 0, n = 0;
  DIR* d = opendir("/proc/self/fd");
  CHECK(d != NULL);
  struct dirent* e;
  while ((e = readdir(d)) != NULL && ninodes < 4096) {
    char path[300], link[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
    ssize_t l = readlink(path, link, sizeof(link) - 1);
    if (l <= 0) continue;
    link[l] = '\0';
    unsigned long ino;
    if (sscanf(link, "socket:[%lu]", &ino) == 1) inodes[ninodes++] = ino;
  }
  closedir(d);
  const char* files[2] = {"/proc/self/net/tcp", "/proc/self/net/tcp6"};
  for (int f = 0; f < 2; f++) {
    FILE* fp = fopen(files[f], "r");
    if (fp == NULL) continue;
    char line[512];
    if (fgets(line, sizeof(line), fp) == NULL) { fclose(fp); continue; }
    while (fgets(line, sizeof(line), fp) && n < max) {
      char local[64];
      unsigned st;
      unsigned long ino;
      if (sscanf(line, " %*d: %63s %*s %x %*s %*s %*s %*s %*s %lu", local, &st, &ino) != 3) continue;
      if (st != 0x0A) continue; /* LISTEN */
      int mine = 0;
      for (int i = 0; i < ninodes; i++) mine |= inodes[i] == ino;
      if (!mine) continue;
      union ncclSocketAddress a;
      memset(&a, 0, sizeof(a));
      char* colon = strchr(local, ':');
      unsigned port = strtoul(colon + 1, NULL, 16);
      *colon = '\0';
      if (f == 0) {
        a.sin.sin_family = AF_INET;
        a.sin.sin_addr.s_addr = (uint32_t)strtoul(local, NULL, 16);
      } else {
        a.sin6.sin6_family = AF_INET6;
        for (int w = 0; w < 4; w++) {
          char word[9];
          memcpy(word, local + 8 * w, 8);
          word[8] = '\0';
          uint32_t v = (uint32_t)strtoul(word, NULL, 16);
          memcpy(&a.sin6.sin6_addr.s6_addr[4 * w], &v, 4);
        }
      }
      ncclSocketAddrSetPort(&a, port);
      out[n++] = a;
    }
    fclose(fp);
  }
  return n;
}

static int containsAddr(const union ncclSocketAddress* list, int n, const union ncclSocketAddress* a) {
  for (int i = 0; i < n; i++)
    if (ncclSocketAddrEqual(&list[i], a)) return 1;
  return 0;
}

/* Junk aimed at a listener; returns fds to keep open (stalls) in keep[]. */
static int sendJunk(const union ncclSocketAddress* addr, uint64_t goodMagic, int* keep) {
  int nkeep = 0;
  char buf[256];
  /* 1. random bytes, left open */
  int fd = rawConnect(addr);
  CHECK(getrandom(buf, sizeof(buf), 0) == sizeof(buf));
  CHECK(send(fd, buf, sizeof(buf), MSG_NOSIGNAL) == sizeof(buf));
  keep[nkeep++] = fd;
  /* 2. a well-formed hello/header with the wrong magic */
  struct { uint64_t magic; int32_t rank, kind, tag, size; union ncclSocketAddress a; } h;
  memset(&h, 0, sizeof(h));
  h.magic = goodMagic ^ 0x5a5a;
  h.rank = 0; h.kind = 1; h.tag = 3; h.size = sizeof(union ncclSocketAddress);
  fd = rawConnect(addr);
  CHECK(send(fd, &h, sizeof(h), MSG_NOSIGNAL) == sizeof(h));
  keep[nkeep++] = fd;
  /* 3. the right magic but an insane header (rank out of range, bad kind, huge size) */
  h.magic = goodMagic;
  h.rank = 1000; h.kind = 99; h.tag = 3; h.size = 0x7fffffff;
  fd = rawConnect(addr);
  CHECK(send(fd, &h, sizeof(h), MSG_NOSIGNAL) == sizeof(h));
  keep[nkeep++] = fd;
  /* 4. connect and close */
  close(rawConnect(addr));
  /* 5. half a header, then close */
  fd = rawConnect(addr);
  CHECK(send(fd, &h, 5, MSG_NOSIGNAL) == 5);
  close(fd);
  /* 6. connect and stall (nothing sent, kept open) */
  keep[nkeep++] = rawConnect(addr);
  /* 7. three bytes then stall */
  fd = rawConnect(addr);
  CHECK(send(fd, "abc", 3, MSG_NOSIGNAL) == 3);
  keep[nkeep++] = fd;
  return nkeep;
}

/* ---- cases --------------------------------------------------------------- */

static int caseSocket(void) {
  /* interface-name matching */
  CHECK(ncclSocketIfMatches("eth0", "eth"));
  CHECK(ncclSocketIfMatches("eth0", "ib,eth"));
  CHECK(!ncclSocketIfMatches("eth0", "ib,en"));
  CHECK(!ncclSocketIfMatches("eth0", "^eth"));
  CHECK(ncclSocketIfMatches("ib0", "^eth,lo"));
  CHECK(!ncclSocketIfMatches("lo", "^docker,lo"));
  CHECK(!ncclSocketIfMatches("docker0", "^docker,lo"));
  CHECK(ncclSocketIfMatches("eth0", "=eth0"));
  CHECK(!ncclSocketIfMatches("eth00", "=eth0"));
  CHECK(!ncclSocketIfMatches("eth0", "^=eth0,ib0"));
  CHECK(ncclSocketIfMatches("eth00", "^=eth0"));
  CHECK(ncclSocketIfMatches("x", NULL) && ncclSocketIfMatches("x", ""));

  /* address parsing and printing */
  union ncclSocketAddress a;
  char buf[NCCL_SOCKET_NAME_MAXLEN];
  CHECKOK(ncclSocketGetAddrFromString(&a, "127.0.0.1:4242"));
  CHECK(strcmp(ncclSocketToString(&a, buf), "127.0.0.1:4242") == 0);
  CHECKOK(ncclSocketGetAddrFromString(&a, "[::1]:80"));
  CHECK(strcmp(ncclSocketToString(&a, buf), "[::1]:80") == 0);
  CHECKOK(ncclSocketGetAddrFromString(&a, "localhost:99"));
  CHECK(ncclSocketAddrPort(&a) == 99);
  CHECK(ncclSocketGetAddrFromString(&a, "127.0.0.1") != ncclSuccess);
  CHECK(ncclSocketGetAddrFromString(&a, "127.0.0.1:0") != ncclSuccess);
  CHECK(ncclSocketGetAddrFromString(&a, "127.0.0.1:70000") != ncclSuccess);
  CHECK(ncclSocketGetAddrFromString(&a, "::1:80") != ncclSuccess);
  CHECK(ncclSocketGetAddrFromString(&a, "[::1:80") != ncclSuccess);
  CHECK(ncclSocketGetAddrFromString(&a, ":80") != ncclSuccess);

  /* interfaces */
  char names[8 * NCCL_SOCKET_IFNAME_MAXLEN];
  union ncclSocketAddress addrs[8];
  int n = ncclSocketFindInterfacesSpec("=lo", AF_INET, names, addrs, 8);
  CHECK(n == 1 && strcmp(names, "lo") == 0 && addrs[0].sa.sa_family == AF_INET);
  CHECK(strcmp(ncclSocketIpToString(&addrs[0], buf), "127.0.0.1") == 0);
  n = ncclSocketFindInterfacesSpec("^=lo", AF_UNSPEC, names, addrs, 8);
  for (int i = 0; i < n; i++) CHECK(strcmp(names + i * NCCL_SOCKET_IFNAME_MAXLEN, "lo") != 0);
  n = ncclSocketFindInterfaces(names, addrs, 8);
  CHECK(n >= 1);
  printf("default interfaces:");
  for (int i = 0; i < n; i++) printf(" %s=%s", names + i * NCCL_SOCKET_IFNAME_MAXLEN, ncclSocketIpToString(&addrs[i], buf));
  printf("\n");
  union ncclSocketAddress remote, local;
  char name[NCCL_SOCKET_IFNAME_MAXLEN];
  CHECKOK(ncclSocketGetAddrFromString(&remote, "127.0.0.5:1"));
  CHECK(ncclSocketFindInterfaceMatchSubnet(name, &local, &remote) && strcmp(name, "lo") == 0);

  /* listen / connect / accept / send / recv */
  struct ncclSocket ls, cs, ss;
  ncclSocketInit(&ls, NULL, NULL);
  CHECKOK(ncclSocketGetAddrFromString(&a, "127.0.0.1:1"));
  ncclSocketAddrSetPort(&a, 0);
  CHECKOK(ncclSocketListen(&ls, &a, 0));
  CHECK(ncclSocketAddrPort(&ls.addr) != 0);
  ncclSocketInit(&cs, NULL, NULL);
  CHECKOK(ncclSocketConnect(&cs, &ls.addr, ncclSocketDeadlineMs(2000), "test listener", NULL));
  CHECKOK(ncclSocketAccept(&ls, &ss, ncclSocketDeadlineMs(2000)));
  char msg[] = "hello, socket", got[sizeof(msg)];
  CHECKOK(ncclSocketSend(&cs, msg, sizeof(msg), ncclSocketDeadlineMs(2000)));
  CHECKOK(ncclSocketRecv(&ss, got, sizeof(got), ncclSocketDeadlineMs(2000)));
  CHECK(memcmp(msg, got, sizeof(msg)) == 0);
  /* recv with nothing coming: deadline */
  double t0 = now();
  CHECK(ncclSocketRecv(&ss, got, 1, ncclSocketDeadlineMs(200)) == ncclSystemError && ss.err == ncclSocketErrTimedOut);
  CHECK(now() - t0 < 1.0);
  /* recv with the abort flag set from another thread */
  volatile uint32_t flag = 0;
  ss.abortFlag = &flag;
  pid_t dummy = 0;
  (void)dummy;
  t0 = now();
  __atomic_store_n(&flag, 1, __ATOMIC_RELEASE);
  CHECK(ncclSocketRecv(&ss, got, 1, ncclSocketDeadlineMs(5000)) == ncclInternalError && ss.err == ncclSocketErrAborted);
  CHECK(now() - t0 < 0.5);
  ss.abortFlag = NULL;
  /* peer closes: ncclRemoteError */
  ncclSocketClose(&cs);
  CHECK(ncclSocketRecv(&ss, got, 1, ncclSocketDeadlineMs(2000)) == ncclRemoteError && ss.err == ncclSocketErrClosed);
  /* sending to a closed peer does not raise SIGPIPE */
  char chunk[65536];
  memset(chunk, 0, sizeof(chunk));
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < 64 && r == ncclSuccess; i++) r = ncclSocketSend(&ss, chunk, sizeof(chunk), ncclSocketDeadlineMs(2000));
  CHECK(r == ncclRemoteError);
  ncclSocketClose(&ss);
  ncclSocketClose(&ls);
  /* connect to a closed port: retried until the deadline, then an error */
  ncclSocketAddrSetPort(&a, freePort(AF_INET));
  ncclSocketInit(&cs, NULL, NULL);
  t0 = now();
  CHECK(ncclSocketConnect(&cs, &a, ncclSocketDeadlineMs(400), "a closed port (expected to fail)", "This is a test.") == ncclSystemError);
  double el = now() - t0;
  CHECK(el > 0.3 && el < 1.5);
  printf("socket: ok\n");
  return 0;
}

static int caseThreads(void) {
  int sizes[] = {1, 2, 3, 8};
  for (int i = 0; i < 4; i++) {
    double t0 = now();
    runThreads(1, sizes[i], 0);
    printf("threads: %d ranks ok (%.2f s)\n", sizes[i], now() - t0);
  }
  double t0 = now();
  runThreads(3, 3, 0);
  printf("threads: 3 communicators x 3 ranks at once ok (%.2f s)\n", now() - t0);
  printf("bootstrap interface: %s\n", bootstrapIfName());
  return 0;
}

static int caseProcesses(void) {
  int sizes[] = {1, 3, 4};
  for (int i = 0; i < 3; i++) {
    double t0 = now();
    runProcesses(sizes[i], 0, NULL);
    printf("processes: %d ranks ok (%.2f s)\n", sizes[i], now() - t0);
  }
  return 0;
}

static int caseCommId(int family) {
  int port = freePort(family);
  char env[64];
  snprintf(env, sizeof(env), family == AF_INET ? "127.0.0.1:%d" : "[::1]:%d", port);
  setenv("NCCL_COMM_ID", env, 1);
  if (family == AF_INET6) setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
  printf("NCCL_COMM_ID=%s\n", env);
  double t0 = now();
  runThreads(1, 4, 1);
  printf("commid: 4 threads, each with its own ncclGetUniqueId, ok (%.2f s); interface %s\n", now() - t0,
         bootstrapIfName());
  ncclUniqueId* ids = mmap(NULL, 8 * sizeof(ncclUniqueId), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(ids != MAP_FAILED);
  t0 = now();
  runProcesses(3, 1, ids);
  printf("commid: 3 processes with identical ids ok (%.2f s)\n", now() - t0);
  munmap(ids, 8 * sizeof(ncclUniqueId));
  return 0;
}

static int caseIpv6(void) {
  char names[NCCL_SOCKET_IFNAME_MAXLEN];
  union ncclSocketAddress addr;
  if (ncclSocketFindInterfacesSpec(NULL, AF_INET6, names, &addr, 1) == 0) {
    printf("ipv6: no IPv6 interface; skipped\n");
    return 0;
  }
  setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
  runThreads(1, 3, 0);
  printf("ipv6: 3 ranks ok on %s\n", bootstrapIfName());
  return 0;
}

struct slowArg {
  ncclUniqueId id;
  ncclResult_t res;
};

/* Rank 1 of 2: joins, then sends its message only after 2.5 s. */
static void* slowRank1(void* a) {
  struct slowArg* arg = a;
  struct bootstrapState* st;
  arg->res = bootstrapInit(&arg->id, 1, 2, NULL, &st);
  if (arg->res != ncclSuccess) return NULL;
  sleepMs(2500);
  int v = 4242;
  arg->res = bootstrapSend(st, 0, 1, &v, sizeof(v));
  if (arg->res == ncclSuccess) arg->res = bootstrapBarrier(st, 0);
  bootstrapClose(st);
  return NULL;
}

static int caseJunk(void) {
  int fd;
  union ncclSocketAddress before[256], after[256];
  int keep[64], nkeep = 0;
  ncclUniqueId id;
  int nbefore = findListeners(before, 256);
  CHECKOK(bootstrapGetUniqueId(&id));
  struct testHandle h;
  memcpy(&h, id.internal, sizeof(h));
  char buf[NCCL_SOCKET_NAME_MAXLEN];
  printf("root at %s\n", ncclSocketToString(&h.addr, buf));
  double t0 = now();
  nkeep += sendJunk(&h.addr, h.magic, keep + nkeep);

  /* ranks 0 and 1 start; rank 2 comes later */
  int n = 3, counter = 0;
  pthread_t th[3];
  struct rankArg args[3];
  memset(args, 0, sizeof(args));
  for (int r = 0; r < n; r++) {
    args[r].id = id;
    args[r].rank = r;
    args[r].nranks = n;
    args[r].counter = &counter;
  }
  for (int r = 0; r < 2; r++) CHECK(pthread_create(&th[r], NULL, rankMain, &args[r]) == 0);
  /* find the two rank listeners (new, and not the root) */
  int nfound = 0;
  union ncclSocketAddress ranks[8];
  for (int tries = 0; tries < 100 && nfound < 2; tries++) {
    sleepMs(20);
    int nafter = findListeners(after, 256);
    nfound = 0;
    for (int i = 0; i < nafter && nfound < 8; i++)
      if (!containsAddr(before, nbefore, &after[i]) && !ncclSocketAddrEqual(&after[i], &h.addr)) ranks[nfound++] = after[i];
  }
  CHECK(nfound == 2);
  for (int i = 0; i < nfound; i++) {
    printf("junk to rank listener %s\n", ncclSocketToString(&ranks[i], buf));
    nkeep += sendJunk(&ranks[i], h.magic, keep + nkeep);
  }
  /* more junk at the root while ranks wait there */
  nkeep += sendJunk(&h.addr, h.magic, keep + nkeep);
  CHECK(pthread_create(&th[2], NULL, rankMain, &args[2]) == 0);
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < n; r++) CHECK(args[r].res == ncclSuccess);
  double el = now() - t0;
  printf("junk: init and exchange ok despite %d junk connections (%.2f s)\n", nkeep + 6, el);
  CHECK(el < 6.0);
  for (int i = 0; i < nkeep; i++) close(keep[i]);
  nkeep = 0;

  /* Stalled connections time out (2 s) while a rank waits for a slow peer. */
  CHECKOK(bootstrapGetUniqueId(&id));
  nbefore = findListeners(before, 256); /* includes the new root, which leaves once init is done */
  struct slowArg sa;
  memset(&sa, 0, sizeof(sa));
  sa.id = id;
  pthread_t slow;
  CHECK(pthread_create(&slow, NULL, slowRank1, &sa) == 0);
  struct bootstrapState* st;
  CHECKOK(bootstrapInit(&id, 0, 2, NULL, &st));
  int nafter = findListeners(after, 256);
  for (int i = 0; i < nafter; i++) {
    if (containsAddr(before, nbefore, &after[i])) continue;
    keep[nkeep++] = rawConnect(&after[i]); /* connect and stall */
    fd = rawConnect(&after[i]);
    CHECK(send(fd, "xyz", 3, MSG_NOSIGNAL) == 3); /* a partial header, then stall */
    keep[nkeep++] = fd;
  }
  CHECK(nkeep >= 4);
  int v = 0;
  t0 = now();
  CHECKOK(bootstrapRecv(st, 1, 1, &v, sizeof(v)));
  CHECK(v == 4242);
  CHECKOK(bootstrapBarrier(st, 0));
  pthread_join(slow, NULL);
  CHECK(sa.res == ncclSuccess);
  CHECKOK(bootstrapClose(st));
  for (int i = 0; i < nkeep; i++) {
    /* the bootstrap has dropped them: reading gives EOF (or a reset) */
    char c;
    struct pollfd p = {.fd = keep[i], .events = POLLIN};
    CHECK(poll(&p, 1, 1000) == 1);
    CHECK(recv(keep[i], &c, 1, 0) <= 0);
    close(keep[i]);
  }
  printf("junk: stalled connections dropped while waiting for a slow peer (%.2f s)\n", now() - t0);
  return 0;
}

static int caseUnreachable(void) {
  setenv("ANYCCL_BOOTSTRAP_TIMEOUT", "2", 1);
  struct testHandle h;
  memset(&h, 0, sizeof(h));
  h.magic = 0x1234567890abcdefULL;
  CHECKOK(ncclSocketGetAddrFromString(&h.addr, "127.0.0.1:1"));
  ncclSocketAddrSetPort(&h.addr, freePort(AF_INET));
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  memcpy(id.internal, &h, sizeof(h));
  struct bootstrapState* st = (struct bootstrapState*)0x1;
  double t0 = now();
  ncclResult_t r = bootstrapInit(&id, 1, 2, NULL, &st);
  double el = now() - t0;
  printf("unreachable: result %d after %.2f s\n", r, el);
  CHECK(r == ncclSystemError || r == ncclRemoteError);
  CHECK(st == NULL);
  CHECK(el >= 1.5 && el < 5.0);
  return 0;
}

static int caseTimeout(void) {
  setenv("ANYCCL_BOOTSTRAP_TIMEOUT", "2", 1);
  /* a rank whose peers never come: init fails within the bound */
  ncclUniqueId id;
  CHECKOK(bootstrapGetUniqueId(&id));
  struct bootstrapState* st;
  double t0 = now();
  ncclResult_t r = bootstrapInit(&id, 0, 2, NULL, &st);
  double el = now() - t0;
  printf("timeout: init alone: result %d after %.2f s\n", r, el);
  CHECK(r != ncclSuccess && el >= 1.5 && el < 5.0);
  /* a receive that nobody answers fails within the bound */
  CHECKOK(bootstrapGetUniqueId(&id));
  struct rankArg args[2];
  pthread_t th[2];
  memset(args, 0, sizeof(args));
  int counter = 0;
  for (int i = 0; i < 2; i++) {
    args[i].id = id; args[i].rank = i; args[i].nranks = 2; args[i].counter = &counter; args[i].noExercise = 1;
  }
  /* rank 1 joins in a thread and stays silent; rank 0 waits for a message */
  args[1].holdMs = 3500;
  CHECK(pthread_create(&th[1], NULL, rankMain, &args[1]) == 0);
  CHECKOK(bootstrapInit(&id, 0, 2, NULL, &st));
  int x;
  t0 = now();
  r = bootstrapRecv(st, 1, 9, &x, sizeof(x));
  el = now() - t0;
  printf("timeout: recv: result %d after %.2f s\n", r, el);
  CHECK(r == ncclSystemError && el >= 1.5 && el < 5.0);
  /* once rank 1 has closed its state, a receive from it fails at once */
  pthread_join(th[1], NULL);
  CHECK(args[1].res == ncclSuccess);
  t0 = now();
  r = bootstrapRecv(st, 1, 10, &x, sizeof(x));
  el = now() - t0;
  printf("timeout: recv from a closed peer: result %d after %.2f s\n", r, el);
  CHECK(r == ncclRemoteError && el < 0.5);
  CHECKOK(bootstrapClose(st));
  return 0;
}

static int caseMismatch(void) {
  setenv("ANYCCL_BOOTSTRAP_TIMEOUT", "5", 1);
  for (int variant = 0; variant < 2; variant++) {
    ncclUniqueId id;
    CHECKOK(bootstrapGetUniqueId(&id));
    struct rankArg args[2];
    pthread_t th[2];
    memset(args, 0, sizeof(args));
    int counter = 0;
    for (int i = 0; i < 2; i++) {
      args[i].id = id; args[i].counter = &counter;
    }
    if (variant == 0) { /* nranks differ */
      args[0].rank = 0; args[0].nranks = 2;
      args[1].rank = 1; args[1].nranks = 3;
    } else { /* the same rank twice */
      args[0].rank = 0; args[0].nranks = 2;
      args[1].rank = 0; args[1].nranks = 2;
    }
    double t0 = now();
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, rankMain, &args[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    printf("mismatch %s: results %d %d (%.2f s)\n", variant ? "duplicate rank" : "nranks", args[0].res, args[1].res,
           now() - t0);
    CHECK(args[0].res == ncclInvalidUsage && args[1].res == ncclInvalidUsage);
    CHECK(now() - t0 < 3.0);
  }
  return 0;
}

struct abortArg {
  struct bootstrapState* st;
  ncclResult_t res;
  double end;
};

static void* blockedRecv(void* a) {
  struct abortArg* arg = a;
  int x;
  arg->res = bootstrapRecv(arg->st, 1, 42, &x, sizeof(x));
  arg->end = now();
  return NULL;
}

static void* setFlagLater(void* a) {
  sleepMs(300);
  __atomic_store_n((volatile uint32_t*)a, 1, __ATOMIC_RELEASE);
  return NULL;
}

static int caseAbort(void) {
  /* default timeout (30 s): only the abort can end these waits quickly */
  /* 1. init waiting at the root for a rank that never comes */
  ncclUniqueId id;
  CHECKOK(bootstrapGetUniqueId(&id));
  volatile uint32_t flag = 0;
  pthread_t setter;
  struct bootstrapState* st;
  CHECK(pthread_create(&setter, NULL, setFlagLater, (void*)&flag) == 0);
  double t0 = now();
  ncclResult_t r = bootstrapInit(&id, 0, 2, &flag, &st);
  double el = now() - t0;
  pthread_join(setter, NULL);
  printf("abort: init waiting for peers: result %d after %.2f s\n", r, el);
  CHECK(r != ncclSuccess && el < 1.0);

  /* 2. init retrying a connection to an unreachable root */
  struct testHandle h;
  memset(&h, 0, sizeof(h));
  h.magic = 42;
  CHECKOK(ncclSocketGetAddrFromString(&h.addr, "127.0.0.1:1"));
  ncclSocketAddrSetPort(&h.addr, freePort(AF_INET));
  memset(&id, 0, sizeof(id));
  memcpy(id.internal, &h, sizeof(h));
  __atomic_store_n(&flag, 0, __ATOMIC_RELEASE);
  CHECK(pthread_create(&setter, NULL, setFlagLater, (void*)&flag) == 0);
  t0 = now();
  r = bootstrapInit(&id, 0, 2, &flag, &st);
  el = now() - t0;
  pthread_join(setter, NULL);
  printf("abort: init connecting: result %d after %.2f s\n", r, el);
  CHECK(r != ncclSuccess && el < 1.0);

  /* 3. bootstrapAbort ends a receive blocked in another thread */
  CHECKOK(bootstrapGetUniqueId(&id));
  struct rankArg a1;
  memset(&a1, 0, sizeof(a1));
  int counter = 0;
  a1.id = id; a1.rank = 1; a1.nranks = 2; a1.counter = &counter; a1.noExercise = 1;
  pthread_t th1, th0;
  CHECK(pthread_create(&th1, NULL, rankMain, &a1) == 0);
  CHECKOK(bootstrapInit(&id, 0, 2, NULL, &st));
  pthread_join(th1, NULL);
  CHECK(a1.res == ncclSuccess);
  struct abortArg aa = {.st = st};
  CHECK(pthread_create(&th0, NULL, blockedRecv, &aa) == 0);
  sleepMs(300);
  t0 = now();
  CHECKOK(bootstrapAbort(st));
  double abortTime = now() - t0;
  pthread_join(th0, NULL);
  printf("abort: blocked recv: result %d, returned %.3f s after bootstrapAbort (abort took %.3f s)\n", aa.res,
         aa.end - t0, abortTime);
  CHECK(aa.res != ncclSuccess && aa.end - t0 < 0.5 && abortTime < 0.5);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: %s socket|threads|processes|commid|commid6|ipv6|junk|unreachable|timeout|mismatch|abort\n", argv[0]);
    return 2;
  }
  sharedCounter = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(sharedCounter != MAP_FAILED);
  alarm(60);
  const char* c = argv[1];
  if (!strcmp(c, "socket")) return caseSocket();
  if (!strcmp(c, "threads") && argc > 2) { /* ad hoc: one communicator of N ranks */
    double t0 = now();
    runThreads(1, atoi(argv[2]), 0);
    printf("threads: %s ranks ok (%.2f s)\n", argv[2], now() - t0);
    return 0;
  }
  if (!strcmp(c, "threads")) return caseThreads();
  if (!strcmp(c, "processes")) return caseProcesses();
  if (!strcmp(c, "commid")) return caseCommId(AF_INET);
  if (!strcmp(c, "commid6")) return caseCommId(AF_INET6);
  if (!strcmp(c, "ipv6")) return caseIpv6();
  if (!strcmp(c, "junk")) return caseJunk();
  if (!strcmp(c, "unreachable")) return caseUnreachable();
  if (!strcmp(c, "timeout")) return caseTimeout();
  if (!strcmp(c, "mismatch")) return caseMismatch();
  if (!strcmp(c, "abort")) return caseAbort();
  fprintf(stderr, "unknown case %s\n", c);
  return 2;
}
