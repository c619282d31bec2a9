/* Ranks as processes on virtual hosts, for the tests of this folder.
 * launchRanks() starts `self --child RANK N RPH EXTRA IDFILE` for every rank
 * with NCCL_HOSTID=host<rank/RPH>, publishes a unique id (made here, before
 * any child touched the environment) through IDFILE, waits, and returns how
 * many ranks failed. A child reads the id with readUniqueId(). */
#ifndef ANYCCL_TEST_LAUNCH_H
#define ANYCCL_TEST_LAUNCH_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Checks for the rank programs: report the call and the rank (a `rank`
 * variable in scope), exit 2. */
#define CK(x)                                                                              \
  do {                                                                                     \
    ncclResult_t r_ = (x);                                                                 \
    if (r_ != ncclSuccess) {                                                               \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #x, ncclGetErrorString(r_));      \
      exit(2);                                                                             \
    }                                                                                      \
  } while (0)
#define CUCK(x)                                                                            \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #x, cudaGetErrorString(e_));      \
      exit(2);                                                                             \
    }                                                                                      \
  } while (0)

static int readUniqueId(const char* idfile, ncclUniqueId* id) {
  FILE* f = NULL;
  for (int i = 0; i < 500 && !(f = fopen(idfile, "rb")); i++) usleep(10000);
  int ok = f && fread(id, sizeof(*id), 1, f) == 1;
  if (f) fclose(f);
  if (!ok) fprintf(stderr, "no unique id in %s\n", idfile);
  return ok ? 0 : -1;
}

static int launchRanks(const char* self, int n, int rph, const char* extra) {
  char idfile[64], tmp[80];
  snprintf(idfile, sizeof(idfile), "/tmp/anyccl-testid-%d", (int)getpid());
  snprintf(tmp, sizeof(tmp), "%s.tmp", idfile);
  unlink(idfile);
  pid_t pids[64];
  if (n > 64) n = 64;
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      char host[32], rs[16], ns[16], rphs[16];
      snprintf(host, sizeof(host), "host%d", r / rph);
      setenv("NCCL_HOSTID", host, 1);
      snprintf(rs, sizeof(rs), "%d", r);
      snprintf(ns, sizeof(ns), "%d", n);
      snprintf(rphs, sizeof(rphs), "%d", rph);
      execl("/proc/self/exe", self, "--child", rs, ns, rphs, extra ? extra : "-", idfile, (char*)NULL);
      _exit(127);
    }
  }
  int fails = 0;
  ncclUniqueId id;
  FILE* f = fopen(tmp, "wb");
  if (ncclGetUniqueId(&id) != ncclSuccess || f == NULL || fwrite(&id, sizeof(id), 1, f) != 1) {
    fprintf(stderr, "cannot make or publish the unique id\n");
    fails = n; /* children time out reading it */
  }
  if (f) fclose(f);
  rename(tmp, idfile);
  for (int r = 0; r < n; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d failed (status 0x%x)\n", r, st);
      if (fails < n) fails++;
    }
  }
  unlink(idfile);
  return fails;
}

#endif
