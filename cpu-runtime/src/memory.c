/* anyccl-cpu: memory and the allocation registry.
 *
 * "Device" memory is host memory mapped from its own memfd (MAP_SHARED), so
 * another process can map the same pages (src/ipc.c). Every allocation,
 * registration and IPC mapping is recorded in a registry sorted by address:
 * cudaPointerGetAttributes, cudaFree's checks and IPC handles come from it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cpurt.h"

#define KIND_BIT(k) (1u << (k))
#define FREEABLE (KIND_BIT(CPURT_ALLOC_DEVICE) | KIND_BIT(CPURT_ALLOC_MANAGED))
#define HOST_KINDS \
  (KIND_BIT(CPURT_ALLOC_HOST) | KIND_BIT(CPURT_ALLOC_REGISTERED) | KIND_BIT(CPURT_ALLOC_MANAGED))

static pthread_rwlock_t regLock = PTHREAD_RWLOCK_INITIALIZER;
static struct cpurtAlloc *regs;
static size_t nregs, capRegs;

/* ---- the registry ------------------------------------------------------- */

/* Index of the last entry whose base is <= p, or -1. Lock held. */
static ptrdiff_t floorIndex(uintptr_t p) {
  size_t lo = 0, hi = nregs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (regs[mid].base <= p) lo = mid + 1;
    else hi = mid;
  }
  return (ptrdiff_t)lo - 1;
}

bool cpurtAllocFind(const void *p, struct cpurtAlloc *out) {
  bool found = false;
  pthread_rwlock_rdlock(&regLock);
  ptrdiff_t i = floorIndex((uintptr_t)p);
  if (i >= 0 && (uintptr_t)p - regs[i].base < regs[i].size) {
    *out = regs[i];
    found = true;
  }
  pthread_rwlock_unlock(&regLock);
  return found;
}

cudaError_t cpurtAllocInsert(const struct cpurtAlloc *a) {
  cudaError_t err = cudaSuccess;
  pthread_rwlock_wrlock(&regLock);
  ptrdiff_t i = floorIndex(a->base);
  if ((i >= 0 && regs[i].base + regs[i].size > a->base) ||
      ((size_t)(i + 1) < nregs && regs[i + 1].base < a->base + a->size)) {
    err = cudaErrorHostMemoryAlreadyRegistered;   /* only user ranges can overlap */
  } else if (nregs == capRegs) {
    size_t cap = capRegs ? 2 * capRegs : 256;
    struct cpurtAlloc *r = realloc(regs, cap * sizeof(*r));
    if (r == NULL) err = cudaErrorMemoryAllocation;
    else regs = r, capRegs = cap;
  }
  if (err == cudaSuccess) {
    memmove(&regs[i + 2], &regs[i + 1], (nregs - (size_t)(i + 1)) * sizeof(*regs));
    regs[i + 1] = *a;
    nregs++;
  }
  pthread_rwlock_unlock(&regLock);
  return err;
}

/* Lock held. */
static void removeAt(ptrdiff_t i, struct cpurtAlloc *out) {
  if (out) *out = regs[i];
  memmove(&regs[i], &regs[i + 1], (nregs - (size_t)i - 1) * sizeof(*regs));
  nregs--;
}

bool cpurtAllocRemove(const void *p, unsigned kindMask, struct cpurtAlloc *out) {
  bool found = false;
  pthread_rwlock_wrlock(&regLock);
  ptrdiff_t i = floorIndex((uintptr_t)p);
  if (i >= 0 && regs[i].base == (uintptr_t)p && (kindMask & KIND_BIT(regs[i].kind))) {
    removeAt(i, out);
    found = true;
  }
  pthread_rwlock_unlock(&regLock);
  return found;
}

bool cpurtIpcFindRef(pid_t pid, uint64_t ino, void **base) {
  bool found = false;
  pthread_rwlock_wrlock(&regLock);
  for (size_t i = 0; i < nregs && !found; i++) {
    struct cpurtAlloc *a = &regs[i];
    if (a->kind == CPURT_ALLOC_IPC && a->pid == pid && a->ino == ino) {
      a->refs++;
      *base = (void *)a->base;
      found = true;
    }
  }
  pthread_rwlock_unlock(&regLock);
  return found;
}

bool cpurtIpcUnref(const void *base, struct cpurtAlloc *out, bool *found) {
  bool last = false;
  *found = false;
  pthread_rwlock_wrlock(&regLock);
  ptrdiff_t i = floorIndex((uintptr_t)base);
  if (i >= 0 && regs[i].base == (uintptr_t)base && regs[i].kind == CPURT_ALLOC_IPC) {
    *found = true;
    if (--regs[i].refs == 0) {
      removeAt(i, out);
      last = true;
    }
  }
  pthread_rwlock_unlock(&regLock);
  return last;
}

void cpurtMemForkLock(void) { pthread_rwlock_wrlock(&regLock); }
/* See cpurtHandlesForkUnlock. */
void cpurtMemForkUnlock(bool child) {
  if (child) pthread_rwlock_init(&regLock, NULL);
  else pthread_rwlock_unlock(&regLock);
}

/* ---- backing memory ----------------------------------------------------- */

static size_t pageSize(void) {
  long ps = sysconf(_SC_PAGESIZE);
  return ps > 0 ? (size_t)ps : 4096;
}

/* Where memfd_create is missing, an unlinked POSIX shm object serves: both
 * are reachable from another process through /proc/<pid>/fd/<fd>. */
static int shmFd(void) {
  int fd = memfd_create("anyccl-cpu", MFD_CLOEXEC);
  if (fd >= 0 || errno != ENOSYS) return fd;
  static atomic_uint serial;
  char name[64];
  snprintf(name, sizeof(name), "/anyccl-cpu-%d-%u", (int)getpid(), atomic_fetch_add(&serial, 1));
  fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) shm_unlink(name);
  return fd;
}

/* One descriptor per allocation: when they run out, the soft limit is
 * raised to the hard one (once) before giving up. */
static int shmFdRetry(void) {
  int fd = shmFd();
  if (fd >= 0 || errno != EMFILE) return fd;
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &r) == 0) return shmFd();
  }
  cpurtWarn("out of file descriptors for device memory (one per cudaMalloc); raise ulimit -n");
  errno = EMFILE;
  return -1;
}

cudaError_t cpurtShmCreate(size_t size, struct cpurtAlloc *a) {
  size_t ps = pageSize();
  if (size > SIZE_MAX - ps) return cudaErrorMemoryAllocation;
  size_t mapSize = (size + ps - 1) / ps * ps;
  int fd = shmFdRetry();
  if (fd < 0) return cudaErrorMemoryAllocation;
  struct stat st;
  void *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)mapSize) == 0 && fstat(fd, &st) == 0)
    p = mmap(NULL, mapSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  a->base = (uintptr_t)p;
  a->mapSize = mapSize;
  a->fd = fd;
  a->ino = (uint64_t)st.st_ino;
  return cudaSuccess;
}

void cpurtAllocRelease(const struct cpurtAlloc *a) {
  if (a->kind == CPURT_ALLOC_REGISTERED) return;   /* the user's memory */
  munmap((void *)a->base, a->mapSize);
  if (a->fd >= 0) close(a->fd);
}

/* sim mode: address space only (no backing object, never committed). */
static cudaError_t reserveOnly(size_t size, struct cpurtAlloc *a) {
  size_t ps = pageSize();
  if (size > SIZE_MAX - ps) return cudaErrorMemoryAllocation;
  size_t mapSize = (size + ps - 1) / ps * ps;
  void *p = mmap(NULL, mapSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return cudaErrorMemoryAllocation;
  a->base = (uintptr_t)p;
  a->mapSize = mapSize;
  a->fd = -1;
  a->ino = 0;
  return cudaSuccess;
}

bool cpurtIsDeviceMemory(const void *p) {
  struct cpurtAlloc a;
  return cpurtAllocFind(p, &a) && (a.kind == CPURT_ALLOC_DEVICE || a.kind == CPURT_ALLOC_MANAGED);
}

cudaError_t cpurtDeviceAlloc(void **p, size_t size, int dev, enum cpurtAllocKind kind) {
  struct cpurtAlloc a = {0};
  cudaError_t err = cpurtSim ? reserveOnly(size, &a) : cpurtShmCreate(size, &a);
  if (err != cudaSuccess) return err;
  a.size = size;
  a.kind = kind;
  a.device = dev;
  a.pid = getpid();
  a.refs = 1;
  err = cpurtAllocInsert(&a);
  if (err != cudaSuccess) {
    cpurtAllocRelease(&a);
    return err;
  }
  *p = (void *)a.base;
  return cudaSuccess;
}

void cpurtFreeDeviceAllocs(int dev) {
  for (;;) {
    struct cpurtAlloc a;
    bool found = false;
    pthread_rwlock_wrlock(&regLock);
    for (size_t i = 0; i < nregs && !found; i++)
      if (regs[i].device == dev && (FREEABLE & KIND_BIT(regs[i].kind))) {
        removeAt((ptrdiff_t)i, &a);
        found = true;
      }
    pthread_rwlock_unlock(&regLock);
    if (!found) return;
    cpurtAllocRelease(&a);
  }
}

/* ---- allocation entry points -------------------------------------------- */

CPURT_API cudaError_t cudaMalloc(void **devPtr, size_t size) {
  cpurtInit();
  if (devPtr == NULL) return cpurtRet(cudaErrorInvalidValue);
  *devPtr = NULL;
  if (size == 0) return cudaSuccess;
  return cpurtRet(cpurtDeviceAlloc(devPtr, size, cpurtSelf()->device, CPURT_ALLOC_DEVICE));
}

CPURT_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
  cpurtInit();
  if (devPtr == NULL || size == 0 || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
    return cpurtRet(cudaErrorInvalidValue);
  return cpurtRet(cpurtDeviceAlloc(devPtr, size, cpurtSelf()->device, CPURT_ALLOC_MANAGED));
}

/* Freeing synchronises the device first, as CUDA's cudaFree does, so that
 * queued work never touches unmapped memory. Workers cannot wait for their
 * own device and skip that. */
static void syncBeforeFree(int dev) {
  if (!cpurtSelf()->isWorker && cpurtValidDevice(dev)) cpurtSyncDevice(dev);
}

static cudaError_t freeKinds(void *p, unsigned kinds) {
  struct cpurtAlloc a;
  if (!cpurtAllocFind(p, &a) || a.base != (uintptr_t)p || !(kinds & KIND_BIT(a.kind)))
    return cudaErrorInvalidValue;
  syncBeforeFree(a.device);
  if (!cpurtAllocRemove(p, kinds, &a)) return cudaErrorInvalidValue;   /* freed meanwhile */
  cpurtAllocRelease(&a);
  return cudaSuccess;
}

/* cudaFree(NULL) is the classic way to initialise the runtime. */
CPURT_API cudaError_t cudaFree(void *devPtr) {
  cpurtInit();
  if (devPtr == NULL) return cudaSuccess;
  return cpurtRet(freeKinds(devPtr, FREEABLE));
}

CPURT_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
  cpurtInit();
  if (pHost == NULL || (flags & ~0xfu)) return cpurtRet(cudaErrorInvalidValue);
  *pHost = NULL;
  if (size == 0) return cudaSuccess;
  size_t ps = pageSize();
  if (size > SIZE_MAX - ps) return cpurtRet(cudaErrorMemoryAllocation);
  struct cpurtAlloc a = {0};
  a.mapSize = (size + ps - 1) / ps * ps;
  void *p = mmap(NULL, a.mapSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return cpurtRet(cudaErrorMemoryAllocation);
  a.base = (uintptr_t)p;
  a.size = size;
  a.kind = CPURT_ALLOC_HOST;
  a.device = cpurtSelf()->device;
  a.flags = flags;
  a.fd = -1;
  cudaError_t err = cpurtAllocInsert(&a);
  if (err != cudaSuccess) {
    cpurtAllocRelease(&a);
    return cpurtRet(err);
  }
  *pHost = p;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaMallocHost(void **ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

CPURT_API cudaError_t cudaFreeHost(void *ptr) {
  cpurtInit();
  if (ptr == NULL) return cudaSuccess;
  return cpurtRet(freeKinds(ptr, KIND_BIT(CPURT_ALLOC_HOST)));
}

CPURT_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
  cpurtInit();
  if (ptr == NULL || size == 0 || (flags & ~0xfu)) return cpurtRet(cudaErrorInvalidValue);
  struct cpurtAlloc a = {0};
  a.base = (uintptr_t)ptr;
  a.size = size;
  a.kind = CPURT_ALLOC_REGISTERED;
  a.device = cpurtSelf()->device;
  a.flags = flags;
  a.fd = -1;
  return cpurtRet(cpurtAllocInsert(&a));
}

CPURT_API cudaError_t cudaHostUnregister(void *ptr) {
  cpurtInit();
  if (ptr == NULL) return cpurtRet(cudaErrorInvalidValue);
  if (!cpurtAllocRemove(ptr, KIND_BIT(CPURT_ALLOC_REGISTERED), NULL))
    return cpurtRet(cudaErrorHostMemoryNotRegistered);
  return cudaSuccess;
}

/* Host memory is mapped at the same address for the "device". */
CPURT_API cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags) {
  cpurtInit();
  struct cpurtAlloc a;
  if (pDevice == NULL || flags != 0 || !cpurtAllocFind(pHost, &a) ||
      !(HOST_KINDS & KIND_BIT(a.kind)))
    return cpurtRet(cudaErrorInvalidValue);
  *pDevice = pHost;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost) {
  cpurtInit();
  struct cpurtAlloc a;
  if (pFlags == NULL || !cpurtAllocFind(pHost, &a) || a.kind != CPURT_ALLOC_HOST)
    return cpurtRet(cudaErrorInvalidValue);
  *pFlags = a.flags;
  return cudaSuccess;
}

/* All memory here is reachable from the host, so hostPointer is set for
 * device memory too (CUDA sets it for whatever the host can access). */
CPURT_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                               const void *ptr) {
  cpurtInit();
  if (attributes == NULL) return cpurtRet(cudaErrorInvalidValue);
  struct cpurtAlloc a;
  memset(attributes, 0, sizeof(*attributes));
  if (ptr == NULL || !cpurtAllocFind(ptr, &a)) {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = cudaInvalidDeviceId;
    return cudaSuccess;
  }
  switch (a.kind) {
  case CPURT_ALLOC_DEVICE: case CPURT_ALLOC_IPC: attributes->type = cudaMemoryTypeDevice; break;
  case CPURT_ALLOC_MANAGED: attributes->type = cudaMemoryTypeManaged; break;
  default: attributes->type = cudaMemoryTypeHost; break;
  }
  attributes->device = a.device;
  attributes->devicePointer = (void *)ptr;
  attributes->hostPointer = (void *)ptr;
  return cudaSuccess;
}

/* ---- stream-ordered allocation ------------------------------------------ */

/* The memory exists at once; only its release waits for the stream. */
CPURT_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
  struct cpurtStream *s;
  if (devPtr == NULL) return cpurtRet(cudaErrorInvalidValue);
  cudaError_t err = cpurtStreamAcquire(hStream, &s);
  if (err != cudaSuccess) return cpurtRet(err);
  *devPtr = NULL;
  if (size != 0) err = cpurtDeviceAlloc(devPtr, size, s->device, CPURT_ALLOC_DEVICE);
  cpurtStreamRelease(s);
  return cpurtRet(err);
}

/* In fini, not run: the pages go also when the op is dropped (a failed
 * submit, or the copy of the queue that a forked child inherits). */
static void unmapFini(struct cpurtOp *op) {
  munmap(op->u.mem.dst, op->u.mem.width);
  close(op->u.mem.value);
}

/* The pointer leaves the registry now (a second free is an error at once);
 * the pages go when the stream reaches this point. */
CPURT_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
  struct cpurtStream *s;
  struct cpurtAlloc a;
  cudaError_t err = cpurtStreamAcquire(hStream, &s);
  if (err != cudaSuccess) return cpurtRet(err);
  if (devPtr != NULL) {
    struct cpurtOp *op = cpurtOpNew();
    if (op == NULL) err = cudaErrorMemoryAllocation;
    else if (!cpurtAllocRemove(devPtr, KIND_BIT(CPURT_ALLOC_DEVICE), &a)) err = cudaErrorInvalidValue;
    if (err != cudaSuccess) {
      cpurtOpFree(op);
    } else {
      op->fini = unmapFini;
      op->u.mem.dst = (void *)a.base;
      op->u.mem.width = a.mapSize;
      op->u.mem.value = a.fd;
      err = cpurtSubmit(s, op, NULL);
    }
  }
  cpurtStreamRelease(s);
  return cpurtRet(err);
}

/* anyccl extension (CUDA's driver has cuMemGetAddressRange): the allocation
 * that contains p, for device memory that can be shared (IPC). Returns 0 and
 * fills base/size when found. */
CPURT_API int anycclCpuMemGetAddressRange(const void *p, void **base, size_t *size) {
  struct cpurtAlloc a;
  if (!cpurtAllocFind(p, &a) || a.fd < 0) return 1;
  *base = (void *)a.base;
  *size = a.size;
  return 0;
}

CPURT_API int anycclCpuMemFind(const void *p, void **base, size_t *size) {
  struct cpurtAlloc a;
  if (base == NULL || size == NULL || !cpurtAllocFind(p, &a)) return 1;
  *base = (void *)a.base;
  *size = a.size;
  return 0;
}
