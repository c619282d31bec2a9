/* Example 2 of NCCL's documentation: one device per process.
 *
 * Rank 0 creates the unique id with ncclGetUniqueId and the id reaches the
 * other ranks; every process then selects its device (cudaSetDevice of its
 * local rank), joins the communicator, all-reduces, checks and prints.
 *
 * Built with MPI (-DUSE_MPI, CMake target one_device_per_process_mpi):
 *   mpirun -np 4 ./one_device_per_process_mpi
 * the id travels by MPI_Bcast, and the local rank comes from a hash of the
 * host name, as in NCCL's example.
 *
 * Built without MPI (CMake target one_device_per_process):
 *   ./one_device_per_process --nranks 4
 * forks 4 processes; rank 0 writes the id into a pipe to each of the others.
 *   NCCL_COMM_ID=127.0.0.1:29500 ./one_device_per_process --nranks 4 --rank R
 * runs only rank R (start one per terminal, or under any launcher): with
 * NCCL_COMM_ID set, every rank derives the same id from the address, and no
 * id needs to travel. The local rank is $LOCAL_RANK if set, else R.
 *
 * Options: --count N elements per rank (default 1M floats, 4 MiB).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cuda_runtime.h"
#include "nccl.h"
#ifdef USE_MPI
#include "mpi.h"
#else
#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#endif

#define MPICHECK(cmd)                                                           \
  do {                                                                          \
    int e = cmd;                                                                \
    if (e != 0) {                                                               \
      printf("Failed: MPI error %s:%d '%d'\n", __FILE__, __LINE__, e);          \
      exit(EXIT_FAILURE);                                                       \
    }                                                                           \
  } while (0)

#define CUDACHECK(cmd)                                                                        \
  do {                                                                                        \
    cudaError_t e = cmd;                                                                      \
    if (e != cudaSuccess) {                                                                   \
      printf("Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e));   \
      exit(EXIT_FAILURE);                                                                     \
    }                                                                                         \
  } while (0)

#define NCCLCHECK(cmd)                                                                        \
  do {                                                                                        \
    ncclResult_t r = cmd;                                                                     \
    if (r != ncclSuccess) {                                                                   \
      printf("Failed, NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r));   \
      exit(EXIT_FAILURE);                                                                     \
    }                                                                                         \
  } while (0)

#ifdef USE_MPI
static uint64_t getHostHash(const char* string) {
  /* Based on DJB2a, result = result * 33 ^ char */
  uint64_t result = 5381;
  for (int c = 0; string[c] != '\0'; c++) result = ((result << 5) + result) ^ string[c];
  return result;
}

static void getHostName(char* hostname, int maxlen) {
  gethostname(hostname, maxlen);
  hostname[maxlen - 1] = '\0';
  for (int i = 0; i < maxlen; i++) {
    if (hostname[i] == '.') {
      hostname[i] = '\0';
      return;
    }
  }
}
#endif

/* What every rank does once it knows its rank, the id and its device. */
static int runRank(int myRank, int nRanks, int localRank, ncclUniqueId id, size_t size, const char* tag) {
  ncclComm_t comm;
  float *sendbuff, *recvbuff;
  cudaStream_t s;

  /* picking a GPU based on localRank, allocate device buffers */
  CUDACHECK(cudaSetDevice(localRank));
  CUDACHECK(cudaMalloc((void**)&sendbuff, size * sizeof(float)));
  CUDACHECK(cudaMalloc((void**)&recvbuff, size * sizeof(float)));
  CUDACHECK(cudaStreamCreate(&s));

  /* rank r contributes r+1 (plus a position-dependent part) */
  float* host = malloc(size * sizeof(float));
  for (size_t k = 0; k < size; k++) host[k] = (float)(myRank + 1) + (float)(k % 13);
  CUDACHECK(cudaMemcpy(sendbuff, host, size * sizeof(float), cudaMemcpyHostToDevice));

  /* initializing NCCL */
  NCCLCHECK(ncclCommInitRank(&comm, nRanks, id, myRank));

  /* communicating using NCCL */
  NCCLCHECK(ncclAllReduce((const void*)sendbuff, (void*)recvbuff, size, ncclFloat, ncclSum, comm, s));

  /* completing NCCL operation by synchronizing on the CUDA stream */
  CUDACHECK(cudaStreamSynchronize(s));

  /* checking: element k is sum_r (r+1) + nRanks * (k % 13) */
  CUDACHECK(cudaMemcpy(host, recvbuff, size * sizeof(float), cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t k = 0; k < size; k++) {
    float expect = (float)(nRanks * (nRanks + 1) / 2) + (float)(nRanks * (int)(k % 13));
    if (host[k] != expect) {
      if (bad == 0)
        printf("[%s Rank %d] element %zu is %g, expected %g\n", tag, myRank, k, host[k], expect);
      bad++;
    }
  }
  char busId[32] = "?";
  cudaDeviceGetPCIBusId(busId, sizeof(busId), localRank);
  printf("[%s Rank %d] device %d (%s): recvbuff[0..2] = %g %g %g, %zu of %zu elements wrong\n", tag, myRank,
         localRank, busId, host[0], size > 1 ? host[1] : 0.0, size > 2 ? host[2] : 0.0, bad, size);

  /* free device buffers */
  free(host);
  CUDACHECK(cudaFree(sendbuff));
  CUDACHECK(cudaFree(recvbuff));
  CUDACHECK(cudaStreamDestroy(s));

  /* finalizing NCCL */
  ncclCommDestroy(comm);

  if (bad) {
    printf("[%s Rank %d] Failed \n", tag, myRank);
    return EXIT_FAILURE;
  }
  printf("[%s Rank %d] Success \n", tag, myRank);
  return EXIT_SUCCESS;
}

static size_t parseCount(int argc, char* argv[]) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--count") == 0) return strtoull(argv[i + 1], NULL, 0);
  return 1024 * 1024;
}

#ifdef USE_MPI
int main(int argc, char* argv[]) {
  size_t size = parseCount(argc, argv);
  int myRank, nRanks, localRank = 0;

  /* initializing MPI */
  MPICHECK(MPI_Init(&argc, &argv));
  MPICHECK(MPI_Comm_rank(MPI_COMM_WORLD, &myRank));
  MPICHECK(MPI_Comm_size(MPI_COMM_WORLD, &nRanks));

  /* calculating localRank based on hostname which is used in selecting a GPU */
  uint64_t* hostHashs = malloc(nRanks * sizeof(uint64_t));
  char hostname[1024];
  getHostName(hostname, 1024);
  hostHashs[myRank] = getHostHash(hostname);
  MPICHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hostHashs, sizeof(uint64_t), MPI_BYTE, MPI_COMM_WORLD));
  for (int p = 0; p < nRanks; p++) {
    if (p == myRank) break;
    if (hostHashs[p] == hostHashs[myRank]) localRank++;
  }
  free(hostHashs);

  /* get NCCL unique ID at rank 0 and broadcast it to all others */
  ncclUniqueId id;
  if (myRank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPICHECK(MPI_Bcast((void*)&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));

  int rc = runRank(myRank, nRanks, localRank, id, size, "MPI");

  /* finalizing MPI */
  int worst = 0;
  MPICHECK(MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  MPICHECK(MPI_Finalize());
  return worst;
}

#else /* no MPI: fork the ranks ourselves, the id goes through pipes */

static void usage(const char* prog) {
  printf("usage: %s --nranks N [--count C]            fork N ranks, rank 0 passes the id by pipe\n"
         "       NCCL_COMM_ID=host:port %s --nranks N --rank R [--count C]   run one rank only\n",
         prog, prog);
  exit(2);
}

static int readFull(int fd, void* buf, size_t len) {
  char* p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= n;
  }
  return 0;
}

static int writeFull(int fd, const void* buf, size_t len) {
  const char* p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= n;
  }
  return 0;
}

int main(int argc, char* argv[]) {
  size_t size = parseCount(argc, argv);
  int nRanks = 0, onlyRank = -1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--nranks") == 0 && i + 1 < argc) nRanks = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rank") == 0 && i + 1 < argc) onlyRank = atoi(argv[++i]);
    else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) i++;
    else usage(argv[0]);
  }
  if (nRanks < 1 || size < 1 || onlyRank >= nRanks) usage(argv[0]);
  const char* commId = getenv("NCCL_COMM_ID");
  int haveCommId = commId && commId[0];

  if (onlyRank >= 0) {
    /* One rank of a job started by someone else: the id comes from NCCL_COMM_ID. */
    if (!haveCommId) {
      printf("--rank needs NCCL_COMM_ID=host:port (the address where rank 0 listens)\n");
      return 2;
    }
    ncclUniqueId id;
    NCCLCHECK(ncclGetUniqueId(&id));
    const char* lr = getenv("LOCAL_RANK");
    return runRank(onlyRank, nRanks, lr ? atoi(lr) : onlyRank, id, size, "Proc");
  }

  /* One pipe from rank 0 to each other rank (unused with NCCL_COMM_ID). */
  int(*pipes)[2] = calloc(nRanks, sizeof(*pipes));
  pid_t* pids = calloc(nRanks, sizeof(pid_t));
  for (int r = 1; r < nRanks; r++)
    if (pipe(pipes[r]) != 0) {
      perror("pipe");
      return EXIT_FAILURE;
    }
  pid_t parent = getpid();
  for (int r = 0; r < nRanks; r++) {
    pids[r] = fork();
    if (pids[r] < 0) {
      perror("fork");
      return EXIT_FAILURE;
    }
    if (pids[r] > 0) continue;
    /* child: rank r; die with the parent so that no rank outlives a killed job */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(EXIT_FAILURE);
    ncclUniqueId id;
    if (haveCommId) {
      NCCLCHECK(ncclGetUniqueId(&id));
    } else if (r == 0) {
      for (int p = 1; p < nRanks; p++) close(pipes[p][0]);
      NCCLCHECK(ncclGetUniqueId(&id));
      for (int p = 1; p < nRanks; p++) {
        if (writeFull(pipes[p][1], &id, sizeof(id)) != 0) printf("[Proc Rank 0] could not send the id to rank %d\n", p);
        close(pipes[p][1]);
      }
    } else {
      for (int p = 1; p < nRanks; p++) {
        close(pipes[p][1]);
        if (p != r) close(pipes[p][0]);
      }
      if (readFull(pipes[r][0], &id, sizeof(id)) != 0) {
        printf("[Proc Rank %d] rank 0 exited before sending the unique id\n", r);
        _exit(EXIT_FAILURE);
      }
      close(pipes[r][0]);
    }
    free(pipes);
    free(pids);
    exit(runRank(r, nRanks, r, id, size, "Proc"));
  }
  for (int r = 1; r < nRanks; r++) {
    close(pipes[r][0]);
    close(pipes[r][1]);
  }
  /* Wait for every rank; when one fails, the others would wait for it until
   * a timeout, so stop them at once. */
  int failed = 0, left = nRanks;
  while (left > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int r = 0;
    while (r < nRanks && pids[r] != pid) r++;
    if (r == nRanks) continue;
    pids[r] = 0;
    left--;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (WIFSIGNALED(status))
      printf("rank %d (pid %d) was killed by signal %d\n", r, (int)pid, WTERMSIG(status));
    else
      printf("rank %d (pid %d) exited with status %d\n", r, (int)pid, WEXITSTATUS(status));
    if (failed++ == 0 && left > 0) {
      printf("stopping the %d remaining ranks\n", left);
      for (int q = 0; q < nRanks; q++)
        if (pids[q] > 0) kill(pids[q], SIGKILL);
    }
  }
  free(pipes);
  free(pids);
  if (failed)
    printf("Failed: %d of %d ranks did not succeed\n", failed, nRanks);
  else
    printf("All %d ranks succeeded\n", nRanks);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
#endif
