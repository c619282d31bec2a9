/* anyccl-cpu: allocation, copies of every kind, memset, pointer attributes,
 * host registration and the errors of bad pointers. */
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include "cpurt_test.h"

#define N (1 << 20)

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31 + seed);
}

static int same(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i * 31 + seed)) return 0;
  return 1;
}

static void testCopies(void) {
  unsigned char *d1, *d2, *h, *pinned;
  CUDACHECK(cudaMalloc((void **)&d1, N));
  CUDACHECK(cudaMalloc((void **)&d2, N));
  CUDACHECK(cudaMallocHost((void **)&pinned, N));
  h = malloc(N);
  CHECK(h != NULL && d1 != d2 && ((uintptr_t)d1 % 256) == 0);
  fill(h, N, 1);
  CUDACHECK(cudaMemcpy(d1, h, N, cudaMemcpyHostToDevice));
  CUDACHECK(cudaMemcpy(d2, d1, N, cudaMemcpyDeviceToDevice));
  CUDACHECK(cudaMemcpy(pinned, d2, N, cudaMemcpyDeviceToHost));
  CHECK(same(pinned, N, 1));
  fill(h, N, 2);
  CUDACHECK(cudaMemcpy(pinned, h, N, cudaMemcpyHostToHost));
  CUDACHECK(cudaMemcpy(d1, pinned, N, cudaMemcpyDefault));
  CHECK(same(d1, N, 2));                      /* "device" memory is host-visible */
  EXPECT(cudaErrorInvalidMemcpyDirection, cudaMemcpy(d1, h, N, (enum cudaMemcpyKind)7));
  EXPECT(cudaErrorInvalidValue, cudaMemcpy(NULL, h, N, cudaMemcpyDefault));
  CUDACHECK(cudaMemcpy(NULL, NULL, 0, cudaMemcpyDefault));   /* nothing to do */

  CUDACHECK(cudaMemset(d1, 0xab, N));
  for (size_t i = 0; i < N; i += 4097) CHECK(d1[i] == 0xab);
  CHECK(d1[N - 1] == 0xab);
  CUDACHECK(cudaMemset(d1 + 10, 0x1ff, 5));   /* only the low byte counts */
  CHECK(d1[9] == 0xab && d1[10] == 0xff && d1[14] == 0xff && d1[15] == 0xab);

  /* 2D: a 3 x 4 block from pitch 16 to pitch 8. */
  unsigned char src[64], dst[32];
  for (int i = 0; i < 64; i++) src[i] = (unsigned char)i;
  memset(dst, 0, sizeof(dst));
  CUDACHECK(cudaMemcpy2D(dst, 8, src, 16, 3, 4, cudaMemcpyHostToHost));
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 8; c++) CHECK(dst[r * 8 + c] == (c < 3 ? r * 16 + c : 0));
  EXPECT(cudaErrorInvalidPitchValue, cudaMemcpy2D(dst, 2, src, 16, 3, 4, cudaMemcpyDefault));
  CUDACHECK(cudaMemset2D(dst, 8, 7, 2, 4));
  for (int r = 0; r < 4; r++) CHECK(dst[r * 8] == 7 && dst[r * 8 + 1] == 7 && dst[r * 8 + 2] == r * 16 + 2);

  /* Peer copies between devices. */
  fill(d1, N, 3);
  CUDACHECK(cudaMemcpyPeer(d2, 1, d1, 0, N));
  CHECK(same(d2, N, 3));
  EXPECT(cudaErrorInvalidDevice, cudaMemcpyPeer(d2, 99, d1, 0, N));

  /* Asynchronous forms, on a stream and on the legacy stream. */
  cudaStream_t s;
  CUDACHECK(cudaStreamCreate(&s));
  fill(h, N, 4);
  CUDACHECK(cudaMemcpyAsync(d1, h, N, cudaMemcpyHostToDevice, s));
  CUDACHECK(cudaMemsetAsync(d1, 0, 16, s));
  CUDACHECK(cudaMemcpyPeerAsync(d2, 1, d1, 0, N, s));
  CUDACHECK(cudaMemcpy2DAsync(pinned, 4, d2, 4, 4, 2, cudaMemcpyDefault, s));
  CUDACHECK(cudaMemset2DAsync(pinned + 8, 8, 9, 1, 1, 0));
  CUDACHECK(cudaStreamSynchronize(s));
  CUDACHECK(cudaStreamSynchronize(0));
  CHECK(d2[0] == 0 && d2[15] == 0);
  for (size_t i = 16; i < N; i++) CHECK(d2[i] == (unsigned char)(i * 31 + 4));
  CHECK(pinned[7] == 0 && pinned[8] == 9);
  CUDACHECK(cudaStreamDestroy(s));

  CUDACHECK(cudaFree(d1));
  CUDACHECK(cudaFree(d2));
  CUDACHECK(cudaFreeHost(pinned));
  free(h);
}

static void testAttributes(void) {
  char *d, *m, *hp, stackBuf[64];
  CUDACHECK(cudaSetDevice(3));
  CUDACHECK(cudaMalloc((void **)&d, 1000));
  CUDACHECK(cudaMallocManaged((void **)&m, 100, cudaMemAttachGlobal));
  CUDACHECK(cudaHostAlloc((void **)&hp, 100, cudaHostAllocMapped | cudaHostAllocPortable));
  CUDACHECK(cudaSetDevice(0));
  struct cudaPointerAttributes a;
  CUDACHECK(cudaPointerGetAttributes(&a, d + 999));
  CHECK(a.type == cudaMemoryTypeDevice && a.device == 3 && a.devicePointer == d + 999);
  CUDACHECK(cudaPointerGetAttributes(&a, d + 1000));    /* one past the end */
  CHECK(a.type == cudaMemoryTypeUnregistered);
  CUDACHECK(cudaPointerGetAttributes(&a, m + 5));
  CHECK(a.type == cudaMemoryTypeManaged && a.device == 3 && a.hostPointer == m + 5);
  CUDACHECK(cudaPointerGetAttributes(&a, hp));
  CHECK(a.type == cudaMemoryTypeHost && a.hostPointer == hp && a.devicePointer == hp);
  CUDACHECK(cudaPointerGetAttributes(&a, stackBuf));
  CHECK(a.type == cudaMemoryTypeUnregistered && a.devicePointer == NULL);
  EXPECT(cudaErrorInvalidValue, cudaPointerGetAttributes(NULL, d));

  void *dp = NULL;
  unsigned flags = 0;
  CUDACHECK(cudaHostGetDevicePointer(&dp, hp + 3, 0));
  CHECK(dp == hp + 3);
  CUDACHECK(cudaHostGetFlags(&flags, hp));
  CHECK(flags == (cudaHostAllocMapped | cudaHostAllocPortable));
  EXPECT(cudaErrorInvalidValue, cudaHostGetDevicePointer(&dp, stackBuf, 0));
  EXPECT(cudaErrorInvalidValue, cudaHostGetFlags(&flags, d));

  /* Registration of user memory. */
  CUDACHECK(cudaHostRegister(stackBuf, sizeof(stackBuf), cudaHostRegisterDefault));
  CUDACHECK(cudaPointerGetAttributes(&a, stackBuf + 10));
  CHECK(a.type == cudaMemoryTypeHost && a.device == 0);
  CUDACHECK(cudaHostGetDevicePointer(&dp, stackBuf, 0));
  EXPECT(cudaErrorHostMemoryAlreadyRegistered, cudaHostRegister(stackBuf + 8, 8, 0));
  EXPECT(cudaErrorHostMemoryNotRegistered, cudaHostUnregister(stackBuf + 1));
  CUDACHECK(cudaHostUnregister(stackBuf));
  EXPECT(cudaErrorHostMemoryNotRegistered, cudaHostUnregister(stackBuf));
  CUDACHECK(cudaPointerGetAttributes(&a, stackBuf));
  CHECK(a.type == cudaMemoryTypeUnregistered);

  /* Frees: the wrong kind, interior pointers, unknown pointers, twice. */
  EXPECT(cudaErrorInvalidValue, cudaFree(hp));
  EXPECT(cudaErrorInvalidValue, cudaFreeHost(d));
  EXPECT(cudaErrorInvalidValue, cudaFree(d + 1));
  EXPECT(cudaErrorInvalidValue, cudaFree(stackBuf));
  CUDACHECK(cudaFree(d));
  EXPECT(cudaErrorInvalidValue, cudaFree(d));
  CUDACHECK(cudaFree(m));
  CUDACHECK(cudaFreeHost(hp));
  CUDACHECK(cudaFreeHost(NULL));
  EXPECT(cudaErrorInvalidValue, cudaMalloc(NULL, 10));
  void *z = (void *)1;
  CUDACHECK(cudaMalloc(&z, 0));
  CHECK(z == NULL);
  EXPECT(cudaErrorMemoryAllocation, cudaMalloc(&z, SIZE_MAX - 10));
  EXPECT(cudaErrorInvalidValue, cudaMallocManaged(&z, 10, 0x40));
  cudaGetLastError();
}

static void testStreamOrderedAlloc(void) {
  cudaStream_t s;
  char *p;
  CUDACHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDACHECK(cudaMallocAsync((void **)&p, 4096, s));
  CUDACHECK(cudaMemsetAsync(p, 5, 4096, s));
  CUDACHECK(cudaFreeAsync(p, s));
  EXPECT(cudaErrorInvalidValue, cudaFreeAsync(p, s));   /* already freed */
  CUDACHECK(cudaStreamSynchronize(s));
  EXPECT(cudaErrorInvalidResourceHandle, cudaMallocAsync((void **)&p, 16, (cudaStream_t)0x1234));
  CUDACHECK(cudaStreamDestroy(s));
  cudaGetLastError();
}

/* Many allocations at once: each has its own descriptor, and the soft limit
 * on descriptors is raised when it runs out (here: lowered first). */
static void testManyAllocations(void) {
  enum { COUNT = 3000 };
  struct rlimit r;
  CHECK(getrlimit(RLIMIT_NOFILE, &r) == 0);
  if (r.rlim_max >= COUNT + 100) {
    r.rlim_cur = 512;
    CHECK(setrlimit(RLIMIT_NOFILE, &r) == 0);
  }
  static void *ptrs[COUNT];
  for (int i = 0; i < COUNT; i++) CUDACHECK(cudaMalloc(&ptrs[i], 64 + i));
  for (int i = 0; i < COUNT; i++) {
    struct cudaPointerAttributes a;
    CUDACHECK(cudaPointerGetAttributes(&a, (char *)ptrs[i] + 63 + i));
    CHECK(a.type == cudaMemoryTypeDevice);
  }
  for (int i = COUNT - 1; i >= 0; i -= 2) CUDACHECK(cudaFree(ptrs[i]));
  for (int i = COUNT - 2; i >= 0; i -= 2) CUDACHECK(cudaFree(ptrs[i]));
}

int main(void) {
  testCopies();
  testAttributes();
  testStreamOrderedAlloc();
  testManyAllocations();
  printf("cpurt_memory: OK\n");
  return 0;
}
