/* anyccl-cpu's driver library (build/cpu-driver/libcuda.so.1) against
 * anyccl-cpu's own answers: every entry point is resolved the way a net
 * plugin resolves it (cudaGetDriverEntryPointByVersion, the library found
 * through LD_LIBRARY_PATH), then its answers are compared with the runtime's
 * for devices, contexts, memory kinds and streams, and bad arguments and
 * unsupported calls must get their errors. */
#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>
#include "cpurt_test.h"
#include "../../cpu-runtime/driver/driver.h"

#define CU(want, call)                                                        \
  do {                                                                        \
    CUresult got_ = (call);                                                   \
    if (got_ != (want)) {                                                     \
      fprintf(stderr, "%s:%d: %s returned %d, expected %s (%d)\n", __FILE__,  \
              __LINE__, #call, got_, #want, (int)(want));                     \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static void *sym(const char *name, unsigned version) {
  void *fn = (void *)1;
  enum cudaDriverEntryPointQueryResult st = cudaDriverEntryPointVersionNotSufficent;
  CUDACHECK(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &st));
  if (fn == NULL || st != cudaDriverEntryPointSuccess) {
    fprintf(stderr, "%s (version %u) did not resolve (status %d)\n", name, version, (int)st);
    exit(1);
  }
  return fn;
}

/* The function types, by the plugin's names. */
#define T(name, ret, args) typedef ret(*name##_t) args
T(cuDriverGetVersion, CUresult, (int *));
T(cuGetErrorName, CUresult, (CUresult, const char **));
T(cuDeviceGetCount, CUresult, (int *));
T(cuDeviceGet, CUresult, (CUdevice *, int));
T(cuDeviceGetAttribute, CUresult, (int *, int, CUdevice));
T(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice));
T(cuCtxGetCurrent, CUresult, (CUcontext *));
T(cuCtxSetCurrent, CUresult, (CUcontext));
T(cuCtxGetDevice, CUresult, (CUdevice *));
T(cuMemAlloc, CUresult, (CUdeviceptr *, size_t));
T(cuMemFree, CUresult, (CUdeviceptr));
T(cuMemsetD8, CUresult, (CUdeviceptr, unsigned char, size_t));
T(cuMemcpyHtoDAsync, CUresult, (CUdeviceptr, const void *, size_t, CUstream));
T(cuMemGetAddressRange, CUresult, (CUdeviceptr *, size_t *, CUdeviceptr));
T(cuMemHostRegister, CUresult, (void *, size_t, unsigned));
T(cuMemHostUnregister, CUresult, (void *));
T(cuMemHostGetDevicePointer, CUresult, (CUdeviceptr *, void *, unsigned));
T(cuPointerGetAttribute, CUresult, (void *, int, CUdeviceptr));
T(cuPointerGetAttributes, CUresult, (unsigned, int *, void **, CUdeviceptr));
T(cuStreamCreate, CUresult, (CUstream *, unsigned));
T(cuStreamSynchronize, CUresult, (CUstream));
T(cuStreamDestroy, CUresult, (CUstream));
T(cuThreadExchangeStreamCaptureMode, CUresult, (int *));
T(cuFlushGPUDirectRDMAWrites, CUresult, (int, int));
T(cuMemCreate, CUresult, (unsigned long long *, size_t, const void *, unsigned long long));
T(cuMemAddressReserve, CUresult, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long));
T(cuMemGetHandleForAddressRange, CUresult, (void *, CUdeviceptr, size_t, int, unsigned long long));
#define R(name, version) name##_t name = (name##_t)sym(#name, version)

struct ptrInfo { unsigned type; int ordinal; CUdeviceptr start; size_t size; CUcontext ctx; bool managed; };
static CUresult info(cuPointerGetAttributes_t get, const void *p, struct ptrInfo *o) {
  int attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                 CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void *data[] = {&o->type, &o->ordinal, &o->start, &o->size, &o->ctx, &o->managed};
  memset(o, 0x5a, sizeof(*o));
  return get(6, attrs, data, (CUdeviceptr)(uintptr_t)p);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "absent") == 0) {
    /* without cpu-driver on the library path (or with an NVIDIA driver
     * there): no entry point, and the runtime says why */
    void *fn = (void *)1;
    EXPECT(cudaErrorInsufficientDriver, cudaGetDriverEntryPointByVersion("cuInit", &fn, 2000, 0, NULL));
    CHECK(fn == NULL);
    printf("cpurt_driver absent: PASS\n");
    return 0;
  }
  /* the library found is anyccl-cpu's, through the library path */
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == NULL) lib = dlopen("libcuda.so.1", RTLD_NOW);
  CHECK(lib != NULL && dlsym(lib, "anycclCpuDriverAbi") != NULL);

  /* resolution: versions and unknown names */
  void *fn = (void *)1;
  enum cudaDriverEntryPointQueryResult st;
  CUDACHECK(cudaGetDriverEntryPointByVersion("cuNoSuchCall", &fn, 12000, 0, &st));
  CHECK(fn == NULL && st == cudaDriverEntryPointSymbolNotFound);
  CUDACHECK(cudaGetDriverEntryPointByVersion("cuMemHostRegister", &fn, 4000, 0, &st));
  CHECK(fn == NULL && st == cudaDriverEntryPointVersionNotSufficent);
  CUDACHECK(cudaGetDriverEntryPointByVersion("cuCtxGetDevice", &fn, 13000, 0, &st)); /* the v2 ABI */
  CHECK(fn == NULL && st == cudaDriverEntryPointSymbolNotFound);
  EXPECT(cudaErrorInvalidValue, cudaGetDriverEntryPointByVersion("cuInit", &fn, 2000, 8, &st));
  EXPECT(cudaErrorInvalidValue, cudaGetDriverEntryPointByVersion(NULL, &fn, 2000, 0, &st));
  CUDACHECK(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &st));
  CHECK(fn == dlsym(lib, "cuMemAlloc") && st == cudaDriverEntryPointSuccess);

  R(cuDriverGetVersion, 2020); R(cuGetErrorName, 6000); R(cuDeviceGetCount, 2000);
  R(cuDeviceGet, 2000); R(cuDeviceGetAttribute, 2000); R(cuDevicePrimaryCtxRetain, 7000);
  R(cuCtxGetCurrent, 4000); R(cuCtxSetCurrent, 4000); R(cuCtxGetDevice, 2000);
  R(cuMemAlloc, 3020); R(cuMemFree, 3020); R(cuMemsetD8, 3020); R(cuMemcpyHtoDAsync, 3020);
  R(cuMemGetAddressRange, 3020); R(cuMemHostRegister, 6050); R(cuMemHostUnregister, 4000);
  R(cuMemHostGetDevicePointer, 3020); R(cuPointerGetAttribute, 4000);
  R(cuPointerGetAttributes, 7000); R(cuStreamCreate, 2000); R(cuStreamSynchronize, 2000);
  R(cuStreamDestroy, 4000); R(cuThreadExchangeStreamCaptureMode, 10010);
  R(cuFlushGPUDirectRDMAWrites, 11030); R(cuMemCreate, 10020); R(cuMemAddressReserve, 10020);
  R(cuMemGetHandleForAddressRange, 11070);

  /* versions, errors */
  int dv = 0, rv = 0;
  CU(CUDA_SUCCESS, cuDriverGetVersion(&dv));
  CUDACHECK(cudaDriverGetVersion(&rv));
  CHECK(dv == rv && dv >= 12000);
  CU(CUDA_ERROR_INVALID_VALUE, cuDriverGetVersion(NULL));
  const char *name = NULL;
  CU(CUDA_SUCCESS, cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &name));
  CHECK(name && strcmp(name, "CUDA_ERROR_NOT_SUPPORTED") == 0);

  /* devices: the runtime's, attribute for attribute */
  int n = -1, rn = -1;
  CU(CUDA_SUCCESS, cuDeviceGetCount(&n));
  CUDACHECK(cudaGetDeviceCount(&rn));
  CHECK(n == rn && n >= 2);
  CUdevice d;
  CU(CUDA_SUCCESS, cuDeviceGet(&d, n - 1));
  CHECK(d == n - 1);
  CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&d, n));
  CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGet(NULL, 0));
  const int attrs[] = {cudaDevAttrComputeCapabilityMajor, cudaDevAttrMultiProcessorCount,
                       cudaDevAttrPciBusId, cudaDevAttrUnifiedAddressing,
                       cudaDevAttrGPUDirectRDMASupported, cudaDevAttrCanMapHostMemory};
  for (int dev = 0; dev < n; dev++)
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
      int a = -7, b = -9;
      CU(CUDA_SUCCESS, cuDeviceGetAttribute(&a, attrs[i], dev));
      CUDACHECK(cudaDeviceGetAttribute(&b, (enum cudaDeviceAttr)attrs[i], dev));
      CHECK(a == b);
    }
  int v = -1;
  CU(CUDA_SUCCESS, cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 0));
  CHECK(v == 0);
  CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetAttribute(NULL, cudaDevAttrWarpSize, 0));
  CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetAttribute(&v, cudaDevAttrWarpSize, n));

  /* contexts: the current device's primary context, both ways */
  CUDACHECK(cudaSetDevice(n - 1));
  CUcontext c = NULL, p1 = NULL, pl = NULL;
  CU(CUDA_SUCCESS, cuCtxGetCurrent(&c));
  CU(CUDA_SUCCESS, cuDevicePrimaryCtxRetain(&pl, n - 1));
  CU(CUDA_SUCCESS, cuDevicePrimaryCtxRetain(&p1, 1));
  CHECK(c != NULL && c == pl && p1 != pl);
  CU(CUDA_SUCCESS, cuCtxGetDevice(&d));
  CHECK(d == n - 1);
  CU(CUDA_SUCCESS, cuCtxSetCurrent(p1));
  int rd = -1;
  CUDACHECK(cudaGetDevice(&rd));
  CHECK(rd == 1);
  CU(CUDA_SUCCESS, cuCtxSetCurrent(NULL));
  CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxGetDevice(&d));
  CU(CUDA_SUCCESS, cuCtxGetCurrent(&c));
  CHECK(c == NULL);
  CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxSetCurrent((CUcontext)(uintptr_t)0x1000));
  CU(CUDA_SUCCESS, cuCtxSetCurrent(p1));

  /* pointer attributes: device, pinned host, managed, registered, unknown */
  struct ptrInfo pi;
  CUdeviceptr dp = 0;
  CU(CUDA_SUCCESS, cuMemAlloc(&dp, 1000));
  struct cudaPointerAttributes ra;
  CUDACHECK(cudaPointerGetAttributes(&ra, (void *)(uintptr_t)dp));
  CHECK(ra.type == cudaMemoryTypeDevice && ra.device == 1);
  CU(CUDA_SUCCESS, info(cuPointerGetAttributes, (char *)(uintptr_t)dp + 10, &pi));
  CHECK(pi.type == CU_MEMORYTYPE_DEVICE && pi.ordinal == 1 && pi.start == dp && pi.size == 1000 &&
        pi.ctx == p1 && !pi.managed);
  CUdeviceptr base = 0;
  size_t size = 0;
  CU(CUDA_SUCCESS, cuMemGetAddressRange(&base, &size, dp + 999));
  CHECK(base == dp && size == 1000);
  void *h = NULL, *m = NULL;
  CUDACHECK(cudaSetDevice(0));
  CUDACHECK(cudaMallocHost(&h, 4096));
  CU(CUDA_SUCCESS, info(cuPointerGetAttributes, h, &pi));
  CHECK(pi.type == CU_MEMORYTYPE_HOST && pi.ordinal == 0 && pi.start == (uintptr_t)h && pi.size == 4096);
  CUDACHECK(cudaMallocManaged(&m, 64, cudaMemAttachGlobal));
  CU(CUDA_SUCCESS, info(cuPointerGetAttributes, m, &pi));
  CHECK(pi.type == CU_MEMORYTYPE_DEVICE && pi.managed);
  char *plain = malloc(8192);
  CHECK(plain != NULL);
  CU(CUDA_SUCCESS, info(cuPointerGetAttributes, plain, &pi));
  CHECK(pi.type == 0 && pi.ordinal == cudaInvalidDeviceId && pi.ctx == NULL && pi.size == 0);
  unsigned type = 77;
  CU(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (uintptr_t)plain));
  CU(CUDA_SUCCESS, cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp));
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CU(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttribute(&type, 99, dp));
  CU(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp));
  CU(CUDA_ERROR_NOT_SUPPORTED, cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_P2P_TOKENS, dp));
  CU(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttributes(0, NULL, NULL, dp));
  CU(CUDA_SUCCESS, cuMemHostRegister(plain, 8192, 0));
  CU(CUDA_SUCCESS, info(cuPointerGetAttributes, plain + 100, &pi));
  CHECK(pi.type == CU_MEMORYTYPE_HOST && pi.start == (uintptr_t)plain && pi.size == 8192);
  CUdeviceptr mapped = 0;
  CU(CUDA_SUCCESS, cuMemHostGetDevicePointer(&mapped, plain, 0));
  CHECK(mapped == (uintptr_t)plain);
  CU(CUDA_ERROR_INVALID_VALUE, cuMemHostGetDevicePointer(&mapped, plain, 1));
  CU(CUDA_SUCCESS, cuMemHostUnregister(plain));
  (void)cudaGetLastError();
  CU(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cuMemHostUnregister(plain));
  EXPECT(cudaSuccess, cudaGetLastError()); /* a driver call's failure is not the runtime's error */
  EXPECT(cudaErrorInvalidValue, cudaHostUnregister(NULL));
  CU(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cuMemHostUnregister(plain));
  EXPECT(cudaErrorInvalidValue, cudaGetLastError()); /* and the runtime's own stays */
  CU(CUDA_ERROR_INVALID_VALUE, cuMemHostRegister(NULL, 8, 0));

  /* a host-to-device copy on a driver stream lands */
  CUstream s = NULL;
  CU(CUDA_SUCCESS, cuStreamCreate(&s, 1));
  CU(CUDA_ERROR_INVALID_VALUE, cuStreamCreate(&s, 4));
  for (int i = 0; i < 1000; i++) plain[i] = (char)(i * 7);
  CU(CUDA_SUCCESS, cuMemsetD8(dp, 0xab, 1000));
  CHECK(((unsigned char *)(uintptr_t)dp)[999] == 0xab);
  CU(CUDA_SUCCESS, cuMemcpyHtoDAsync(dp, plain, 500, s));
  CU(CUDA_SUCCESS, cuStreamSynchronize(s));
  CHECK(memcmp((void *)(uintptr_t)dp, plain, 500) == 0 && ((unsigned char *)(uintptr_t)dp)[500] == 0xab);
  CU(CUDA_SUCCESS, cuStreamDestroy(s));
  int mode = cudaStreamCaptureModeRelaxed;
  CU(CUDA_SUCCESS, cuThreadExchangeStreamCaptureMode(&mode));
  enum cudaStreamCaptureMode back = cudaStreamCaptureModeGlobal;
  CUDACHECK(cudaThreadExchangeStreamCaptureMode(&back));
  CHECK(back == cudaStreamCaptureModeRelaxed);
  CUDACHECK(cudaThreadExchangeStreamCaptureMode(&back));

  /* frees: only what cuMemAlloc-style calls made, once */
  CU(CUDA_ERROR_INVALID_VALUE, cuMemFree((uintptr_t)plain));
  CU(CUDA_ERROR_INVALID_VALUE, cuMemFree((uintptr_t)h));
  CU(CUDA_SUCCESS, cuMemFree(dp));
  CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(dp));
  CU(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, &size, dp));

  /* host memory needs no flush; VMM and dma-buf do not exist here */
  CU(CUDA_SUCCESS, cuFlushGPUDirectRDMAWrites(0, 100));
  CU(CUDA_ERROR_INVALID_VALUE, cuFlushGPUDirectRDMAWrites(3, 100));
  unsigned long long handle;
  char prop[64] = {0};
  CU(CUDA_ERROR_NOT_SUPPORTED, cuMemCreate(&handle, 1 << 21, prop, 0));
  CU(CUDA_ERROR_INVALID_VALUE, cuMemCreate(NULL, 1 << 21, prop, 0));
  CUdeviceptr va;
  CU(CUDA_ERROR_NOT_SUPPORTED, cuMemAddressReserve(&va, 1 << 21, 0, 0, 0));
  int fd;
  CU(CUDA_ERROR_NOT_SUPPORTED, cuMemGetHandleForAddressRange(&fd, (uintptr_t)h, 4096, 1, 0));

  CUDACHECK(cudaFree(m));
  CUDACHECK(cudaFreeHost(h));
  free(plain);
  printf("cpurt_driver: PASS (%d devices)\n", n);
  return 0;
}
