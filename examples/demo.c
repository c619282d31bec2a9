/* anyccl-demo: an all-reduce across N ranks on emulated GPUs, told step by step.
 *
 *   anyccl-demo              4 ranks, one thread per rank, in this process
 *   anyccl-demo -n 8 -p      8 ranks, one process per rank (forked)
 *   anyccl-demo -n 4 -H 2    4 processes on 2 virtual hosts (NCCL_HOSTID): the
 *                            ranks of different hosts talk over TCP sockets
 *   anyccl-demo -v           also show the library's own log (NCCL_DEBUG=INFO)
 *
 * The code is plain CUDA + NCCL host code: the same source builds against
 * the real CUDA runtime and NCCL. On anyccl-cpu each device is a virtual GPU
 * backed by host memory, and the bytes really move between the ranks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "cuda_runtime.h"
#include "nccl.h"

#define NSHOW 4   /* elements shown per buffer */
#define PERIOD 7  /* input pattern: x_r[i] = (r + 1) + (i mod PERIOD) */

/* What one rank saw; in process mode it lives in memory shared with the parent. */
struct report {
  int started, done, pass;
  int pid, host, ndev, dev, commCount, commRank, commDev;
  char busId[32], devName[64];
  double memGiB;
  double initMs, iterUs;
  float in[NSHOW], out[NSHOW], expect[NSHOW];
  size_t wrong, firstWrong;
  float wrongGot, wrongExpect;
  char error[400];
};

struct options {
  int nranks, processes, hosts, iters, verbose;
  size_t count;
};

static struct options opt = {4, 0, 1, 5, 0, 1 << 20};
static struct report* reports;
static ncclUniqueId sharedId; /* thread mode: made by the main thread acting as rank 0 */

static double nowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static float inputAt(int rank, size_t i) { return (float)(rank + 1) + (float)(i % PERIOD); }
static float expectAt(int nranks, size_t i) {
  return (float)(nranks * (nranks + 1) / 2) + (float)nranks * (float)(i % PERIOD);
}

#define FAIL_IF(cond, ...)                                   \
  do {                                                       \
    if (cond) {                                              \
      snprintf(rep->error, sizeof(rep->error), __VA_ARGS__); \
      goto out;                                              \
    }                                                        \
  } while (0)
#define CUDATRY(cmd)                                                                       \
  do {                                                                                     \
    cudaError_t e_ = (cmd);                                                                \
    FAIL_IF(e_ != cudaSuccess, "%s: CUDA error %s", #cmd, cudaGetErrorString(e_));       \
  } while (0)
#define NCCLTRY(cmd)                                                                       \
  do {                                                                                     \
    ncclResult_t r_ = (cmd);                                                               \
    FAIL_IF(r_ != ncclSuccess, "%s: NCCL error '%s' %s", #cmd, ncclGetErrorString(r_),     \
            ncclGetLastError(NULL));                                                       \
  } while (0)

/* One rank: pick the device, join, all-reduce, check. Fills reports[rank]. */
static void runRank(int rank, ncclUniqueId id) {
  struct report* rep = &reports[rank];
  int n = opt.nranks;
  size_t count = opt.count, bytes = count * sizeof(float);
  float *sendbuff = NULL, *recvbuff = NULL, *host = NULL;
  cudaStream_t stream = NULL;
  ncclComm_t comm = NULL;
  rep->started = 1;
  rep->pid = (int)getpid();
  /* ranks fill hosts in order; the device is the rank's index on its host */
  int perHost = (n + opt.hosts - 1) / opt.hosts;
  rep->host = rank / perHost;
  rep->dev = rank % perHost;

  CUDATRY(cudaGetDeviceCount(&rep->ndev));
  FAIL_IF(rep->dev >= rep->ndev, "rank %d needs device %d but only %d devices are visible (ANYCCL_CPU_DEVICES=%d)",
          rank, rep->dev, rep->ndev, perHost);
  CUDATRY(cudaSetDevice(rep->dev));
  struct cudaDeviceProp prop;
  CUDATRY(cudaGetDeviceProperties(&prop, rep->dev));
  snprintf(rep->devName, sizeof(rep->devName), "%.63s", prop.name);
  rep->memGiB = prop.totalGlobalMem / 1073741824.0;
  CUDATRY(cudaDeviceGetPCIBusId(rep->busId, sizeof(rep->busId), rep->dev));

  CUDATRY(cudaMalloc((void**)&sendbuff, bytes));
  CUDATRY(cudaMalloc((void**)&recvbuff, bytes));
  CUDATRY(cudaStreamCreate(&stream));
  host = malloc(bytes);
  FAIL_IF(host == NULL, "out of host memory for %zu bytes", bytes);
  for (size_t i = 0; i < count; i++) host[i] = inputAt(rank, i);
  CUDATRY(cudaMemcpy(sendbuff, host, bytes, cudaMemcpyHostToDevice));
  CUDATRY(cudaMemset(recvbuff, 0, bytes));

  double t0 = nowMs();
  NCCLTRY(ncclCommInitRank(&comm, n, id, rank));
  rep->initMs = nowMs() - t0;
  NCCLTRY(ncclCommCount(comm, &rep->commCount));
  NCCLTRY(ncclCommUserRank(comm, &rep->commRank));
  NCCLTRY(ncclCommCuDevice(comm, &rep->commDev));

  /* one warm-up, then opt.iters timed all-reduces enqueued back to back */
  NCCLTRY(ncclAllReduce(sendbuff, recvbuff, count, ncclFloat, ncclSum, comm, stream));
  CUDATRY(cudaStreamSynchronize(stream));
  t0 = nowMs();
  for (int it = 0; it < opt.iters; it++)
    NCCLTRY(ncclAllReduce(sendbuff, recvbuff, count, ncclFloat, ncclSum, comm, stream));
  CUDATRY(cudaStreamSynchronize(stream));
  rep->iterUs = opt.iters ? (nowMs() - t0) * 1e3 / opt.iters : 0;

  CUDATRY(cudaMemcpy(host, recvbuff, bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; i++)
    if (host[i] != expectAt(n, i) && rep->wrong++ == 0) {
      rep->firstWrong = i;
      rep->wrongGot = host[i];
      rep->wrongExpect = expectAt(n, i);
    }
  for (int i = 0; i < NSHOW && (size_t)i < count; i++) {
    rep->in[i] = inputAt(rank, i);
    rep->out[i] = host[i];
    rep->expect[i] = expectAt(n, i);
  }
  rep->pass = rep->wrong == 0;

out:
  if (comm) {
    if (rep->error[0]) ncclCommAbort(comm);
    else ncclCommDestroy(comm);
  }
  if (stream) cudaStreamDestroy(stream);
  if (sendbuff) cudaFree(sendbuff);
  if (recvbuff) cudaFree(recvbuff);
  free(host);
  rep->done = 1;
}

/* ---- thread mode ------------------------------------------------------------ */
static void* rankThread(void* arg) {
  runRank((int)(long)arg, sharedId);
  return NULL;
}

static int runThreads(void) {
  ncclResult_t r = ncclGetUniqueId(&sharedId);
  if (r != ncclSuccess) {
    printf("ncclGetUniqueId failed: %s\n", ncclGetErrorString(r));
    return -1;
  }
  pthread_t* t = calloc(opt.nranks, sizeof(pthread_t));
  for (int i = 0; i < opt.nranks; i++) pthread_create(&t[i], NULL, rankThread, (void*)(long)i);
  for (int i = 0; i < opt.nranks; i++) pthread_join(t[i], NULL);
  free(t);
  return 0;
}

/* ---- process mode: rank 0 makes the id and writes it into a pipe per rank ---- */
static int ioFull(int fd, void* buf, size_t len, int writing) {
  char* p = buf;
  while (len > 0) {
    ssize_t k = writing ? write(fd, p, len) : read(fd, p, len);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    len -= k;
  }
  return 0;
}

static void childMain(int rank, int (*pipes)[2]) {
  int n = opt.nranks;
  ncclUniqueId id;
  struct report* rep = &reports[rank];
  if (opt.hosts > 1) {
    /* this process's virtual host: read by libnccl and anyccl-cpu at first use */
    char host[16];
    snprintf(host, sizeof(host), "%d", rank / ((n + opt.hosts - 1) / opt.hosts));
    setenv("NCCL_HOSTID", host, 1);
  }
  if (rank == 0) {
    for (int p = 1; p < n; p++) close(pipes[p][0]);
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      snprintf(rep->error, sizeof(rep->error), "ncclGetUniqueId: %s", ncclGetErrorString(r));
      rep->done = 1;
      _exit(1);
    }
    for (int p = 1; p < n; p++) {
      ioFull(pipes[p][1], &id, sizeof(id), 1);
      close(pipes[p][1]);
    }
  } else {
    for (int p = 1; p < n; p++) {
      close(pipes[p][1]);
      if (p != rank) close(pipes[p][0]);
    }
    if (ioFull(pipes[rank][0], &id, sizeof(id), 0) != 0) {
      snprintf(rep->error, sizeof(rep->error), "rank 0 exited before sending the unique id");
      rep->done = 1;
      _exit(1);
    }
    close(pipes[rank][0]);
  }
  runRank(rank, id);
  fflush(stdout);
  _exit(rep->pass ? 0 : 1);
}

static int runProcesses(void) {
  int n = opt.nranks;
  int(*pipes)[2] = calloc(n, sizeof(*pipes));
  pid_t* pids = calloc(n, sizeof(pid_t));
  pid_t parent = getpid();
  for (int r = 1; r < n; r++)
    if (pipe(pipes[r]) != 0) {
      perror("pipe");
      return -1;
    }
  fflush(stdout);
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] < 0) {
      perror("fork");
      return -1;
    }
    if (pids[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* no rank outlives a killed demo */
      if (getppid() != parent) _exit(1);
      childMain(r, pipes);
    }
  }
  for (int r = 1; r < n; r++) {
    close(pipes[r][0]);
    close(pipes[r][1]);
  }
  /* When one rank dies, the others would wait for it until a timeout: stop them. */
  int stopped = 0;
  for (int left = n; left > 0;) {
    int status;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int r = 0;
    while (r < n && pids[r] != pid) r++;
    if (r == n) continue;
    pids[r] = 0;
    left--;
    if (WIFSIGNALED(status) && reports[r].done) {
      /* it had finished its check when it was stopped: its report stands */
    } else if (WIFSIGNALED(status) && stopped && !reports[r].error[0])
      snprintf(reports[r].error, sizeof(reports[r].error), "stopped by the demo after another rank failed");
    else if (WIFSIGNALED(status) && !reports[r].error[0])
      snprintf(reports[r].error, sizeof(reports[r].error), "process %d was killed by signal %d (%s)", (int)pid,
               WTERMSIG(status), strsignal(WTERMSIG(status)));
    else if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && !reports[r].error[0] && reports[r].pass == 0 &&
             reports[r].wrong == 0)
      snprintf(reports[r].error, sizeof(reports[r].error), "process %d exited with status %d", (int)pid,
               WEXITSTATUS(status));
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && left > 0 && !stopped) {
      stopped = 1;
      for (int q = 0; q < n; q++)
        if (pids[q] > 0) kill(pids[q], SIGKILL);
    }
  }
  free(pipes);
  free(pids);
  return 0;
}

/* ---- printing -------------------------------------------------------------- */
static void showValues(char* buf, size_t len, const float* v) {
  size_t k = 0;
  buf[0] = '\0';
  int shown = opt.count < NSHOW ? (int)opt.count : NSHOW;
  for (int i = 0; i < shown && k < len; i++) k += snprintf(buf + k, len - k, "%s%g", i ? " " : "", v[i]);
  if (opt.count > NSHOW && k < len) snprintf(buf + k, len - k, " ...");
}

static const char* human(double bytes, char* buf, size_t len) {
  if (bytes >= 1 << 20) snprintf(buf, len, "%.1f MiB", bytes / (1 << 20));
  else if (bytes >= 1 << 10) snprintf(buf, len, "%.1f KiB", bytes / (1 << 10));
  else snprintf(buf, len, "%.0f B", bytes);
  return buf;
}

static const char* fmtTime(double us, char* buf, size_t len) {
  if (us >= 1e6) snprintf(buf, len, "%.2f s", us / 1e6);
  else if (us >= 1e4) snprintf(buf, len, "%.2f ms", us / 1e3);
  else snprintf(buf, len, "%.1f us", us);
  return buf;
}

static void printDevices(void) {
  int n = opt.nranks, ndev = reports[0].ndev;
  int virtualGpus = strncmp(reports[0].devName, "anyccl-cpu", 10) == 0;
  printf("\nDevices: %d visible to each rank%s (%s); the ranks use:\n", ndev, opt.hosts > 1 ? " on each host" : "",
         virtualGpus ? "virtual GPUs backed by host memory under anyccl-cpu" : "GPUs of the CUDA runtime");
  printf("  %-4s  %-4s  %-14s  %-32s  %s\n", "host", "dev", "PCI bus id", "name", "memory");
  for (int r = 0; r < n; r++) {
    struct report* p = &reports[r];
    if (!p->busId[0]) continue;
    printf("  %-4d  %-4d  %-14s  %-32s  %.1f GiB\n", p->host, p->dev, p->busId, p->devName, p->memGiB);
  }
  if (opt.hosts > 1)
    printf("  (each virtual host numbers its devices from 0; their bus ids differ in the PCI domain)\n");
}

static void printComm(void) {
  int n = opt.nranks;
  printf("\nCommunicator: %d ranks; %s\n", n,
         opt.processes ? "rank 0 made the unique id (ncclGetUniqueId) and wrote it into a pipe to each other process"
                       : "the main thread made the unique id (ncclGetUniqueId), the rank threads share it");
  printf("  %-4s  %-8s  %-4s  %-6s  %-14s  %-26s  %s\n", "rank", "pid", "host", "device", "PCI bus id",
         "CommCount/UserRank/CuDev", "init");
  for (int r = 0; r < n; r++) {
    struct report* p = &reports[r];
    if (!p->commCount) {
      printf("  %-4d  %-8d  %-4d  %-6d  %-14s  %-26s  -\n", r, p->pid, p->host, p->dev, p->busId,
             "(not initialized)");
      continue;
    }
    char ids[40];
    snprintf(ids, sizeof(ids), "%d / %d / %d", p->commCount, p->commRank, p->commDev);
    printf("  %-4d  %-8d  %-4d  %-6d  %-14s  %-26s  %.1f ms\n", r, p->pid, p->host, p->dev, p->busId, ids,
           p->initMs);
  }
}

static int printResults(void) {
  int n = opt.nranks, passed = 0;
  char a[64], b[64], c[64], h[32], t[32];
  double bytes = (double)opt.count * sizeof(float);
  printf("\nData: rank r sends x[i] = (r+1) + (i mod %d), %zu floats (%s); ncclAllReduce(sum) leaves on every\n"
         "rank y[i] = %d + %d*(i mod %d)   (sum over ranks of r+1 is %d)\n",
         PERIOD, opt.count, human(bytes, h, sizeof(h)), n * (n + 1) / 2, n, PERIOD, n * (n + 1) / 2);
  printf("\nResults (%d timed iterations after one warm-up; busbw = algbw * 2(n-1)/n as in nccl-tests):\n",
         opt.iters);
  printf("  %-4s  %-18s  %-18s  %-18s  %10s  %10s  %10s  %s\n", "rank", "input", "output", "expected", "time/iter",
         "algbw", "busbw", "check");
  for (int r = 0; r < n; r++) {
    struct report* p = &reports[r];
    showValues(a, sizeof(a), p->in);
    showValues(b, sizeof(b), p->out);
    showValues(c, sizeof(c), p->expect);
    if (p->error[0] || !p->done) {
      printf("  %-4d  FAIL: %s\n", r, p->error[0] ? p->error : p->started ? "did not finish" : "did not start");
      continue;
    }
    double algbw = p->iterUs > 0 ? bytes / (p->iterUs * 1e3) : 0; /* GB/s */
    double busbw = algbw * 2.0 * (n - 1) / n;
    char bw[2][24];
    snprintf(bw[0], sizeof(bw[0]), "%.2f GB/s", algbw);
    snprintf(bw[1], sizeof(bw[1]), "%.2f GB/s", busbw);
    printf("  %-4d  %-18s  %-18s  %-18s  %10s  %10s  %10s  %s\n", r, a, b, c, fmtTime(p->iterUs, t, sizeof(t)), bw[0],
           bw[1], p->pass ? "PASS" : "FAIL");
    if (p->pass) passed++;
    else
      printf("        %zu of %zu elements wrong; first at [%zu]: got %g, expected %g\n", p->wrong, opt.count,
             p->firstWrong, p->wrongGot, p->wrongExpect);
  }
  printf("\n%s: %d of %d ranks hold the right sum\n", passed == n ? "PASS" : "FAIL", passed, n);
  return passed == n;
}

static void usage(const char* prog, int code) {
  printf("usage: %s [-n ranks] [-p] [-H hosts] [-c count] [-i iters] [-v]\n"
         "  -n N   number of ranks (default 4)\n"
         "  -p     one process per rank (forked) instead of one thread per rank\n"
         "  -H H   spread the ranks over H virtual hosts (NCCL_HOSTID; implies -p): ranks on\n"
         "         different hosts talk over TCP sockets, as across machines\n"
         "  -c C   floats per rank (default 1048576 = 4 MiB)\n"
         "  -i I   timed iterations (default 5)\n"
         "  -v     show the library's log (sets NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT)\n",
         prog);
  exit(code);
}

int main(int argc, char** argv) {
  int c;
  while ((c = getopt(argc, argv, "n:pH:c:i:vh")) != -1) {
    switch (c) {
      case 'n': opt.nranks = atoi(optarg); break;
      case 'p': opt.processes = 1; break;
      case 'H': opt.hosts = atoi(optarg); break;
      case 'c': opt.count = strtoull(optarg, NULL, 0); break;
      case 'i': opt.iters = atoi(optarg); break;
      case 'v': opt.verbose = 1; break;
      case 'h': usage(argv[0], 0); break;
      default: usage(argv[0], 2);
    }
  }
  if (optind != argc || opt.nranks < 1 || opt.count < 1 || opt.iters < 0 || opt.hosts < 1) usage(argv[0], 2);
  if (opt.hosts > opt.nranks) opt.hosts = opt.nranks;
  if (opt.hosts > 1) opt.processes = 1; /* NCCL_HOSTID is per process */
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (opt.verbose) {
    setenv("NCCL_DEBUG", "INFO", 0);
    setenv("NCCL_DEBUG_SUBSYS", "INIT", 0);
  }
  /* anyccl-cpu shows ANYCCL_CPU_DEVICES virtual devices (default 8); ask for
   * one per rank when there are more ranks. (Ignored by the real CUDA runtime.) */
  char ndevEnv[16];
  const char* ndevSet = getenv("ANYCCL_CPU_DEVICES");
  int perHost = (opt.nranks + opt.hosts - 1) / opt.hosts;
  if (ndevSet == NULL && perHost > 8) {
    snprintf(ndevEnv, sizeof(ndevEnv), "%d", perHost);
    setenv("ANYCCL_CPU_DEVICES", ndevEnv, 1);
  }

  int v = 0;
  ncclGetVersion(&v);
  printf("anyccl-demo: ncclAllReduce (sum, float32) across %d ranks, %s", opt.nranks,
         opt.processes ? "one process per rank" : "one thread per rank in one process");
  if (opt.hosts > 1) printf(", on %d virtual hosts", opt.hosts);
  printf("\n");
#ifdef ANYCCL_VERSION_STRING
  printf("  NCCL API version %d.%d.%d (ncclGetVersion %d), anyccl %s\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, v,
         ANYCCL_VERSION_STRING);
#else
  printf("  NCCL API version %d.%d.%d (ncclGetVersion %d)\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, v);
#endif
  if (ndevSet == NULL && perHost > 8) printf("  (set ANYCCL_CPU_DEVICES=%d: one virtual GPU per rank)\n", perHost);

  reports = mmap(NULL, opt.nranks * sizeof(struct report), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (reports == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  double t0 = nowMs();
  int rc = opt.processes ? runProcesses() : runThreads();
  double wall = nowMs() - t0;
  if (rc != 0) return 1;
  printDevices();
  printComm();
  int ok = printResults();
  printf("(wall time %.0f ms, including init)\n", wall);
  munmap(reports, opt.nranks * sizeof(struct report));
  return ok ? 0 : 1;
}
