/* Randomized differential test of every collective against a host reference.
 *
 *   coll_test threads N      one thread per rank: cudaSetDevice(rank), ncclCommInitRank
 *   coll_test all N          one thread drives every rank: ncclCommInitAll, then
 *                            ncclGroupStart / a call on every comm / ncclGroupEnd
 *   coll_test procs N        one process per rank (fork + exec of this binary);
 *                            rank 0 makes the unique id and sends it through pipes
 *   coll_test group N        ncclCommSplit (even/odd with reversed keys,
 *                            NCCL_SPLIT_NOCOLOR, a nested split) and groups that mix
 *                            collectives and send/recv on several comms (threads)
 *   coll_test nonblocking N  ncclConfig_t.blocking = 0: init, split, collectives,
 *                            finalize, each polled with ncclCommGetAsyncError
 *   coll_test hypercube N    nested groups (one outer group, one per step and rank)
 *                            whose later sends carry earlier receives: an all-gather
 *
 * Every run does the whole matrix (collective x type x op, both premulsum
 * residences) at small counts (0, 1, 7, ...), in a shuffled order and partly
 * in groups of up to three, plus a random set of medium (4 KB..300 KB),
 * unaligned (~1 MB, odd counts) and large (~4 MiB) trials, with random roots,
 * in-place/out-of-place, NULL buffers for non-roots and misaligned offsets.
 * coll_common.h says how inputs, tolerances and poisoning work.
 *
 * Environment (of the test, not of the library):
 *   ANYCCL_TEST_SEED       seed (default fixed; printed at start)
 *   ANYCCL_TEST_MEDIUM, ANYCCL_TEST_UNALIGNED, ANYCCL_TEST_LARGE
 *                          number of extra trials of each size class
 *   ANYCCL_TEST_MATRIX     0 skips the small-count matrix
 *   ANYCCL_TEST_HOSTS      procs: put rank r on virtual host r % K (NCCL_HOSTID)
 *   ANYCCL_TEST_VERBOSE    1 prints every call before it is issued
 *   ANYCCL_TEST_ONLY       run only the trial with this id (as printed)
 *   ANYCCL_TEST_RANGE      FROM:TO, run only plan positions FROM..TO-1 (the order
 *                          ANYCCL_TEST_VERBOSE prints; a batch cut at TO stays a
 *                          group of what is left): bisect a failing sequence
 *   ANYCCL_TEST_TIMEOUT    seconds before the watchdog fails the run (default 100)
 *   ANYCCL_TEST_CORRUPT    result | guard | send: corrupt one byte on purpose
 * Exit status: 0 pass, 1 mismatches, 2 a call failed, 3 timeout.
 *
 * Only nccl.h and cuda_runtime.h are used: this file builds with
 *   cc coll_test.c $(pkg-config --cflags --libs anyccl-cpu anyccl)
 */
#include "coll_common.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define DEFAULT_SEED 0x20250601ULL
#define MAX_RANKS 64

static uint64_t gSeed;

/* ---- the plan: the same list of trials on every rank --------------------- */
typedef struct {
  trial_t* trials;
  int ntrials;
  int* batch; /* batch[i]: number of trials in the batch starting at i (0 inside a batch) */
} plan_t;

static void buildPlan(plan_t* p, uint64_t seed, int n) {
  int matrix = (int)envU64("ANYCCL_TEST_MATRIX", 1);
  int extra[3] = {(int)envU64("ANYCCL_TEST_MEDIUM", 24), (int)envU64("ANYCCL_TEST_UNALIGNED", 3),
                  (int)envU64("ANYCCL_TEST_LARGE", 3)};
  int cap = NFUNCS * NTYPES * NOPS + extra[0] + extra[1] + extra[2];
  p->trials = calloc(cap, sizeof(trial_t));
  p->batch = calloc(cap, sizeof(int));
  int k = 0;
  rng_t r = rseed(seed, 0xe7a5ULL + n);
  if (matrix)
    for (int f = 0; f < NFUNCS; f++) {
      /* counts 0, 1 and 7 go to three random combinations of each collective */
      int m = NTYPES * (isReduceF(f) ? NOPS : 1), special[3];
      for (int i = 0; i < 3; i++) {
        special[i] = (int)rbelow(&r, m);
        for (int j = 0; j < i; j++)
          if (special[j] == special[i]) special[i] = (special[i] + 1) % m, j = -1;
      }
      for (int ty = 0, c = 0; ty < NTYPES; ty++)
        for (int op = 0; op < (isReduceF(f) ? NOPS : 1); op++, c++) {
          p->trials[k] = makeTrial(seed, k, n, f, ty, op, CC_SMALL);
          for (int i = 0; i < 3; i++)
            if (c == special[i]) p->trials[k].count = (size_t[]){0, 1, 7}[i];
          k++;
        }
    }
  for (int cls = 0; cls < 3; cls++)
    for (int i = 0; i < extra[cls]; i++) {
      int f = (int)rbelow(&r, NFUNCS), ty = (int)rbelow(&r, NTYPES), op = (int)rbelow(&r, NOPS);
      p->trials[k] = makeTrial(seed, k, n, f, ty, op, CC_MEDIUM + cls);
      k++;
    }
  for (int i = k - 1; i > 0; i--) { /* shuffle, keeping ids as made */
    int j = (int)rbelow(&r, i + 1);
    trial_t tmp = p->trials[i];
    p->trials[i] = p->trials[j];
    p->trials[j] = tmp;
  }
  for (int i = 0; i < k;) {
    int len = rbelow(&r, 4) == 0 ? 2 + (int)rbelow(&r, 2) : 1;
    if (i + len > k) len = k - i;
    p->batch[i] = len;
    i += len;
  }
  p->ntrials = k;
  const char* only = getenv("ANYCCL_TEST_ONLY"); /* rerun one trial: its id */
  if (only && *only) {
    int id = atoi(only), m = 0;
    for (int i = 0; i < k; i++)
      if (p->trials[i].id == id) p->trials[m++] = p->trials[i];
    for (int i = 0; i < m; i++) p->batch[i] = 1;
    p->ntrials = m;
  }
  const char* range = getenv("ANYCCL_TEST_RANGE"); /* plan positions [from, to): bisect a sequence */
  if (range && *range) {
    int from = 0, to = p->ntrials;
    if (only && *only) {
      fprintf(stderr, "ANYCCL_TEST_ONLY and ANYCCL_TEST_RANGE: set one of them\n");
      exit(2);
    }
    if (sscanf(range, "%d:%d", &from, &to) != 2 || from < 0 || to > p->ntrials || from >= to) {
      fprintf(stderr, "ANYCCL_TEST_RANGE=%s: want FROM:TO with 0 <= FROM < TO <= %d\n", range, p->ntrials);
      exit(2);
    }
    while (from > 0 && p->batch[from] == 0) from--; /* whole batches: start at one's head */
    int m = 0;
    for (int i = from; i < to; i++, m++) {
      p->trials[m] = p->trials[i];
      p->batch[m] = p->batch[i] > to - i ? to - i : p->batch[i];
    }
    p->ntrials = m;
  }
}

/* Run the plan on the ranks this thread drives (1, or all of them). */
static void freePlan(plan_t* p) {
  free(p->trials);
  free(p->batch);
  p->trials = NULL;
  p->batch = NULL;
}

static long runPlan(ctx_t** ctxs, int nctx, const plan_t* p) {
  long bad = 0;
  item_t* items = calloc((size_t)nctx * 3, sizeof(item_t));
  for (int i = 0; i < p->ntrials; i += p->batch[i]) {
    int len = p->batch[i], k = 0;
    for (int b = 0; b < len; b++)
      for (int c = 0; c < nctx; c++) itemPrepare(&items[k++], ctxs[c], &p->trials[i + b]);
    bad += runItems(items, k, nctx > 1 || len > 1);
  }
  free(items);
  return bad;
}

/* ---- watchdog: a hang fails with a message, not a CI stall ---------------- */
static ctx_t* watched[MAX_RANKS * 8];
static int nwatched;
static pthread_mutex_t watchLock = PTHREAD_MUTEX_INITIALIZER;

static void watch(ctx_t* c) {
  pthread_mutex_lock(&watchLock);
  if (nwatched < (int)(sizeof(watched) / sizeof(watched[0]))) watched[nwatched++] = c;
  pthread_mutex_unlock(&watchLock);
}

static void* watchdog(void* arg) {
  unsigned secs = (unsigned)(uintptr_t)arg;
  while (secs) secs = sleep(secs);
  printf("TIMEOUT [pid %d]: still running after %llu s (ANYCCL_TEST_TIMEOUT); seed 0x%llx\n", (int)getpid(),
         (unsigned long long)envU64("ANYCCL_TEST_TIMEOUT", 100), (unsigned long long)gSeed);
  for (int i = 0; i < nwatched; i++) {
    char d[160] = "";
    if (watched[i]->curT) trialDesc((const trial_t*)watched[i]->curT, d, sizeof(d));
    printf("  %s rank %d/%d: last issued %s\n", watched[i]->name, watched[i]->rank, watched[i]->nranks, d);
  }
  fflush(stdout);
  _exit(3);
}

static void startWatchdog(void) {
  pthread_t th;
  uintptr_t secs = envU64("ANYCCL_TEST_TIMEOUT", 100);
  if (pthread_create(&th, NULL, watchdog, (void*)secs) == 0) pthread_detach(th);
}

/* ---- one rank with its own comm (threads and processes) ------------------- */
typedef struct {
  int rank, n;
  ncclUniqueId id;
  const plan_t* plan;
  ctx_t ctx;
  long bad;
} rankArg_t;

static void ctxInit(ctx_t* c, const char* name, ncclComm_t comm, int dev, int nonblocking) {
  memset(c, 0, sizeof(*c));
  snprintf(c->name, sizeof(c->name), "%s", name);
  c->comm = comm;
  c->dev = dev;
  c->nonblocking = nonblocking;
  c->curTrial = -1;
  NCCLOK(ncclCommCount(comm, &c->nranks));
  NCCLOK(ncclCommUserRank(comm, &c->rank));
  int cd = -1;
  NCCLOK(ncclCommCuDevice(comm, &cd));
  if (cd != dev) die("%s: ncclCommCuDevice = %d, expected %d", name, cd, dev);
  CUDAOK(cudaSetDevice(dev));
  CUDAOK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  CUDAOK(cudaStreamCreate(&c->stream2));
  watch(c);
}

static void ctxFree(ctx_t* c, int finalize) {
  CUDAOK(cudaSetDevice(c->dev));
  CUDAOK(cudaStreamSynchronize(c->stream));
  CUDAOK(cudaStreamDestroy(c->stream));
  CUDAOK(cudaStreamDestroy(c->stream2));
  if (finalize) {
    ncclResult_t res = ncclCommFinalize(c->comm);
    if (res != ncclSuccess && !(res == ncclInProgress && c->nonblocking))
      die("%s rank %d: ncclCommFinalize -> %d", c->name, c->rank, res);
    if (c->nonblocking) waitComm(c, "ncclCommFinalize");
  }
  NCCLOK(ncclCommDestroy(c->comm));
  c->comm = NULL;
}

static void* rankMain(void* arg) {
  rankArg_t* a = arg;
  ncclComm_t comm;
  CUDAOK(cudaSetDevice(a->rank));
  NCCLOK(ncclCommInitRank(&comm, a->n, a->id, a->rank));
  ctxInit(&a->ctx, "world", comm, a->rank, 0);
  if (a->ctx.rank != a->rank || a->ctx.nranks != a->n)
    die("rank %d: comm says rank %d of %d", a->rank, a->ctx.rank, a->ctx.nranks);
  ctx_t* c = &a->ctx;
  a->bad = runPlan(&c, 1, a->plan);
  ctxFree(c, 1);
  return NULL;
}

static long modeThreads(int n, const plan_t* plan) {
  rankArg_t* args = calloc(n, sizeof(*args));
  pthread_t* th = calloc(n, sizeof(*th));
  ncclUniqueId id;
  NCCLOK(ncclGetUniqueId(&id));
  for (int r = 0; r < n; r++) {
    args[r] = (rankArg_t){.rank = r, .n = n, .id = id, .plan = plan};
    if (pthread_create(&th[r], NULL, rankMain, &args[r]) != 0) die("pthread_create");
  }
  long bad = 0;
  for (int r = 0; r < n; r++) {
    pthread_join(th[r], NULL);
    bad += args[r].bad;
  }
  free(args);
  free(th);
  return bad;
}

static long modeAll(int n, const plan_t* plan) {
  ncclComm_t comms[MAX_RANKS];
  ctx_t ctxs[MAX_RANKS];
  ctx_t* cp[MAX_RANKS];
  int devs[MAX_RANKS] = {0};
  for (int r = 0; r < n; r++) devs[r] = n - 1 - r; /* rank r on device n-1-r */
  NCCLOK(ncclCommInitAll(comms, n, devs));
  for (int r = 0; r < n; r++) {
    ctxInit(&ctxs[r], "world", comms[r], devs[r], 0);
    if (ctxs[r].rank != r || ctxs[r].nranks != n) die("ncclCommInitAll: comm %d says rank %d of %d", r, ctxs[r].rank, ctxs[r].nranks);
    cp[r] = &ctxs[r];
  }
  long bad = runPlan(cp, n, plan);
  for (int r = 0; r < n; r++) ctxFree(&ctxs[r], 0);
  return bad;
}

/* ---- processes ----------------------------------------------------------- */
static int childMain(int r, int n, const char* fds, const plan_t* plan) {
  rankArg_t a = {.rank = r, .n = n, .plan = plan};
  int hosts = (int)envU64("ANYCCL_TEST_HOSTS", 0);
  if (hosts > 0) { /* virtual hosts: rank r on host r % hosts, so ring neighbours talk over the network */
    char h[32];
    snprintf(h, sizeof(h), "testhost%d", r % hosts);
    setenv("NCCL_HOSTID", h, 1);
  }
  if (r == 0) {
    NCCLOK(ncclGetUniqueId(&a.id));
    char* list = strdup(strcmp(fds, "-") == 0 ? "" : fds);
    for (char* tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
      int fd = atoi(tok);
      if (write(fd, &a.id, sizeof(a.id)) != (ssize_t)sizeof(a.id)) die("rank 0: writing the unique id to a pipe");
      close(fd);
    }
    free(list);
  } else {
    int fd = atoi(fds);
    size_t got = 0;
    while (got < sizeof(a.id)) {
      ssize_t k = read(fd, (char*)&a.id + got, sizeof(a.id) - got);
      if (k <= 0) die("rank %d: reading the unique id from the pipe", r);
      got += (size_t)k;
    }
    close(fd);
  }
  rankMain(&a);
  return exitStatus(a.bad);
}

static long modeProcs(int n) {
  int pipes[MAX_RANKS][2];
  pid_t pids[MAX_RANKS];
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) die("readlink /proc/self/exe");
  exe[len] = '\0';
  for (int r = 1; r < n; r++)
    if (pipe(pipes[r]) != 0) die("pipe");
  fflush(stdout);
  for (int r = 0; r < n; r++) {
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      char fds[MAX_RANKS * 12] = "", rs[16], ns[16], seed[32];
      for (int q = 1; q < n; q++) {
        if (r == 0) {
          close(pipes[q][0]);
          snprintf(fds + strlen(fds), sizeof(fds) - strlen(fds), "%s%d", q > 1 ? "," : "", pipes[q][1]);
        } else {
          close(pipes[q][1]);
          if (q == r) snprintf(fds, sizeof(fds), "%d", pipes[q][0]);
          else close(pipes[q][0]);
        }
      }
      snprintf(rs, sizeof(rs), "%d", r);
      snprintf(ns, sizeof(ns), "%d", n);
      snprintf(seed, sizeof(seed), "0x%llx", (unsigned long long)gSeed);
      execl(exe, exe, "proc-rank", rs, ns, fds[0] ? fds : "-", seed, (char*)NULL);
      die("exec %s", exe);
    }
    pids[r] = pid;
  }
  for (int r = 1; r < n; r++) {
    close(pipes[r][0]);
    close(pipes[r][1]);
  }
  long bad = 0;
  int left = n;
  double deadline = nowSec() + (double)envU64("ANYCCL_TEST_TIMEOUT", 100) + 5;
  while (left > 0) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid == 0) {
      if (nowSec() > deadline) {
        say("TIMEOUT: children still running; killing them\n");
        for (int r = 0; r < n; r++)
          if (pids[r] > 0) kill(pids[r], SIGKILL);
        return bad + 1000;
      }
      usleep(20000);
      continue;
    }
    if (pid < 0) die("waitpid");
    int r = 0;
    while (r < n && pids[r] != pid) r++;
    if (r == n) continue;
    pids[r] = -1;
    left--;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 1) {
      say("rank %d (pid %d) found mismatches\n", r, (int)pid);
      bad++;
      continue;
    }
    say("rank %d (pid %d) failed (%s %d); killing the other ranks\n", r, (int)pid,
        WIFEXITED(st) ? "exit status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    for (int q = 0; q < n; q++)
      if (pids[q] > 0) kill(pids[q], SIGKILL);
    bad += 1000;
  }
  return bad;
}

/* ---- splits and groups over several communicators ------------------------- */
typedef struct {
  int rank, n;
  ncclUniqueId id;
  int nonblocking;
  long bad;
  int ntrials;
} groupArg_t;

static ncclComm_t splitChecked(ncclComm_t parent, int color, int key, int wantRank, int wantSize, ncclConfig_t* cfg,
                               const char* what) {
  ncclComm_t child = (ncclComm_t)(uintptr_t)0x1;
  ncclResult_t res = ncclCommSplit(parent, color, key, &child, cfg);
  if (res != ncclSuccess && !(res == ncclInProgress && cfg != NULL))
    die("%s: ncclCommSplit(color %d, key %d) -> %s (%d): %s", what, color, key, ncclGetErrorString(res), res,
        ncclGetLastError(parent));
  if (color == NCCL_SPLIT_NOCOLOR) {
    if (child != NULL) die("%s: ncclCommSplit with NCCL_SPLIT_NOCOLOR gave a comm %p, not NULL", what, (void*)child);
    return NULL;
  }
  if (child == NULL) die("%s: ncclCommSplit(color %d) gave NULL", what, color);
  if (cfg != NULL) {
    ctx_t tmp = {.comm = child, .nonblocking = 1};
    snprintf(tmp.name, sizeof(tmp.name), "%s", what);
    waitComm(&tmp, "ncclCommSplit");
  }
  int r = -1, s = -1;
  NCCLOK(ncclCommUserRank(child, &r));
  NCCLOK(ncclCommCount(child, &s));
  if (r != wantRank || s != wantSize)
    die("%s: split(color %d, key %d) gave rank %d of %d, expected %d of %d", what, color, key, r, s, wantRank, wantSize);
  return child;
}

/* The trials one comm runs in batch b: the same on all its members. */
static int commTrials(uint64_t seed, int b, int commId, int n, trial_t* out, int maxT) {
  rng_t r = rseed(seed ^ 0x6e6f75ULL, (uint64_t)b * 131 + commId);
  int k = 1 + (int)rbelow(&r, maxT);
  for (int i = 0; i < k; i++) {
    int f = (int)rbelow(&r, NFUNCS), ty = (int)rbelow(&r, NTYPES), op = (int)rbelow(&r, NOPS);
    int cls = rbelow(&r, 5) == 0 ? CC_MEDIUM : CC_SMALL;
    out[i] = makeTrial(seed ^ ((uint64_t)commId << 40), b * 16 + i, n, f, ty, op, cls);
  }
  return k;
}

static void* groupMain(void* arg) {
  groupArg_t* a = arg;
  int r = a->rank, n = a->n;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclConfig_t* cfgp = NULL;
  ncclComm_t world;
  CUDAOK(cudaSetDevice(r));
  if (a->nonblocking) {
    cfg.blocking = 0;
    cfgp = &cfg;
    ncclResult_t res = ncclCommInitRankConfig(&world, n, a->id, r, &cfg);
    if (res != ncclSuccess && res != ncclInProgress)
      die("rank %d: nonblocking ncclCommInitRankConfig -> %s (%d)", r, ncclGetErrorString(res), res);
    ctx_t tmp = {.comm = world, .nonblocking = 1, .rank = r};
    snprintf(tmp.name, sizeof(tmp.name), "world");
    waitComm(&tmp, "ncclCommInitRankConfig");
  } else {
    NCCLOK(ncclCommInitRank(&world, n, a->id, r));
  }

  /* A: even/odd, keys reversing the order; B: rank 0 out, colors r%3;
   * C: everyone, equal keys (ties keep the parent order); D: a split of A. */
  int sizeA = 0, rankA = 0, sizeB = 0, rankB = 0;
  for (int q = 0; q < n; q++) {
    if (q % 2 == r % 2) {
      sizeA++;
      rankA += q > r;
    }
    if (q != 0 && r != 0 && q % 3 == r % 3) {
      sizeB++;
      rankB += q < r;
    }
  }
  ncclComm_t ca = splitChecked(world, r % 2, -r, rankA, sizeA, cfgp, "split A");
  ncclComm_t cb = splitChecked(world, r == 0 ? NCCL_SPLIT_NOCOLOR : r % 3, r, rankB, sizeB, cfgp, "split B");
  ncclComm_t cc = splitChecked(world, 7, 0, r, n, cfgp, "split C");
  ncclComm_t cd = splitChecked(ca, 0, -rankA, sizeA - 1 - rankA, sizeA, cfgp, "split D (of A)");

  ctx_t ctxs[5];
  int ids[5], nc = 0;
  struct {
    ncclComm_t c;
    const char* name;
    int id;
  } all[5] = {{world, "world", 0}, {ca, "A", 16 + r % 2}, {cb, "B", 32 + r % 3}, {cc, "C", 48}, {cd, "D", 64 + r % 2}};
  for (int i = 0; i < 5; i++)
    if (all[i].c) {
      ctxInit(&ctxs[nc], all[i].name, all[i].c, r, a->nonblocking);
      ids[nc++] = all[i].id;
    }

  /* Batches: each comm gets 1..3 random trials; all of a rank's trials on all
   * its comms go into one group. */
  int nbatches = (int)envU64("ANYCCL_TEST_GROUP_BATCHES", a->nonblocking ? 12 : 40);
  trial_t trials[5][3];
  item_t items[5 * 3];
  for (int b = 0; b < nbatches; b++) {
    int k = 0;
    for (int c = 0; c < nc; c++) {
      int nt = commTrials(gSeed, b, ids[c], ctxs[c].nranks, trials[c], 3);
      for (int i = 0; i < nt; i++) itemPrepare(&items[k++], &ctxs[c], &trials[c][i]);
    }
    a->ntrials += k;
    a->bad += runItems(items, k, 1);
  }
  /* Then every collective once on each comm, outside groups. */
  for (int c = 0; c < nc; c++)
    for (int f = 0; f < NFUNCS; f++) {
      rng_t g = rseed(gSeed, (uint64_t)ids[c] * 100 + f);
      trial_t t = makeTrial(gSeed ^ 0x77, 1000 + f, ctxs[c].nranks, f, (int)rbelow(&g, NTYPES), (int)rbelow(&g, NOPS),
                            CC_SMALL);
      itemPrepare(&items[0], &ctxs[c], &t);
      a->ntrials++;
      a->bad += runItems(items, 1, 0);
    }
  for (int c = nc - 1; c >= 0; c--) ctxFree(&ctxs[c], 1);
  return NULL;
}

static long modeGroup(int n, int nonblocking, int* ntrials) {
  groupArg_t* args = calloc(n, sizeof(*args));
  pthread_t* th = calloc(n, sizeof(*th));
  ncclUniqueId id;
  NCCLOK(ncclGetUniqueId(&id));
  for (int r = 0; r < n; r++) {
    args[r] = (groupArg_t){.rank = r, .n = n, .id = id, .nonblocking = nonblocking};
    if (pthread_create(&th[r], NULL, groupMain, &args[r]) != 0) die("pthread_create");
  }
  long bad = 0;
  *ntrials = 0;
  for (int r = 0; r < n; r++) {
    pthread_join(th[r], NULL);
    bad += args[r].bad;
    *ntrials += args[r].ntrials;
  }
  free(args);
  free(th);
  return bad;
}

/* ---- hypercube ------------------------------------------------------------
 * Nested groups whose later sends carry what earlier receives of the same
 * outer group brought (nccl-tests' hypercube under -g): one thread, one outer
 * group around every rank's per-step groups. The result is an all-gather. */
static long hypercubeOnce(int n, ncclComm_t* comms, size_t count) {
  int* buf[MAX_RANKS];
  cudaStream_t st[MAX_RANKS];
  size_t total = (size_t)n * count;
  int* host = malloc(total * sizeof(int));
  if (host == NULL) die("malloc");
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < total; i++) host[i] = i / count == (size_t)r ? (int)(i % count) * 31 + r : -1;
    CUDAOK(cudaSetDevice(r));
    CUDAOK(cudaStreamCreate(&st[r]));
    CUDAOK(cudaMalloc((void**)&buf[r], total * sizeof(int)));
    CUDAOK(cudaMemcpy(buf[r], host, total * sizeof(int), cudaMemcpyHostToDevice));
  }
  NCCLOK(ncclGroupStart());
  for (int r = 0; r < n; r++)
    for (int mask = 1; mask < n; mask <<= 1) {
      size_t s = (size_t)(r & ~(mask - 1)), q = (size_t)((r ^ mask) & ~(mask - 1));
      NCCLOK(ncclGroupStart());
      NCCLOK(ncclSend(buf[r] + s * count, count * mask, ncclInt32, r ^ mask, comms[r], st[r]));
      NCCLOK(ncclRecv(buf[r] + q * count, count * mask, ncclInt32, r ^ mask, comms[r], st[r]));
      NCCLOK(ncclGroupEnd());
    }
  NCCLOK(ncclGroupEnd());
  long bad = 0;
  for (int r = 0; r < n; r++) {
    CUDAOK(cudaSetDevice(r));
    CUDAOK(cudaStreamSynchronize(st[r]));
    CUDAOK(cudaMemcpy(host, buf[r], total * sizeof(int), cudaMemcpyDeviceToHost));
    long wrong = 0;
    for (size_t i = 0; i < total; i++) wrong += host[i] != (int)(i % count) * 31 + (int)(i / count);
    if (wrong) say("hypercube n=%d count %zu: rank %d has %ld wrong elements\n", n, count, r, wrong);
    bad += wrong;
    CUDAOK(cudaFree(buf[r]));
    CUDAOK(cudaStreamDestroy(st[r]));
  }
  free(host);
  return bad;
}

static long modeHypercube(int n, int* ntrials) {
  if (n & (n - 1)) die("hypercube needs a power of two ranks, not %d", n);
  ncclComm_t comms[MAX_RANKS];
  int devs[MAX_RANKS];
  for (int r = 0; r < n; r++) devs[r] = r;
  NCCLOK(ncclCommInitAll(comms, n, devs));
  const size_t counts[] = {1, 1001, 100003}; /* LL and simple sizes on GPUs */
  long bad = 0;
  *ntrials = 0;
  for (int i = 0; i < 3; i++, ++*ntrials) bad += hypercubeOnce(n, comms, counts[i]);
  for (int r = 0; r < n; r++) NCCLOK(ncclCommDestroy(comms[r]));
  return bad;
}

/* ---- main ---------------------------------------------------------------- */
static void usage(void) {
  fprintf(stderr, "usage: coll_test threads|all|procs|group|nonblocking|hypercube NRANKS\n");
  exit(2);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) usage();
  refInit();
  corruptInit();
  gSeed = envU64("ANYCCL_TEST_SEED", DEFAULT_SEED);
  if (strcmp(argv[1], "proc-rank") == 0) { /* a child of `procs` */
    if (argc < 6) usage();
    int r = atoi(argv[2]), n = atoi(argv[3]);
    gSeed = strtoull(argv[5], NULL, 0);
    plan_t plan;
    buildPlan(&plan, gSeed, n);
    startWatchdog();
    int rc = childMain(r, n, argv[4], &plan);
    freePlan(&plan);
    return rc;
  }
  if (argc < 3) usage();
  const char* mode = argv[1];
  int n = atoi(argv[2]);
  if (n < 1 || n > MAX_RANKS) usage();
  int devs = 0;
  CUDAOK(cudaGetDeviceCount(&devs));
  if (devs < n) die("%d ranks need %d devices; cudaGetDeviceCount says %d (set ANYCCL_CPU_DEVICES)", n, n, devs);
  say("coll_test %s n=%d seed=0x%llx (set ANYCCL_TEST_SEED to change)\n", mode, n, (unsigned long long)gSeed);
  double t0 = nowSec();
  startWatchdog();
  long bad;
  int ntrials;
  plan_t plan;
  if (strcmp(mode, "threads") == 0 || strcmp(mode, "all") == 0 || strcmp(mode, "procs") == 0) {
    buildPlan(&plan, gSeed, n);
    ntrials = plan.ntrials;
    if (mode[0] == 't') bad = modeThreads(n, &plan);
    else if (mode[0] == 'a') bad = modeAll(n, &plan);
    else bad = modeProcs(n);
    freePlan(&plan);
  } else if (strcmp(mode, "group") == 0) {
    bad = modeGroup(n, 0, &ntrials);
  } else if (strcmp(mode, "nonblocking") == 0) {
    bad = modeGroup(n, 1, &ntrials);
  } else if (strcmp(mode, "hypercube") == 0) {
    bad = modeHypercube(n, &ntrials);
  } else {
    usage();
  }
  say("coll_test %s n=%d seed=0x%llx: %d trials, %ld %s, %.1f s: %s\n", mode, n, (unsigned long long)gSeed,
      ntrials, bad, mode[0] == 'p' ? "ranks failed" : "mismatches", nowSec() - t0, bad ? "FAIL" : "PASS");
  if (mode[0] == 'p' && corruptMode > 0) return bad ? 1 : 0; /* rank 0 applied exitStatus() */
  return exitStatus(bad);
}
