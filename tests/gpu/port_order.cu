/* Port channels on GPUs: the orderings and the signal count, two ranks on
 * GPUs 0 and 1 (a thread each, or a process each).
 *
 * Each round, each rank's one kernel thread puts its region k to the peer's
 * landing region k with putWithSignal (sizes cycle through a direct put, 8 KB, 1 MB and
 * 3 MB + 4 bytes, all but the first through the proxy), then signals once
 * more (behind the copy: the proxy stream's write; or directly, when the
 * proxy is idle), waits for the peer's two signals and checks the peer's
 * region k (every 4 KB and the last word). After the last round a poll
 * must find no signal left: each signal counted once, whichever of the
 * three paths (a direct add, the proxy stream's write, the proxy thread's
 * store) carried it. Run it with ANYCCL_PORT_STREAM_SIGNALS=0/1 and
 * ANYCCL_PORT_HOST_SIGNALS=0/1.
 *
 *   port_order [-m threads|procs] [-r ROUNDS]      exit 0 and "port_order: OK" */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "anyccl_port.h"

#define REGION (4u << 20)
#define MAXROUNDS 24
static int gRounds = 16;

#define CK(x)                                                                                          \
  do {                                                                                                 \
    ncclResult_t r_ = (x);                                                                             \
    if (r_ != ncclSuccess) {                                                                           \
      fprintf(stderr, "port_order rank %d: %s: %s\n", rank, #x, ncclGetErrorString(r_));               \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)
#define CUCK(x)                                                                                        \
  do {                                                                                                 \
    cudaError_t e_ = (x);                                                                              \
    if (e_ != cudaSuccess) {                                                                           \
      fprintf(stderr, "port_order rank %d: %s: %s\n", rank, #x, cudaGetErrorString(e_));               \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)

__host__ __device__ static uint32_t pattern(int rank, int k, uint64_t i) {
  return (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 7919 + k * 104729 + 1);
}
__host__ __device__ static uint64_t roundBytes(int k) {
  const uint64_t sizes[4] = {256, 8192, 1u << 20, (3u << 20) + 4};
  return sizes[k % 4];
}

/* result: 0 ok, else 1000 + the first bad round, or an ncclResult_t */
__global__ void rounds(struct anycclPortChannel ch, int rank, int nRounds, const uint32_t* mine, int* result) {
  int peer = 1 - rank, r;
  for (int k = 0; k < nRounds; k++) {
    uint64_t off = (uint64_t)k * REGION, land = (uint64_t)(nRounds + k) * REGION, bytes = roundBytes(k);
    if ((r = anycclPortPutWithSignal(&ch, land, off, bytes)) != ncclSuccess) goto out;
    if ((r = anycclPortSignal(&ch)) != ncclSuccess) goto out;
    if ((r = anycclPortWait(&ch)) != ncclSuccess) goto out;
    if ((r = anycclPortWait(&ch)) != ncclSuccess) goto out;
    uint64_t n = bytes / 4;
    for (uint64_t i = 0; i <= n; i += 1024) {
      uint64_t at = i < n ? i : n - 1; /* every 4 KB, then the last word */
      if (mine[land / 4 + at] != pattern(peer, k, at)) {
        r = 1000 + k;
        goto out;
      }
    }
  }
  if ((r = anycclPortFlush(&ch)) != ncclSuccess) goto out;
  /* both ranks done before the count is looked at: a barrier */
  if ((r = anycclPortSignal(&ch)) != ncclSuccess) goto out;
  if ((r = anycclPortWait(&ch)) != ncclSuccess) goto out;
  r = anycclPortPoll(&ch) ? 999 : ncclSuccess; /* a signal left over: counted twice */
out:
  *result = r;
}

static int runRank(ncclUniqueId id, int rank) {
  CUCK(cudaSetDevice(rank));
  ncclComm_t comm;
  CK(ncclCommInitRank(&comm, 2, id, rank));
  size_t bytes = 2 * (size_t)gRounds * REGION; /* my regions, then where the peer's land */
  uint32_t *buf, *host = (uint32_t*)malloc(bytes / 2);
  int* res;
  if (host == NULL) return 1;
  CUCK(cudaMalloc((void**)&buf, bytes));
  CUCK(cudaMallocManaged((void**)&res, sizeof(int), cudaMemAttachGlobal));
  for (int k = 0; k < gRounds; k++)
    for (uint64_t i = 0; i < REGION / 4; i++) host[(size_t)k * REGION / 4 + i] = pattern(rank, k, i);
  CUCK(cudaMemcpy(buf, host, bytes / 2, cudaMemcpyHostToDevice));
  CUCK(cudaMemset((char*)buf + bytes / 2, 0, bytes / 2));
  anycclProxyService_t svc;
  anycclMemoryId local, remote;
  anycclSemaphoreId sem;
  struct anycclPortChannel ch;
  CK(anycclProxyServiceCreate(comm, 0, &svc));
  CK(anycclRegisterMemory(svc, buf, bytes, &local));
  CK(anycclMemorySend(svc, local, 1 - rank));
  CK(anycclMemoryRecv(svc, 1 - rank, &remote));
  CK(anycclSemaphoreCreate(svc, 1 - rank, &sem));
  CK(anycclPortChannelCreate(svc, sem, remote, local, &ch));
  CK(anycclProxyServiceStart(svc));
  *res = -1;
  rounds<<<1, 1>>>(ch, rank, gRounds, buf, res);
  CUCK(cudaDeviceSynchronize());
  int r = *res;
  if (r != 0)
    fprintf(stderr, "port_order rank %d: %s\n", rank,
            r == 999 ? "a signal left after the last wait (counted twice)"
            : r >= 1000 ? "wrong data" : ncclGetErrorString((ncclResult_t)r));
  if (r >= 1000) fprintf(stderr, "port_order rank %d: round %d (%llu bytes)\n", rank, r - 1000, (unsigned long long)roundBytes(r - 1000));
  CK(anycclProxyServiceStop(svc));
  CK(anycclProxyServiceDestroy(svc));
  CK(ncclCommDestroy(comm));
  CUCK(cudaFree(buf));
  free(host);
  return r != 0;
}

struct targ { ncclUniqueId id; int rank, result; };
static void* rankThread(void* p) {
  struct targ* a = (struct targ*)p;
  a->result = runRank(a->id, a->rank);
  return NULL;
}

int main(int argc, char** argv) {
  const char* mode = "threads";
  int rank = -1, opt;
  ncclUniqueId id;
  if (argc == 5 && strcmp(argv[1], "--child") == 0) { /* a rank process (exec'd: no CUDA state from the parent) */
    rank = atoi(argv[2]);
    gRounds = atoi(argv[4]);
    for (int i = 0; i < (int)sizeof(id.internal); i++) {
      unsigned v;
      sscanf(argv[3] + 2 * i, "%2x", &v);
      id.internal[i] = (char)v;
    }
    return runRank(id, rank);
  }
  while ((opt = getopt(argc, argv, "m:r:")) != -1) {
    if (opt == 'm') mode = optarg;
    else if (opt == 'r') gRounds = atoi(optarg);
    else return 2;
  }
  if (gRounds < 1 || gRounds > MAXROUNDS) {
    fprintf(stderr, "-r: 1 to %d rounds\n", MAXROUNDS);
    return 2;
  }
  CK(ncclGetUniqueId(&id));
  int fails = 0;
  if (strcmp(mode, "threads") == 0) {
    struct targ a[2] = {{id, 0, 1}, {id, 1, 1}};
    pthread_t t[2];
    for (int r = 0; r < 2; r++) pthread_create(&t[r], NULL, rankThread, &a[r]);
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    fails = a[0].result + a[1].result;
  } else if (strcmp(mode, "procs") == 0) {
    char hex[2 * sizeof(id.internal) + 1], rs[8], ns[8];
    for (int i = 0; i < (int)sizeof(id.internal); i++) sprintf(hex + 2 * i, "%02x", (unsigned char)id.internal[i]);
    snprintf(ns, sizeof(ns), "%d", gRounds);
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
      snprintf(rs, sizeof(rs), "%d", r);
      if ((pids[r] = fork()) == 0) {
        execl("/proc/self/exe", argv[0], "--child", rs, hex, ns, (char*)NULL);
        _exit(127);
      }
    }
    for (int r = 0; r < 2; r++) {
      int st;
      waitpid(pids[r], &st, 0);
      fails += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
  } else {
    fprintf(stderr, "-m threads|procs\n");
    return 2;
  }
  printf("port_order %s, %d rounds: %s\n", mode, gRounds, fails ? "FAILED" : "OK");
  return fails != 0;
}
