/* ncclMemAlloc's allocations on the cuda backend, and flat peer mappings
 * of them (src/backend/cuda_devcomm.c).
 *
 * ncclMemAlloc allocates through the driver's virtual memory API
 * (cuMemCreate, cuMemAddressReserve, cuMemMap), as NCCL's does: the
 * physical allocation can then be mapped a second time, next to its LSA
 * peers' ones, in one reserved range per window (peer i at base + i *
 * stride), so that device code computes a peer's address instead of
 * loading it from a table. Peers in other processes hand over their
 * allocation as a file descriptor (POSIX FD handles; src/core/fdpass.c
 * carries it). The driver entry points are resolved at run time (libnccl
 * links no libcuda). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include "cuda_exec.h"

extern "C" {

#define VMM_FNS(X)                                                                                        \
  X(cuMemGetAllocationGranularity, (size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags)) \
  X(cuMemCreate, (CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long))  \
  X(cuMemRelease, (CUmemGenericAllocationHandle))                                                          \
  X(cuMemAddressReserve, (CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long))                 \
  X(cuMemAddressFree, (CUdeviceptr, size_t))                                                               \
  X(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))            \
  X(cuMemUnmap, (CUdeviceptr, size_t))                                                                     \
  X(cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc*, size_t))                                 \
  X(cuMemExportToShareableHandle, (void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,        \
                                   unsigned long long))                                                    \
  X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType)) \
  X(cuMemGetAddressRange, (CUdeviceptr*, size_t*, CUdeviceptr))                                           \
  X(cuPointerGetAttribute, (void*, CUpointer_attribute, CUdeviceptr))

#define VMM_DECL(name, args) static CUresult(*p_##name) args;
VMM_FNS(VMM_DECL)

static pthread_once_t vmmOnce = PTHREAD_ONCE_INIT;
static int vmmReady;

static void vmmLoad(void) {
  int ok = 1;
  cudaDriverEntryPointQueryResult q;
#define VMM_LOAD(name, args)                                                                         \
  {                                                                                                  \
    void* f = NULL;                                                                                  \
    if (cudaGetDriverEntryPointByVersion(#name, &f, 12000, cudaEnableDefault, &q) != cudaSuccess || \
        q != cudaDriverEntryPointSuccess || f == NULL) {                                             \
      cudaGetLastError();                                                                            \
      ok = 0;                                                                                        \
    }                                                                                                \
    *(void**)&p_##name = f;                                                                          \
  }
  VMM_FNS(VMM_LOAD)
  vmmReady = ok;
}

static int vmmLoaded(void) {
  pthread_once(&vmmOnce, vmmLoad);
  return vmmReady;
}

/* the process's VMM allocations (ncclMemAlloc) */
struct vmmAlloc {
  CUdeviceptr base;
  size_t size;
  CUmemGenericAllocationHandle handle;
  int dev, exportable;
  uint64_t id; /* unique in the process's life: a freed allocation's address may come back, its id not */
  struct vmmAlloc* next;
};
static struct vmmAlloc* allocs;
static uint64_t lastId;
static pthread_mutex_t allocLock = PTHREAD_MUTEX_INITIALIZER;

static void accessDesc(CUmemAccessDesc* a, int dev) {
  a->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a->location.id = dev;
  a->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

static int granularity(int dev, size_t* g) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  return p_cuMemGetAllocationGranularity(g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && *g ? 0 : 1;
}

/* Returns a cudaError_t; cudaErrorNotSupported when the driver has no VMM
 * (the caller falls back to cudaMalloc). The current device's memory, read
 * and write for it and for every device that can access it peer to peer. */
int acuVmmAlloc(void** p, size_t size) {
  int dev = 0;
  if (!vmmLoaded()) return cudaErrorNotSupported;
  cudaError_t ce = cudaGetDevice(&dev);
  if (ce == cudaSuccess) ce = cudaFree(0); /* the device's context current on this thread */
  if (ce != cudaSuccess) return ce;
  size_t g = 0;
  if (granularity(dev, &g)) return cudaErrorNotSupported;
  size = (size + g - 1) / g * g;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h;
  int exportable = 1;
  CUresult r = p_cuMemCreate(&h, size, &prop, 0);
  if (r != CUDA_SUCCESS) { /* no shareable handles here: in-process peers only */
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    exportable = 0;
    r = p_cuMemCreate(&h, size, &prop, 0);
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return cudaErrorMemoryAllocation;
  if (r != CUDA_SUCCESS) return cudaErrorNotSupported;
  CUdeviceptr base = 0;
  if (p_cuMemAddressReserve(&base, size, g, 0, 0) != CUDA_SUCCESS) {
    p_cuMemRelease(h);
    return cudaErrorMemoryAllocation;
  }
  if (p_cuMemMap(base, size, 0, h, 0) != CUDA_SUCCESS) {
    p_cuMemAddressFree(base, size);
    p_cuMemRelease(h);
    return cudaErrorMemoryAllocation;
  }
  int n = 0;
  cudaGetDeviceCount(&n);
  CUmemAccessDesc* acc = (CUmemAccessDesc*)calloc(n > 0 ? n : 1, sizeof(*acc));
  struct vmmAlloc* a = (struct vmmAlloc*)calloc(1, sizeof(*a));
  int na = 0;
  if (acc) {
    accessDesc(&acc[na++], dev);
    for (int d = 0; d < n; d++) {
      int can = 0;
      if (d != dev && cudaDeviceCanAccessPeer(&can, d, dev) == cudaSuccess && can) accessDesc(&acc[na++], d);
    }
  }
  cudaGetLastError();
  if (acc == NULL || a == NULL || p_cuMemSetAccess(base, size, acc, na) != CUDA_SUCCESS) {
    free(acc);
    free(a);
    p_cuMemUnmap(base, size);
    p_cuMemAddressFree(base, size);
    p_cuMemRelease(h);
    return cudaErrorMemoryAllocation;
  }
  free(acc);
  *a = (struct vmmAlloc){base, size, h, dev, exportable, __atomic_add_fetch(&lastId, 1, __ATOMIC_RELAXED), NULL};
  pthread_mutex_lock(&allocLock);
  a->next = allocs;
  allocs = a;
  pthread_mutex_unlock(&allocLock);
  *p = (void*)base;
  return cudaSuccess;
}

/* 0: freed; 1: p is not an allocation of acuVmmAlloc's. Like cudaFree, it
 * waits for the device's work first. */
int acuVmmFree(void* p) {
  pthread_mutex_lock(&allocLock);
  struct vmmAlloc* a = NULL;
  for (struct vmmAlloc** pa = &allocs; *pa; pa = &(*pa)->next)
    if ((*pa)->base == (CUdeviceptr)p) {
      a = *pa;
      *pa = a->next;
      break;
    }
  pthread_mutex_unlock(&allocLock);
  if (a == NULL) return 1;
  int saved = -1;
  cudaGetDevice(&saved);
  if (saved != a->dev) cudaSetDevice(a->dev);
  cudaDeviceSynchronize();
  p_cuMemUnmap(a->base, a->size);
  p_cuMemAddressFree(a->base, a->size);
  p_cuMemRelease(a->handle); /* the memory goes when no other mapping holds it */
  if (saved >= 0 && saved != a->dev) cudaSetDevice(saved);
  cudaGetLastError();
  free(a);
  return 0;
}

/* 0 when p lies in an allocation of acuVmmAlloc's: its base and size, and
 * whether it can be handed to other processes. */
int acuVmmFindId(const void* p, void** base, size_t* size, int* exportable, uint64_t* id) {
  int found = 1;
  pthread_mutex_lock(&allocLock);
  for (struct vmmAlloc* a = allocs; a; a = a->next)
    if ((CUdeviceptr)p >= a->base && (CUdeviceptr)p < a->base + a->size) {
      *base = (void*)a->base;
      *size = a->size;
      *exportable = a->exportable;
      *id = a->id;
      found = 0;
      break;
    }
  pthread_mutex_unlock(&allocLock);
  return found;
}
int acuVmmFind(const void* p, void** base, size_t* size, int* exportable) {
  uint64_t id;
  return acuVmmFindId(p, base, size, exportable, &id);
}

/* A file descriptor for the allocation at base (the caller closes it). */
int acuVmmExport(const void* base, int* fd) {
  int err = cudaErrorInvalidValue;
  pthread_mutex_lock(&allocLock);
  for (struct vmmAlloc* a = allocs; a; a = a->next)
    if (a->base == (CUdeviceptr)base && a->exportable) {
      int f = -1;
      err = p_cuMemExportToShareableHandle(&f, a->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS
                ? cudaSuccess
                : cudaErrorNotSupported;
      *fd = f;
      break;
    }
  pthread_mutex_unlock(&allocLock);
  return err;
}

/* Maps n allocations side by side for device dev: allocation i (sizes[i]
 * bytes: bases[i], an allocation of this process, or else fds[i], one of
 * another process) at *flat + i * stride, read and write for dev. stride is
 * at least every size and a multiple of the granularity. */
int acuVmmMapFlat(int dev, int n, void* const* bases, const int* fds, const size_t* sizes, size_t stride,
                  void** flat) {
  if (!vmmLoaded()) return cudaErrorNotSupported;
  size_t g = 0;
  if (granularity(dev, &g) || stride % g) return cudaErrorInvalidValue;
  CUdeviceptr va = 0;
  if (p_cuMemAddressReserve(&va, stride * n, g, 0, 0) != CUDA_SUCCESS) return cudaErrorMemoryAllocation;
  int mapped = 0, err = cudaSuccess;
  for (; mapped < n && err == cudaSuccess; mapped++) {
    CUmemGenericAllocationHandle h = 0;
    int have = 0;
    if (bases[mapped]) {
      pthread_mutex_lock(&allocLock);
      for (struct vmmAlloc* a = allocs; a; a = a->next)
        if (a->base == (CUdeviceptr)bases[mapped]) {
          h = a->handle;
          have = 1;
        }
      pthread_mutex_unlock(&allocLock);
      if (!have) err = cudaErrorInvalidValue;
    } else {
      if (p_cuMemImportFromShareableHandle(&h, (void*)(uintptr_t)fds[mapped],
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS)
        err = cudaErrorInvalidResourceHandle;
      else
        have = 2; /* ours to release once mapped */
    }
    if (err != cudaSuccess) break;
    if (sizes[mapped] > stride || p_cuMemMap(va + mapped * stride, sizes[mapped], 0, h, 0) != CUDA_SUCCESS)
      err = cudaErrorMemoryAllocation;
    if (have == 2) p_cuMemRelease(h); /* the mapping keeps the memory */
    if (err != cudaSuccess) break;
    CUmemAccessDesc acc;
    accessDesc(&acc, dev);
    if (p_cuMemSetAccess(va + mapped * stride, sizes[mapped], &acc, 1) != CUDA_SUCCESS) {
      p_cuMemUnmap(va + mapped * stride, sizes[mapped]);
      err = cudaErrorInvalidDevice;
    }
  }
  if (err != cudaSuccess) {
    for (int i = 0; i < mapped; i++) p_cuMemUnmap(va + i * stride, sizes[i]);
    p_cuMemAddressFree(va, stride * n);
    return err;
  }
  *flat = (void*)va;
  return cudaSuccess;
}

void acuVmmUnmapFlat(void* flat, int n, const size_t* sizes, size_t stride) {
  if (flat == NULL || !vmmLoaded()) return;
  for (int i = 0; i < n; i++) p_cuMemUnmap((CUdeviceptr)flat + i * stride, sizes[i]);
  p_cuMemAddressFree((CUdeviceptr)flat, stride * n);
}

/* The allocation p lies in (cuMemGetAddressRange): cudaMalloc's, whose
 * base CUDA IPC shares (src/backend/cuda_symm_map.c). */
int acuMemGetAddressRange(const void* p, void** base, size_t* size) {
  CUdeviceptr b = 0;
  size_t s = 0;
  if (!vmmLoaded() || p_cuMemGetAddressRange(&b, &s, (CUdeviceptr)p) != CUDA_SUCCESS) return cudaErrorInvalidValue;
  *base = (void*)b;
  *size = s;
  return cudaSuccess;
}

/* Device memory a peer GPU of this process reaches through the same
 * pointer once peer access is on: cudaMalloc's (legacy IPC capable), or
 * acuVmmAlloc's (mapped for every peer-capable GPU). Not: stream-ordered
 * pools, managed or host memory, other VMM allocations. */
static CUresult (*p_cuStreamWriteValue64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
static pthread_once_t writeOnce = PTHREAD_ONCE_INIT;
static void writeLoad(void) {
  cudaDriverEntryPointQueryResult q;
  void* f = NULL;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    f = NULL;
  cudaGetLastError();
  *(void**)&p_cuStreamWriteValue64 = f;
}
int acuStreamWriteValue64(void* stream, void* addr, uint64_t value) {
  pthread_once(&writeOnce, writeLoad);
  if (p_cuStreamWriteValue64 == NULL) return cudaErrorNotSupported;
  return p_cuStreamWriteValue64((CUstream)stream, (CUdeviceptr)addr, value, 0 /* CU_STREAM_WRITE_VALUE_DEFAULT: fenced */) ==
                 CUDA_SUCCESS
             ? 0
             : cudaErrorNotSupported;
}

int acuPtrPeerReachable(const void* p) {
  void* base;
  size_t size;
  int exportable, legacy = 0;
  if (acuVmmFind(p, &base, &size, &exportable) == 0) return 1;
  if (!vmmLoaded() ||
      p_cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, (CUdeviceptr)p) != CUDA_SUCCESS)
    return 0;
  return legacy != 0;
}

}  // extern "C"
