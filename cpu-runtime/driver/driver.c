/* anyccl-cpu's driver library: the CUDA driver API entry points that a
 * program (or a library it loads, such as an NCCL net plugin) resolves at run
 * time, with anyccl-cpu's host-memory semantics. Built as libcuda.so.1 into
 * its own folder (build/cpu-driver), so that it is found only where that
 * folder is on LD_LIBRARY_PATH; it never replaces an NVIDIA driver.
 *
 * Every entry point forwards to anyccl-cpu's runtime (devices, memory
 * registry, streams), so the driver and the runtime give the same answers:
 * a context is a device's primary context; CUdevice is the device ordinal;
 * CUstream is the runtime's stream handle; pointer attributes come from
 * anyccl-cpu's registry. cuGetProcAddress returns the entry points below
 * (at the API versions whose signature they have) and NULL with
 * CUDA_ERROR_NOT_FOUND for the rest. Bad arguments get
 * CUDA_ERROR_INVALID_VALUE; what has no host meaning here (virtual memory
 * management, dma-buf export) gets CUDA_ERROR_NOT_SUPPORTED.
 *
 * Type and enum values follow the CUDA 13 driver ABI. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "cuda_runtime_api.h"
#include "driver.h"

#define API __attribute__((visibility("default")))

struct cuCtxObj { char unused; };   /* a context is its address: &primaryCtx[device] */
static struct cuCtxObj primaryCtx[ANYCCL_CU_MAX_DEVICES];
/* The thread's current context: the runtime's current device's primary
 * context, unless the thread unbound it with cuCtxSetCurrent(NULL). */
static _Thread_local bool ctxUnbound;

API int anycclCpuDriverAbi(void) { return 1; }

static CUresult fromRt(cudaError_t e) {
  switch ((int)e) {
  case 0: case 1: case 2: case 3: case 100: case 101: case 400: case 600:
  case 712: case 713: case 800: case 801: case 900: case 901: case 902:
  case 903: case 904: case 905: case 906: case 907: case 908:
    return (CUresult)e;
  case 35: return CUDA_ERROR_NOT_INITIALIZED;   /* cudaErrorInsufficientDriver */
  default: return CUDA_ERROR_UNKNOWN;
  }
}

/* A runtime call on the driver's behalf: its error is the driver call's
 * result and does not become the thread's runtime error (driver calls leave
 * cudaGetLastError alone). */
#define RT(call)                                                               \
  ({                                                                           \
    cudaError_t prev_ = cudaPeekAtLastError(), e_ = (call);                    \
    if (e_ != cudaSuccess) anycclCpuRestoreLastError(prev_);                   \
    fromRt(e_);                                                                \
  })

static bool validDevice(CUdevice d) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && d >= 0 && d < n && d < ANYCCL_CU_MAX_DEVICES;
}

static CUcontext ctxOf(int dev) {
  return dev < 0 || dev >= ANYCCL_CU_MAX_DEVICES ? NULL : &primaryCtx[dev];
}

static int ctxDevice(CUcontext c) {
  if (c < &primaryCtx[0] || c >= &primaryCtx[ANYCCL_CU_MAX_DEVICES]) return -1;
  int dev = (int)(c - &primaryCtx[0]);
  return validDevice(dev) ? dev : -1;
}

/* ---- init, versions, errors -------------------------------------------- */

API CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  int n = 0;
  CUresult r = RT(cudaGetDeviceCount(&n));
  return r != CUDA_SUCCESS ? r : n > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

API CUresult cuDriverGetVersion(int *v) {
  if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
  return RT(cudaDriverGetVersion(v));
}

struct errName { CUresult code; const char *name, *text; };
static const struct errName errNames[] = {
  {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
  {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
  {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
  {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
  {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
  {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
  {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
  {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
  {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
  {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
  {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
   "part or all of the requested memory range is already mapped"},
  {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
   "pointer does not correspond to a registered memory region"},
  {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
  {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
  {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const struct errName *findErr(CUresult e) {
  for (size_t i = 0; i < sizeof(errNames) / sizeof(errNames[0]); i++)
    if (errNames[i].code == e) return &errNames[i];
  return NULL;
}

API CUresult cuGetErrorName(CUresult e, const char **s) {
  const struct errName *n = findErr(e);
  if (s == NULL) return CUDA_ERROR_INVALID_VALUE;
  *s = n ? n->name : NULL;
  return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorString(CUresult e, const char **s) {
  const struct errName *n = findErr(e);
  if (s == NULL) return CUDA_ERROR_INVALID_VALUE;
  *s = n ? n->text : NULL;
  return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- devices ------------------------------------------------------------ */

API CUresult cuDeviceGetCount(int *n) {
  if (n == NULL) return CUDA_ERROR_INVALID_VALUE;
  return RT(cudaGetDeviceCount(n));
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (d == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!validDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!validDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  struct cudaDeviceProp p;
  CUresult r = RT(cudaGetDeviceProperties(&p, d));
  if (r == CUDA_SUCCESS) snprintf(name, (size_t)len, "%s", p.name);
  return r;
}

/* Capabilities that anyccl-cpu's runtime has no attribute for: none of them
 * exists on the host (no GPUDirect RDMA flush options, no VMM, no dma-buf). */
static bool absentCapability(int attr) {
  switch (attr) {
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS:
  case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING:
  case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED:
    return true;
  default:
    return false;
  }
}

/* CUdevice_attribute and cudaDeviceAttr share their values. */
API CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!validDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  if (absentCapability(attr)) {
    *v = 0;
    return CUDA_SUCCESS;
  }
  return RT(cudaDeviceGetAttribute(v, (enum cudaDeviceAttr)attr, d));
}

/* ---- contexts: one primary context per device --------------------------- */

API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  if (c == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!validDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  *c = ctxOf(d);
  return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease(CUdevice d) {
  return validDevice(d) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

API CUresult cuCtxGetCurrent(CUcontext *c) {
  if (c == NULL) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  if (ctxUnbound || cudaGetDevice(&dev) != cudaSuccess) {
    *c = NULL;
    return CUDA_SUCCESS;
  }
  *c = ctxOf(dev);
  return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext c) {
  if (c == NULL) {
    ctxUnbound = true;
    return CUDA_SUCCESS;
  }
  int dev = ctxDevice(c);
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = RT(cudaSetDevice(dev));
  if (r == CUDA_SUCCESS) ctxUnbound = false;
  return r;
}

API CUresult cuCtxGetDevice(CUdevice *d) {
  if (d == NULL) return CUDA_ERROR_INVALID_VALUE;
  CUcontext c;
  cuCtxGetCurrent(&c);
  if (c == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  *d = ctxDevice(c);
  return CUDA_SUCCESS;
}

API CUresult cuCtxSynchronize(void) {
  CUcontext c;
  cuCtxGetCurrent(&c);
  if (c == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  return RT(cudaDeviceSynchronize());
}

/* ---- memory ------------------------------------------------------------- */

API CUresult cuMemAlloc(CUdeviceptr *p, size_t size) {
  if (p == NULL || size == 0) return CUDA_ERROR_INVALID_VALUE;
  void *q = NULL;
  CUresult r = RT(cudaMalloc(&q, size));
  *p = (CUdeviceptr)(uintptr_t)q;
  return r;
}

API CUresult cuMemFree(CUdeviceptr p) {
  if (p == 0) return CUDA_ERROR_INVALID_VALUE;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, (void *)(uintptr_t)p) != cudaSuccess ||
      (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged))
    return CUDA_ERROR_INVALID_VALUE;
  return RT(cudaFree((void *)(uintptr_t)p));
}

API CUresult cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n) {
  if (p == 0) return CUDA_ERROR_INVALID_VALUE;
  return RT(cudaMemset((void *)(uintptr_t)p, v, n));
}

API CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  if ((dst == 0 || src == NULL) && n > 0) return CUDA_ERROR_INVALID_VALUE;
  return RT(cudaMemcpy((void *)(uintptr_t)dst, src, n, cudaMemcpyHostToDevice));
}

API CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  if ((dst == NULL || src == 0) && n > 0) return CUDA_ERROR_INVALID_VALUE;
  return RT(cudaMemcpy(dst, (const void *)(uintptr_t)src, n, cudaMemcpyDeviceToHost));
}

API CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  if ((dst == 0 || src == NULL) && n > 0) return CUDA_ERROR_INVALID_VALUE;
  return RT(cudaMemcpyAsync((void *)(uintptr_t)dst, src, n, cudaMemcpyHostToDevice,
                                (cudaStream_t)s));
}

/* The allocation that holds p: [base, base + size). Any kind: device,
 * managed, pinned or registered host memory. */
API CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
  void *b;
  size_t n;
  if (p == 0 || anycclCpuMemFind((void *)(uintptr_t)p, &b, &n) != 0)
    return CUDA_ERROR_NOT_FOUND;
  if (base) *base = (CUdeviceptr)(uintptr_t)b;
  if (size) *size = n;
  return CUDA_SUCCESS;
}

API CUresult cuMemHostRegister(void *p, size_t size, unsigned int flags) {
  if (p == NULL || size == 0 || (flags & ~0xfu)) return CUDA_ERROR_INVALID_VALUE;
  return RT(cudaHostRegister(p, size, flags));
}

API CUresult cuMemHostUnregister(void *p) {
  if (p == NULL) return CUDA_ERROR_INVALID_VALUE;
  return RT(cudaHostUnregister(p));
}

API CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned int flags) {
  if (d == NULL || p == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  void *q = NULL;
  CUresult r = RT(cudaHostGetDevicePointer(&q, p, 0));
  if (r == CUDA_SUCCESS) *d = (CUdeviceptr)(uintptr_t)q;
  return r;
}

/* ---- pointer attributes ------------------------------------------------- */

/* One attribute of p into data; a = the runtime's view of p (type
 * unregistered: not memory anyccl-cpu knows). */
static CUresult pointerAttr(int attr, void *data, CUdeviceptr p, const struct cudaPointerAttributes *a) {
  bool known = a->type != cudaMemoryTypeUnregistered;
  bool dev = a->type == cudaMemoryTypeDevice || a->type == cudaMemoryTypeManaged;
  void *base = NULL;
  size_t size = 0;
  if (known && anycclCpuMemFind((void *)(uintptr_t)p, &base, &size) != 0) known = false;
  switch (attr) {
  case CU_POINTER_ATTRIBUTE_CONTEXT:
    *(CUcontext *)data = known ? ctxOf(a->device) : NULL; break;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned int *)data = !known ? 0 : dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST; break;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    *(CUdeviceptr *)data = known ? p : 0; break;
  case CU_POINTER_ATTRIBUTE_HOST_POINTER:     /* all memory here is host-addressable */
    *(void **)data = known ? (void *)(uintptr_t)p : NULL; break;
  case CU_POINTER_ATTRIBUTE_BUFFER_ID:
  case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:  /* unique among live allocations */
    *(unsigned long long *)data = known ? (unsigned long long)(uintptr_t)base : 0; break;
  case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    *(bool *)data = a->type == cudaMemoryTypeManaged; break;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    *(int *)data = known ? a->device : cudaInvalidDeviceId; break;
  case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    *(bool *)data = a->type == cudaMemoryTypeDevice; break;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
  case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) *(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)base;
    else *(void **)data = base;
    break;
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
  case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    *(size_t *)data = size; break;
  case CU_POINTER_ATTRIBUTE_MAPPED:
    *(bool *)data = known; break;
  case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
  case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
    *(bool *)data = false; break;
  case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    *(int *)data = known ? 3 /* READWRITE */ : 0; break;
  case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    *(void **)data = NULL; break;
  case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
  case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
  case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    return CUDA_ERROR_NOT_SUPPORTED;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

static bool validPointerAttr(int attr) {
  return attr >= CU_POINTER_ATTRIBUTE_CONTEXT && attr <= CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE;
}

/* As CUDA: memory the driver does not know is an error here, and not one
 * for cuPointerGetAttributes (which answers it with empty values). */
API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
  if (data == NULL || !validPointerAttr(attr)) return CUDA_ERROR_INVALID_VALUE;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, (void *)(uintptr_t)p) != cudaSuccess ||
      a.type == cudaMemoryTypeUnregistered)
    return CUDA_ERROR_INVALID_VALUE;
  return pointerAttr(attr, data, p, &a);
}

API CUresult cuPointerGetAttributes(unsigned int n, int *attrs, void **data, CUdeviceptr p) {
  if (n == 0 || attrs == NULL || data == NULL) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; i++)
    if (data[i] == NULL || !validPointerAttr(attrs[i])) return CUDA_ERROR_INVALID_VALUE;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, (void *)(uintptr_t)p) != cudaSuccess) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; i++) {
    CUresult r = pointerAttr(attrs[i], data[i], p, &a);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

/* ---- streams ------------------------------------------------------------ */

API CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
  if (s == NULL || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE;
  cudaStream_t t = NULL;
  CUresult r = RT(cudaStreamCreateWithFlags(&t, flags));
  *s = (CUstream)t;
  return r;
}

API CUresult cuStreamSynchronize(CUstream s) { return RT(cudaStreamSynchronize((cudaStream_t)s)); }

API CUresult cuStreamDestroy(CUstream s) {
  if (s == NULL) return CUDA_ERROR_INVALID_HANDLE;
  return RT(cudaStreamDestroy((cudaStream_t)s));
}

API CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
  if (mode == NULL) return CUDA_ERROR_INVALID_VALUE;
  enum cudaStreamCaptureMode m = (enum cudaStreamCaptureMode)*mode;
  CUresult r = RT(cudaThreadExchangeStreamCaptureMode(&m));
  if (r == CUDA_SUCCESS) *mode = (int)m;
  return r;
}

/* Remote writes into host memory are visible once they have landed: nothing
 * to flush. */
API CUresult cuFlushGPUDirectRDMAWrites(int target, int scope) {
  if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX ||
      (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER &&
       scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES))
    return CUDA_ERROR_INVALID_VALUE;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  return CUDA_SUCCESS;
}

/* ---- what has no host meaning here: checked, then NOT_SUPPORTED ---------- */

API CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t size, int type,
                                           unsigned long long flags) {
  (void)flags;
  if (handle == NULL || p == 0 || size == 0 || type != 1 /* DMA_BUF_FD */) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option) {
  if (g == NULL || prop == NULL || (option != 0 && option != 1)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemCreate(unsigned long long *h, size_t size, const void *prop, unsigned long long flags) {
  if (h == NULL || size == 0 || prop == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* No handle was ever created, so every handle is unknown. */
API CUresult cuMemRelease(unsigned long long h) { (void)h; return CUDA_ERROR_INVALID_VALUE; }

API CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                                 unsigned long long flags) {
  (void)align; (void)addr;
  if (p == NULL || size == 0 || flags > 1) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
  return p == 0 || size == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemMap(CUdeviceptr p, size_t size, size_t off, unsigned long long h, unsigned long long flags) {
  (void)off; (void)h;
  if (p == 0 || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
  return p == 0 || size == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const void *desc, size_t count) {
  if (p == 0 || size == 0 || desc == NULL || count == 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* Memory here never comes from cuMemCreate. */
API CUresult cuMemRetainAllocationHandle(unsigned long long *h, void *p) {
  if (h == NULL || p == NULL) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemGetAllocationPropertiesFromHandle(void *prop, unsigned long long h) {
  (void)h;
  return prop == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- cuGetProcAddress --------------------------------------------------- */

/* name, first API version with this signature, first version without it
 * (0: still current), the function. */
struct entry { const char *name; int since, until; void *fn; };
#define E(name, since, until) {#name, since, until, (void *)name}
static const struct entry entries[] = {
  E(cuInit, 2000, 0), E(cuDriverGetVersion, 2020, 0),
  E(cuGetErrorString, 6000, 0), E(cuGetErrorName, 6000, 0),
  E(cuDeviceGet, 2000, 0), E(cuDeviceGetCount, 2000, 0), E(cuDeviceGetName, 2000, 0),
  E(cuDeviceGetAttribute, 2000, 0),
  E(cuDevicePrimaryCtxRetain, 7000, 0), E(cuDevicePrimaryCtxRelease, 7000, 0),
  E(cuCtxGetCurrent, 4000, 0), E(cuCtxSetCurrent, 4000, 0),
  E(cuCtxGetDevice, 2000, 13000), E(cuCtxSynchronize, 2000, 13000),
  E(cuMemAlloc, 3020, 0), E(cuMemFree, 3020, 0), E(cuMemsetD8, 3020, 0),
  E(cuMemcpyHtoD, 3020, 0), E(cuMemcpyDtoH, 3020, 0), E(cuMemcpyHtoDAsync, 3020, 0),
  E(cuMemGetAddressRange, 3020, 0),
  E(cuMemHostRegister, 6050, 0), E(cuMemHostUnregister, 4000, 0),
  E(cuMemHostGetDevicePointer, 3020, 0),
  E(cuPointerGetAttribute, 4000, 0), E(cuPointerGetAttributes, 7000, 0),
  E(cuStreamCreate, 2000, 0), E(cuStreamSynchronize, 2000, 0), E(cuStreamDestroy, 4000, 0),
  E(cuThreadExchangeStreamCaptureMode, 10010, 0),
  E(cuFlushGPUDirectRDMAWrites, 11030, 0), E(cuMemGetHandleForAddressRange, 11070, 0),
  E(cuMemGetAllocationGranularity, 10020, 0), E(cuMemCreate, 10020, 0), E(cuMemRelease, 10020, 0),
  E(cuMemAddressReserve, 10020, 0), E(cuMemAddressFree, 10020, 0), E(cuMemMap, 10020, 0),
  E(cuMemUnmap, 10020, 0), E(cuMemSetAccess, 10020, 0),
  E(cuMemRetainAllocationHandle, 11000, 0), E(cuMemGetAllocationPropertiesFromHandle, 10020, 0),
  {"cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress_v2},
};
#undef E

API CUresult cuGetProcAddress_v2(const char *symbol, void **fn, int version, unsigned long long flags,
                                 int *status) {
  if (fn == NULL) return CUDA_ERROR_INVALID_VALUE;
  *fn = NULL;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (symbol == NULL || version <= 0 || (flags & ~3ull)) return CUDA_ERROR_INVALID_VALUE;
  bool tooOld = false;
  for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
    const struct entry *e = &entries[i];
    if (strcmp(e->name, symbol) != 0) continue;
    if (version < e->since) { tooOld = true; continue; }
    if (e->until != 0 && version >= e->until) continue;   /* a newer ABI, not provided */
    *fn = e->fn;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (tooOld && status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  return CUDA_ERROR_NOT_FOUND;
}

/* The CUDA 11.3 form, without the status. */
API CUresult cuGetProcAddress(const char *symbol, void **fn, int version, unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, fn, version, flags, NULL);
}
