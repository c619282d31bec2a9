/* anyccl-cpu: devices, bus ids, errors, versions.
 *
 * Runs with ANYCCL_CPU_DEVICES=6 and NCCL_HOSTID unset (set by CTest).
 * Children started with another environment check the count's default and
 * that a different NCCL_HOSTID gives different bus ids. */
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cpurt_test.h"

#define NDEV 6

/* Child mode: print the device count and every bus id on one line. */
static int printBusIds(void) {
  int n;
  char id[32];
  CUDACHECK(cudaGetDeviceCount(&n));
  printf("%d", n);
  for (int d = 0; d < n; d++) {
    CUDACHECK(cudaDeviceGetPCIBusId(id, sizeof(id), d));
    printf(" %s", id);
  }
  printf("\n");
  return 0;
}

/* Runs this program in child mode with the given environment changes
 * ("NAME=value", or "NAME" to unset); returns its output line. */
static void runChild(const char *env1, const char *env2, char *out, size_t len) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    const char *envs[] = {env1, env2};
    for (int i = 0; i < 2; i++) {
      if (envs[i] == NULL) continue;
      const char *eq = strchr(envs[i], '=');
      if (eq == NULL) {
        unsetenv(envs[i]);
      } else {
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - envs[i]), envs[i]);
        setenv(name, eq + 1, 1);
      }
    }
    dup2(fds[1], 1);
    close(fds[0]);
    execl("/proc/self/exe", "cpurt_device", "busids", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  size_t got = 0;
  ssize_t r;
  while (got + 1 < len && (r = read(fds[0], out + got, len - 1 - got)) > 0) got += (size_t)r;
  out[got] = '\0';
  close(fds[0]);
  int status;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void testCountAndProps(void) {
  int n = -1, dev = -1;
  CUDACHECK(cudaGetDeviceCount(&n));
  CHECK(n == NDEV);
  CUDACHECK(cudaGetDevice(&dev));
  CHECK(dev == 0);
  struct cudaDeviceProp p;
  CUDACHECK(cudaGetDeviceProperties(&p, NDEV - 1));
  CHECK(strlen(p.name) > 0 && p.warpSize == 32 && p.totalGlobalMem > 0);
  CHECK(p.multiProcessorCount >= 1 && p.unifiedAddressing == 1 && p.canMapHostMemory == 1);
  int v;
  CUDACHECK(cudaDeviceGetAttribute(&v, cudaDevAttrPciBusId, NDEV - 1));
  CHECK(v == p.pciBusID);
  CUDACHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0));
  CHECK(v == p.major);
  CUDACHECK(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 0));
  CHECK(v == 32);
  EXPECT(cudaErrorInvalidValue, cudaDeviceGetAttribute(&v, (enum cudaDeviceAttr)9999, 0));
  EXPECT(cudaErrorInvalidDevice, cudaGetDeviceProperties(&p, NDEV));
  EXPECT(cudaErrorInvalidDevice, cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, -1));
  size_t freeMem, totalMem;
  CUDACHECK(cudaMemGetInfo(&freeMem, &totalMem));
  CHECK(totalMem > 0 && freeMem <= totalMem);
  int drv, rt;
  CUDACHECK(cudaDriverGetVersion(&drv));
  CUDACHECK(cudaRuntimeGetVersion(&rt));
  CHECK(rt == CUDART_VERSION && drv >= rt);
  int least, greatest;
  CUDACHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CHECK(least == 0 && greatest < 0);
  CUDACHECK(cudaFree(NULL));
}

static void testBusIds(void) {
  char ids[NDEV][32];
  for (int d = 0; d < NDEV; d++) {
    CUDACHECK(cudaDeviceGetPCIBusId(ids[d], sizeof(ids[d]), d));
    CHECK(strlen(ids[d]) == 12 && ids[d][4] == ':' && ids[d][7] == ':' && ids[d][10] == '.');
    CHECK(strncmp(ids[d], "0000:", 5) == 0);   /* no NCCL_HOSTID: domain 0 */
    for (int e = 0; e < d; e++) CHECK(strcmp(ids[d], ids[e]) != 0);
    for (const char *c = ids[d]; *c; c++) CHECK(!(*c >= 'A' && *c <= 'F'));
    int back = -1;
    CUDACHECK(cudaDeviceGetByPCIBusId(&back, ids[d]));
    CHECK(back == d);
    char upper[32];
    for (size_t i = 0; i <= strlen(ids[d]); i++)
      upper[i] = (char)(ids[d][i] >= 'a' ? ids[d][i] - 32 : ids[d][i]);
    CUDACHECK(cudaDeviceGetByPCIBusId(&back, upper));
    CHECK(back == d);
    char longDomain[40];
    snprintf(longDomain, sizeof(longDomain), "0000%s", ids[d]);
    CUDACHECK(cudaDeviceGetByPCIBusId(&back, longDomain));
    CHECK(back == d);
    CUDACHECK(cudaDeviceGetByPCIBusId(&back, ids[d] + 5));   /* "bb:dd.f" */
    CHECK(back == d);
  }
  int dev;
  EXPECT(cudaErrorInvalidDevice, cudaDeviceGetByPCIBusId(&dev, "0001:1b:00.0"));
  EXPECT(cudaErrorInvalidDevice, cudaDeviceGetByPCIBusId(&dev, "0000:01:00.0"));
  EXPECT(cudaErrorInvalidValue, cudaDeviceGetByPCIBusId(&dev, "not a bus id"));
  EXPECT(cudaErrorInvalidDevice, cudaDeviceGetPCIBusId(ids[0], 32, NDEV));

  /* Other virtual hosts: the same device index gets a different id. */
  char mine[512], other[512], named1[512], named2[512], again[512];
  runChild(NULL, NULL, mine, sizeof(mine));
  runChild("NCCL_HOSTID=7", NULL, other, sizeof(other));
  runChild("NCCL_HOSTID=node-a", NULL, named1, sizeof(named1));
  runChild("NCCL_HOSTID=node-b", NULL, named2, sizeof(named2));
  runChild("NCCL_HOSTID=node-a", NULL, again, sizeof(again));
  CHECK(strncmp(mine, "6 0000:", 7) == 0);
  CHECK(strncmp(other, "6 0007:", 7) == 0);
  CHECK(strcmp(named1, again) == 0);           /* stable per name */
  CHECK(strcmp(mine, other) != 0 && strcmp(named1, named2) != 0 && strcmp(named1, mine) != 0);
  CHECK(strcmp(mine + 2, other + 2) != 0);
  for (int d = 0; d < NDEV; d++) CHECK(strstr(other, ids[d]) == NULL);

  /* ANYCCL_CPU_DEVICES: default 8 without it, and for a bad value. */
  char out[1024];
  runChild("ANYCCL_CPU_DEVICES", NULL, out, sizeof(out));
  CHECK(strncmp(out, "8 ", 2) == 0);
  runChild("ANYCCL_CPU_DEVICES=lots", NULL, out, sizeof(out));
  CHECK(strncmp(out, "8 ", 2) == 0);
  runChild("ANYCCL_CPU_DEVICES=1025", NULL, out, sizeof(out));
  CHECK(strncmp(out, "8 ", 2) == 0);
  runChild("ANYCCL_CPU_DEVICES=1", NULL, out, sizeof(out));
  CHECK(strcmp(out, "1 0000:1b:00.0\n") == 0);
}

static void testManyBusIds(void) {
  char out[1024 * 16 + 16];
  runChild("ANYCCL_CPU_DEVICES=1024", "NCCL_HOSTID=3", out, sizeof(out));
  CHECK(strncmp(out, "1024 ", 5) == 0);
  /* 1024 distinct ids, each 12 characters, separated by single spaces. */
  CHECK(strlen(out) == 4 + 1024 * 13 + 1);
  for (int i = 0; i < 1024; i++)
    for (int j = 0; j < i; j++) CHECK(memcmp(out + 5 + 13 * i, out + 5 + 13 * j, 12) != 0);
}

static void *otherThread(void *arg) {
  int dev = -1;
  CUDACHECK(cudaGetDevice(&dev));   /* a new thread starts on device 0 */
  CHECK(dev == 0);
  CUDACHECK(cudaSetDevice(3));
  CUDACHECK(cudaGetDevice(&dev));
  CHECK(dev == 3);
  CHECK(cudaGetLastError() == cudaSuccess);   /* errors are per thread */
  return NULL;
}

static void testCurrentDeviceAndErrors(void) {
  CUDACHECK(cudaSetDevice(2));
  EXPECT(cudaErrorInvalidDevice, cudaSetDevice(NDEV));
  EXPECT(cudaErrorInvalidDevice, cudaSetDevice(-1));
  pthread_t t;
  CHECK(pthread_create(&t, NULL, otherThread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  int dev;
  CUDACHECK(cudaGetDevice(&dev));
  CHECK(dev == 2);
  EXPECT(cudaErrorInvalidDevice, cudaPeekAtLastError());
  EXPECT(cudaErrorInvalidDevice, cudaGetLastError());
  EXPECT(cudaSuccess, cudaGetLastError());
  EXPECT(cudaErrorInvalidValue, cudaGetDeviceCount(NULL));
  CUDACHECK(cudaSetDevice(0));
  EXPECT(cudaErrorInvalidValue, cudaGetLastError());   /* success leaves it */
  CHECK(strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0);
  CHECK(strcmp(cudaGetErrorName(cudaSuccess), "cudaSuccess") == 0);
  CHECK(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0);
  CHECK(strcmp(cudaGetErrorName((cudaError_t)12345), "unrecognized error code") == 0);
  CHECK(strcmp(cudaGetErrorString((cudaError_t)12345), "unrecognized error code") == 0);
  CHECK(strlen(cudaGetErrorString(cudaErrorInvalidResourceHandle)) > 0);
  /* Too few virtual devices is the usual cause: the text says which knob. */
  CHECK(strstr(cudaGetErrorString(cudaErrorInvalidDevice), "ANYCCL_CPU_DEVICES") != NULL);
  CHECK(cudaErrorNotReady == 600 && cudaErrorInvalidResourceHandle == 400 &&
        cudaErrorInvalidDevice == 101 && cudaErrorMapBufferObjectFailed == 205);
}

static void testPeersAndFlags(void) {
  int can = -1;
  CUDACHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
  CHECK(can == 1);
  CUDACHECK(cudaDeviceCanAccessPeer(&can, 1, 1));
  CHECK(can == 0);
  EXPECT(cudaErrorInvalidDevice, cudaDeviceCanAccessPeer(&can, 0, NDEV));
  CUDACHECK(cudaSetDevice(1));
  CUDACHECK(cudaDeviceEnablePeerAccess(2, 0));
  EXPECT(cudaErrorPeerAccessAlreadyEnabled, cudaDeviceEnablePeerAccess(2, 0));
  EXPECT(cudaErrorInvalidDevice, cudaDeviceEnablePeerAccess(1, 0));
  EXPECT(cudaErrorInvalidValue, cudaDeviceEnablePeerAccess(3, 1));
  CUDACHECK(cudaDeviceDisablePeerAccess(2));
  EXPECT(cudaErrorPeerAccessNotEnabled, cudaDeviceDisablePeerAccess(2));
  unsigned flags = 99;
  CUDACHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync | cudaDeviceMapHost));
  CUDACHECK(cudaGetDeviceFlags(&flags));
  CHECK(flags == (cudaDeviceScheduleBlockingSync | cudaDeviceMapHost));
  EXPECT(cudaErrorInvalidValue, cudaSetDeviceFlags(0x100));
  CUDACHECK(cudaDeviceSynchronize());
  CUDACHECK(cudaDeviceReset());
  CUDACHECK(cudaGetDeviceFlags(&flags));
  CHECK(flags == 0);
  CUDACHECK(cudaSetDevice(0));
  cudaGetLastError();
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "busids") == 0) return printBusIds();
  testCountAndProps();
  testBusIds();
  testManyBusIds();
  testCurrentDeviceAndErrors();
  testPeersAndFlags();
  printf("cpurt_device: OK\n");
  return 0;
}
