/* ncclGroupSimulateEnd on every backend (docs/simulation.md, "Outputs").
 *
 *   test_simest sim N          the sim backend, one thread driving N ranks
 *                              (every rank in the group: the plans of all)
 *   test_simest threads N      the current backend (cpu), a thread per rank
 *   test_simest procs N        the same, a process per rank (on the hosts
 *                              TEST_SIMEST_HOSTS lists: "0,1,0,1")
 *   test_simest check REF OUT  OUT's estimates equal REF's within 1e-3 and
 *                              grow with size
 *
 * The run modes print one line per rank and case: "rank coll bytes us"
 * (with TEST_SIMEST_MEASURE=iters, threads and procs also time that many
 * real runs of the case: a fifth column, us per run; on a GPU host, built
 * against the cuda backend's libnccl and the CUDA runtime).
 * On the cpu backend every rank also checks that the simulate moved no data
 * (its output buffer, poisoned, is left as it was after the stream
 * synchronised) and that the communicator works afterwards (a real
 * all-reduce, checked). */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>
#include "cuda_runtime.h"
#include "nccl.h"

#define MAX_RANKS 8
static const size_t sizes0[] = {64 << 10, 256 << 10, 1 << 20, 4 << 20}; /* bytes per rank */
static const size_t bigSizes[] = {64 << 10, 1 << 20, 16 << 20, 64 << 20}; /* TEST_SIMEST_BIG (GPU hosts) */
#define NSIZES (sizeof(sizes0) / sizeof(sizes0[0]))
static const size_t* sizes = sizes0;
#define MAX_BYTES sizes[NSIZES - 1]
enum { C_ALLREDUCE, C_ALLGATHER, C_BROADCAST, C_SENDRECV, C_COUNT };
static const char* names[C_COUNT] = {"all_reduce", "all_gather", "broadcast", "sendrecv"};
#define POISON 0xa5

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "test_simest: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(2);
}
#define NCCLOK(call)                                                                   \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) die("%s: %s (line %d)", #call, ncclGetErrorString(r_), __LINE__); \
  } while (0)

/* One rank's state (the sim mode keeps N of them on one thread). */
struct rank {
  int r, n;
  ncclComm_t comm;
  cudaStream_t stream;
  char *send, *recv;
  char* out;      /* its lines */
  size_t outLen;
  int bad;
};

static void say(struct rank* k, const char* fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  k->out = realloc(k->out, k->outLen + len + 1);
  memcpy(k->out + k->outLen, line, len + 1);
  k->outLen += len;
}

static void rankOpen(struct rank* k) {
  cudaSetDevice(k->r);
  cudaStreamCreate(&k->stream);
  if (cudaMalloc((void**)&k->send, MAX_BYTES) != cudaSuccess ||
      cudaMalloc((void**)&k->recv, (size_t)MAX_BYTES * k->n) != cudaSuccess)
    die("cudaMalloc");
}

static void rankClose(struct rank* k) {
  cudaSetDevice(k->r);
  NCCLOK(ncclCommDestroy(k->comm));
  cudaFree(k->send), cudaFree(k->recv);
  cudaStreamDestroy(k->stream);
}

/* Rank k's call of case c at `bytes` (inside the caller's group). */
static void call(struct rank* k, int c, size_t bytes) {
  int n = k->n, r = k->r;
  switch (c) {
    case C_ALLREDUCE: NCCLOK(ncclAllReduce(k->send, k->recv, bytes / 4, ncclFloat, ncclSum, k->comm, k->stream)); break;
    case C_ALLGATHER: NCCLOK(ncclAllGather(k->send, k->recv, bytes, ncclChar, k->comm, k->stream)); break;
    case C_BROADCAST: NCCLOK(ncclBroadcast(k->send, k->recv, bytes, ncclChar, 1 % n, k->comm, k->stream)); break;
    case C_SENDRECV:
      NCCLOK(ncclSend(k->send, bytes, ncclChar, (r + 1) % n, k->comm, k->stream));
      NCCLOK(ncclRecv(k->recv, bytes, ncclChar, (r + n - 1) % n, k->comm, k->stream));
      break;
  }
}

static size_t outBytes(int c, size_t bytes, int n) { return c == C_ALLGATHER ? bytes * n : bytes; }

/* The output left as poisoned: nothing ran. */
static void checkPoison(struct rank* k, int c, size_t bytes) {
  size_t len = outBytes(c, bytes, k->n);
  unsigned char* h = malloc(len);
  cudaStreamSynchronize(k->stream);
  cudaMemcpy(h, k->recv, len, cudaMemcpyDeviceToHost);
  size_t i = 0;
  while (i < len && h[i] == POISON) i++;
  if (i < len) {
    fprintf(stderr, "FAIL rank %d %s %zu: the simulate wrote the output (byte %zu is 0x%02x)\n", k->r, names[c],
            bytes, i, h[i]);
    k->bad++;
  }
  free(h);
}

/* A real all-reduce after the simulates: sum of (rank + 1). */
static void checkWorks(struct rank* k) {
  size_t count = 1 << 16;
  float* h = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) h[i] = (float)(k->r + 1);
  cudaMemcpy(k->send, h, count * sizeof(float), cudaMemcpyHostToDevice);
  NCCLOK(ncclAllReduce(k->send, k->recv, count, ncclFloat, ncclSum, k->comm, k->stream));
  cudaStreamSynchronize(k->stream);
  cudaMemcpy(h, k->recv, count * sizeof(float), cudaMemcpyDeviceToHost);
  float want = (float)(k->n * (k->n + 1) / 2);
  for (size_t i = 0; i < count; i++)
    if (h[i] != want) {
      fprintf(stderr, "FAIL rank %d: all-reduce after the simulates: [%zu] = %g, want %g\n", k->r, i, h[i], want);
      k->bad++;
      break;
    }
  free(h);
}

/* NCCL's group rules: an inner ncclGroupSimulateEnd only closes its level
 * (no estimate; the outer end runs the group for real); bad simInfo and an
 * error already in the group end the group with that error, no estimate. */
static void checkGroupRules(struct rank* k) {
  size_t count = 1024;
  float* h = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) h[i] = (float)(k->r + 1);
  cudaMemcpy(k->send, h, count * sizeof(float), cudaMemcpyHostToDevice);
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclAllReduce(k->send, k->recv, count, ncclFloat, ncclSum, k->comm, k->stream));
  NCCLOK(ncclGroupSimulateEnd(&info));
  if (info.estimatedTime != NCCL_UNDEF_FLOAT) {
    fprintf(stderr, "FAIL rank %d: an inner ncclGroupSimulateEnd estimated %g us\n", k->r, info.estimatedTime);
    k->bad++;
  }
  NCCLOK(ncclGroupEnd());
  cudaStreamSynchronize(k->stream);
  cudaMemcpy(h, k->recv, count * sizeof(float), cudaMemcpyDeviceToHost);
  if (h[0] != (float)(k->n * (k->n + 1) / 2) || h[count - 1] != h[0]) {
    fprintf(stderr, "FAIL rank %d: the outer ncclGroupEnd after an inner simulate: %g\n", k->r, h[0]);
    k->bad++;
  }
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclAllReduce(k->send, k->recv, count, ncclFloat, ncclSum, k->comm, k->stream));
  ncclSimInfo_t bad = info;
  bad.magic = 0;
  if (ncclGroupSimulateEnd(&bad) != ncclInvalidArgument) {
    fprintf(stderr, "FAIL rank %d: ncclGroupSimulateEnd with bad simInfo is not ncclInvalidArgument\n", k->r);
    k->bad++;
  }
  NCCLOK(ncclGroupStart());
  ncclResult_t r = ncclAllReduce(k->send, k->recv, count, (ncclDataType_t)99, ncclSum, k->comm, k->stream);
  info.estimatedTime = 12345;
  ncclResult_t e = ncclGroupSimulateEnd(&info);
  if (r != ncclInvalidArgument || e != ncclInvalidArgument || info.estimatedTime != 12345) {
    fprintf(stderr, "FAIL rank %d: a bad call in the group: call %d, simulate %d, estimate %g\n", k->r, r, e,
            info.estimatedTime);
    k->bad++;
  }
  free(h);
}

/* Every case on one rank (threads, procs); the data checks where memory
 * holds data (not on the sim backend: it reserves device memory only). */
static void rankRun(struct rank* k) {
  const char* be = getenv("ANYCCL_BACKEND");
  int data = be == NULL || strcmp(be, "sim") != 0;
  int measure = getenv("TEST_SIMEST_MEASURE") ? atoi(getenv("TEST_SIMEST_MEASURE")) : 0;
  for (int c = 0; c < C_COUNT; c++)
    for (size_t s = 0; s < NSIZES; s++) {
      size_t bytes = sizes[s];
      cudaMemset(k->recv, POISON, outBytes(c, bytes, k->n));
      cudaMemset(k->send, 1, bytes);
      cudaStreamSynchronize(k->stream);
      ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
      NCCLOK(ncclGroupStart());
      call(k, c, bytes);
      NCCLOK(ncclGroupSimulateEnd(&info));
      if (data) checkPoison(k, c, bytes);
      if (measure > 0) { /* and the real time, for comparison (GPU hosts) */
        cudaEvent_t a, b;
        cudaEventCreate(&a), cudaEventCreate(&b);
        for (int i = -3; i < measure; i++) {
          if (i == 0) cudaEventRecord(a, k->stream);
          NCCLOK(ncclGroupStart());
          call(k, c, bytes);
          NCCLOK(ncclGroupEnd());
        }
        cudaEventRecord(b, k->stream);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        cudaEventDestroy(a), cudaEventDestroy(b);
        say(k, "%d %s %zu %.6f %.3f\n", k->r, names[c], bytes, info.estimatedTime, ms * 1e3 / measure);
      } else {
        say(k, "%d %s %zu %.6f\n", k->r, names[c], bytes, info.estimatedTime);
      }
    }
  if (data) checkGroupRules(k);
  if (data) checkWorks(k);
}

struct thread {
  struct rank k;
  ncclUniqueId id;
  pthread_t th;
};

static void* threadMain(void* arg) {
  struct thread* t = arg;
  rankOpen(&t->k);
  NCCLOK(ncclCommInitRank(&t->k.comm, t->k.n, t->id, t->k.r));
  rankRun(&t->k);
  rankClose(&t->k);
  return NULL;
}

static int modeThreads(int n) {
  struct thread t[MAX_RANKS];
  ncclUniqueId id;
  NCCLOK(ncclGetUniqueId(&id));
  for (int r = 0; r < n; r++) {
    memset(&t[r], 0, sizeof(t[r]));
    t[r].k.r = r, t[r].k.n = n, t[r].id = id;
    if (pthread_create(&t[r].th, NULL, threadMain, &t[r]) != 0) die("pthread_create");
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    pthread_join(t[r].th, NULL);
    if (t[r].k.out) fputs(t[r].k.out, stdout);
    bad += t[r].k.bad;
    free(t[r].k.out);
  }
  return bad;
}

/* A process per rank: rank 0 makes the id and hands it down a pipe to each
 * other rank; each sends its lines up a pipe to the parent. */
static int modeProcs(int n) {
  int idp[MAX_RANKS][2], outp[MAX_RANKS][2];
  pid_t pid[MAX_RANKS];
  for (int r = 0; r < n; r++)
    if (pipe(idp[r]) != 0 || pipe(outp[r]) != 0) die("pipe");
  fflush(stdout);
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    if (pid[r] < 0) die("fork");
    if (pid[r] > 0) continue;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char* hosts = getenv("TEST_SIMEST_HOSTS"); /* "h0,h1,...": rank r's host (sockets between hosts) */
    if (hosts) {
      const char* p = hosts;
      for (int q = 0; q < r && p; q++) p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
      char h[32];
      snprintf(h, sizeof(h), "simesthost%d", p ? atoi(p) : r);
      setenv("NCCL_HOSTID", h, 1);
    }
    struct rank k = {.r = r, .n = n};
    ncclUniqueId id;
    if (r == 0) {
      NCCLOK(ncclGetUniqueId(&id));
      for (int q = 1; q < n; q++)
        if (write(idp[q][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) die("write id");
    } else if (read(idp[r][0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
      die("rank %d: read id", r);
    }
    rankOpen(&k);
    NCCLOK(ncclCommInitRank(&k.comm, n, id, r));
    rankRun(&k);
    rankClose(&k);
    if (k.out && write(outp[r][1], k.out, k.outLen) != (ssize_t)k.outLen) die("write lines");
    _exit(k.bad ? 1 : 0);
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    close(outp[r][1]);
    char buf[4096];
    ssize_t len;
    while ((len = read(outp[r][0], buf, sizeof(buf))) > 0) fwrite(buf, 1, len, stdout);
    int st;
    if (waitpid(pid[r], &st, 0) != pid[r] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "FAIL rank %d: process ended with status 0x%x\n", r, st);
      bad++;
    }
  }
  return bad;
}

/* The sim backend with every rank in one group (its own plans for all). */
static int modeSim(int n) {
  struct rank k[MAX_RANKS];
  ncclComm_t comms[MAX_RANKS];
  NCCLOK(ncclCommInitAll(comms, n, NULL));
  for (int r = 0; r < n; r++) {
    memset(&k[r], 0, sizeof(k[r]));
    k[r].r = r, k[r].n = n, k[r].comm = comms[r];
    rankOpen(&k[r]);
  }
  for (int c = 0; c < C_COUNT; c++)
    for (size_t s = 0; s < NSIZES; s++) {
      ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
      NCCLOK(ncclGroupStart());
      for (int r = 0; r < n; r++) call(&k[r], c, sizes[s]);
      NCCLOK(ncclGroupSimulateEnd(&info));
      printf("0 %s %zu %.6f\n", names[c], sizes[s], info.estimatedTime);
    }
  for (int r = 0; r < n; r++) rankClose(&k[r]);
  return 0;
}

/* ---- check ------------------------------------------------------------------ */
struct line {
  int rank;
  char coll[32];
  size_t bytes;
  double us;
};

static int readLines(const char* path, struct line* l, int max) {
  FILE* f = fopen(path, "r");
  if (f == NULL) die("cannot read %s", path);
  int k = 0;
  char text[512];
  while (k < max && fgets(text, sizeof(text), f)) /* other lines (NCCL_DEBUG's) are skipped */
    k += sscanf(text, "%d %31s %zu %lf", &l[k].rank, l[k].coll, &l[k].bytes, &l[k].us) == 4;
  fclose(f);
  return k;
}

static int check(const char* refPath, const char* outPath) {
  static struct line ref[1024], out[1024];
  int nr = readLines(refPath, ref, 1024), no = readLines(outPath, out, 1024), bad = 0;
  if (nr < (int)NSIZES || no < nr) {
    fprintf(stderr, "FAIL: %d reference lines (want %d or more), %d to check\n", nr, (int)NSIZES, no);
    return 1;
  }
  for (int i = 0; i < no; i++) {
    int j = 0;
    while (j < nr && (strcmp(ref[j].coll, out[i].coll) != 0 || ref[j].bytes != out[i].bytes)) j++;
    if (j == nr) {
      fprintf(stderr, "FAIL: %s %zu is not in %s\n", out[i].coll, out[i].bytes, refPath);
      bad++;
      continue;
    }
    double want = ref[j].us, got = out[i].us;
    if (!(want > 0) || !(fabs(got - want) <= 1e-3 * want)) {
      fprintf(stderr, "FAIL: rank %d %s %zu bytes: estimated %.6f us, the sim's %.6f us\n", out[i].rank,
              out[i].coll, out[i].bytes, got, want);
      bad++;
    }
    /* the previous line of the same rank and collective is the next smaller size */
    if (i > 0 && out[i - 1].rank == out[i].rank && strcmp(out[i - 1].coll, out[i].coll) == 0 &&
        !(out[i].us > out[i - 1].us)) {
      fprintf(stderr, "FAIL: rank %d %s: %.6f us at %zu bytes, not more than %.6f at %zu\n", out[i].rank,
              out[i].coll, out[i].us, out[i].bytes, out[i - 1].us, out[i - 1].bytes);
      bad++;
    }
  }
  printf("%d estimates checked against %s: %s\n", no, refPath, bad ? "FAILED" : "equal, growing with size");
  return bad;
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "check") == 0) return check(argv[2], argv[3]) ? 1 : 0;
  if (getenv("TEST_SIMEST_BIG")) sizes = bigSizes;
  if (argc != 3) die("usage: test_simest sim|threads|procs N | check REF OUT");
  int n = atoi(argv[2]);
  if (n < 2 || n > MAX_RANKS) die("N must be 2..%d", MAX_RANKS);
  int bad;
  if (strcmp(argv[1], "sim") == 0) bad = modeSim(n);
  else if (strcmp(argv[1], "threads") == 0) bad = modeThreads(n);
  else if (strcmp(argv[1], "procs") == 0) bad = modeProcs(n);
  else die("unknown mode %s", argv[1]);
  fflush(stdout);
  return bad ? 1 : 0;
}
