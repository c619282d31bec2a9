/* anyccl-cpu: IPC memory handles across exec'd and forked children. */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cpurt_test.h"

#define SIZE ((1 << 20) + 123)

static void toHex(const cudaIpcMemHandle_t *h, char *out) {
  for (int i = 0; i < CUDA_IPC_HANDLE_SIZE; i++)
    sprintf(out + 2 * i, "%02x", (unsigned char)h->reserved[i]);
}

static void fromHex(const char *in, cudaIpcMemHandle_t *h) {
  CHECK(strlen(in) == 2 * CUDA_IPC_HANDLE_SIZE);
  for (int i = 0; i < CUDA_IPC_HANDLE_SIZE; i++) {
    unsigned v;
    CHECK(sscanf(in + 2 * i, "%2x", &v) == 1);
    h->reserved[i] = (char)v;
  }
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 7 + seed);
}

static int same(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i * 7 + seed)) return 0;
  return 1;
}

/* In the child: open, check the parent's data, write ours, close. */
static void useHandle(cudaIpcMemHandle_t h, unsigned seenSeed, unsigned newSeed) {
  unsigned char *p, *again;
  CUDACHECK(cudaIpcOpenMemHandle((void **)&p, h, cudaIpcMemLazyEnablePeerAccess));
  CHECK(same(p, SIZE, seenSeed));
  struct cudaPointerAttributes a;
  CUDACHECK(cudaPointerGetAttributes(&a, p + SIZE - 1));
  CHECK(a.type == cudaMemoryTypeDevice && a.device == 2);
  CUDACHECK(cudaIpcOpenMemHandle((void **)&again, h, 0));   /* counted, same mapping */
  CHECK(again == p);
  cudaIpcMemHandle_t re;
  EXPECT(cudaErrorInvalidValue, cudaIpcGetMemHandle(&re, p));   /* no re-export */
  EXPECT(cudaErrorInvalidValue, cudaFree(p));
  CUDACHECK(cudaIpcCloseMemHandle(again));
  fill(p, SIZE, newSeed);
  CUDACHECK(cudaMemset(p + 5, 0x5a, 1));    /* and through the runtime */
  CUDACHECK(cudaIpcCloseMemHandle(p));
  EXPECT(cudaErrorInvalidValue, cudaIpcCloseMemHandle(p));
}

static void runExec(const char *mode, const cudaIpcMemHandle_t *h) {
  char hex[2 * CUDA_IPC_HANDLE_SIZE + 1];
  toHex(h, hex);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    execl("/proc/self/exe", "cpurt_ipc", mode, hex, (char *)NULL);
    _exit(127);
  }
  int status;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int childMain(const char *mode, const char *hex) {
  cudaIpcMemHandle_t h;
  fromHex(hex, &h);
  if (strcmp(mode, "open") == 0) {
    useHandle(h, 1, 2);
  } else {                                  /* "stale": the memory is gone */
    void *p;
    EXPECT(cudaErrorMapBufferObjectFailed, cudaIpcOpenMemHandle(&p, h, 0));
  }
  return 0;
}

static void sleepFn(void *arg) { sleepMs(300); }

int main(int argc, char **argv) {
  if (argc == 3) return childMain(argv[1], argv[2]);
  unsigned char *buf;
  cudaIpcMemHandle_t h;
  CUDACHECK(cudaSetDevice(2));
  CUDACHECK(cudaMalloc((void **)&buf, SIZE));
  CUDACHECK(cudaSetDevice(0));
  fill(buf, SIZE, 1);
  CUDACHECK(cudaIpcGetMemHandle(&h, buf + 1000));   /* inside: names the base */

  /* A fork+exec'd child writes through the handle. */
  runExec("open", &h);
  CHECK(buf[5] == 0x5a);
  buf[5] = (unsigned char)(5 * 7 + 2);
  CHECK(same(buf, SIZE, 2));

  /* A forked child (no exec), while the parent has work in flight: the
   * child inherits no workers, so its streams must not report that work. */
  cudaStream_t s;
  CUDACHECK(cudaStreamCreate(&s));
  CUDACHECK(cudaLaunchHostFunc(s, sleepFn, NULL));
  fill(buf, SIZE, 1);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    CUDACHECK(cudaStreamQuery(s));
    CUDACHECK(cudaStreamSynchronize(s));
    unsigned char *p;
    CUDACHECK(cudaIpcOpenMemHandle((void **)&p, h, 0));
    CHECK(same(p, SIZE, 1));
    fill(p, SIZE, 3);
    CUDACHECK(cudaIpcCloseMemHandle(p));
    _exit(0);   /* no exit handlers: the parent's copy of the state is not ours to tear down */
  }
  int status;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(same(buf, SIZE, 3));
  EXPECT(cudaErrorNotReady, cudaStreamQuery(s));   /* the parent's work goes on */
  CUDACHECK(cudaStreamSynchronize(s));
  CUDACHECK(cudaStreamDestroy(s));

  /* In the same process: a second mapping of the same memory. */
  unsigned char *mine;
  CUDACHECK(cudaIpcOpenMemHandle((void **)&mine, h, 0));
  mine[17] = 99;
  CHECK(buf[17] == 99);
  CUDACHECK(cudaIpcCloseMemHandle(mine));

  /* Bad input. */
  cudaIpcMemHandle_t junk;
  void *p;
  memset(&junk, 0x42, sizeof(junk));
  EXPECT(cudaErrorInvalidValue, cudaIpcOpenMemHandle(&p, junk, 0));
  EXPECT(cudaErrorInvalidValue, cudaIpcOpenMemHandle(&p, h, 0x10));
  EXPECT(cudaErrorInvalidValue, cudaIpcGetMemHandle(&junk, &status));
  void *pinned;
  CUDACHECK(cudaMallocHost(&pinned, 64));
  EXPECT(cudaErrorInvalidValue, cudaIpcGetMemHandle(&junk, pinned));
  CUDACHECK(cudaFreeHost(pinned));
  EXPECT(cudaErrorInvalidValue, cudaIpcCloseMemHandle(buf));

  /* After cudaFree the handle is stale, also when its descriptor number
   * has been reused by a newer allocation. */
  CUDACHECK(cudaFree(buf));
  runExec("stale", &h);
  void *newer;
  CUDACHECK(cudaMalloc(&newer, SIZE));
  runExec("stale", &h);
  CUDACHECK(cudaFree(newer));
  cudaGetLastError();
  printf("cpurt_ipc: OK\n");
  return 0;
}
