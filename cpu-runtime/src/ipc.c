/* anyccl-cpu: IPC memory handles.
 *
 * A handle names the exporting process, the descriptor of the allocation's
 * memfd there and the memfd's inode. Another process of the same user opens
 * /proc/<pid>/fd/<fd> (which reaches the memfd itself, not a copy), checks
 * the inode, so that a descriptor number reused after cudaFree is not
 * mistaken for the allocation, and maps it. This works for forked,
 * exec'd and unrelated processes alike, as long as the exporter lives and
 * has not freed the allocation. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cpurt.h"

#define IPC_MAGIC 0x55504341u       /* "ACPU" */
#define IPC_VERSION 1u

struct ipcHandle {
  uint32_t magic, version;
  int32_t pid, fd;
  uint64_t ino;
  uint64_t size, mapSize;
  int32_t device;
  uint32_t reserved;
};
_Static_assert(sizeof(struct ipcHandle) <= CUDA_IPC_HANDLE_SIZE, "IPC handle too large");

/* A handle refers to the whole allocation, whatever pointer inside it is
 * given, and opening it returns the allocation's base (as in CUDA). */
CPURT_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) {
  cpurtInit();
  struct cpurtAlloc a;
  if (handle == NULL || devPtr == NULL || !cpurtAllocFind(devPtr, &a) ||
      a.kind != CPURT_ALLOC_DEVICE || a.fd < 0)
    return cpurtRet(cudaErrorInvalidValue);
  struct ipcHandle h = {IPC_MAGIC, IPC_VERSION, (int32_t)a.pid, a.fd, a.ino,
                        a.size, a.mapSize, a.device, 0};
  memset(handle, 0, sizeof(*handle));
  memcpy(handle->reserved, &h, sizeof(h));
  return cudaSuccess;
}

/* Maps the exporter's memfd; fills the new registry entry. */
static cudaError_t mapHandle(const struct ipcHandle *h, struct cpurtAlloc *a) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return cudaErrorMapBufferObjectFailed;   /* exporter gone, or freed */
  struct stat st;
  void *p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && (uint64_t)st.st_ino == h->ino && (uint64_t)st.st_size >= h->mapSize)
    p = mmap(NULL, h->mapSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);                        /* the mapping keeps the memory alive */
  if (p == MAP_FAILED) return cudaErrorMapBufferObjectFailed;
  memset(a, 0, sizeof(*a));
  a->base = (uintptr_t)p;
  a->size = h->size;
  a->mapSize = h->mapSize;
  a->kind = CPURT_ALLOC_IPC;
  a->device = h->device;
  a->fd = -1;
  a->ino = h->ino;
  a->pid = h->pid;
  a->refs = 1;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle,
                                           unsigned int flags) {
  cpurtInit();
  struct ipcHandle h;
  memcpy(&h, handle.reserved, sizeof(h));
  if (devPtr == NULL || (flags & ~(unsigned)cudaIpcMemLazyEnablePeerAccess) ||
      h.magic != IPC_MAGIC || h.version != IPC_VERSION || h.size == 0 || h.mapSize < h.size)
    return cpurtRet(cudaErrorInvalidValue);
  /* Opening a handle again gives the same mapping, counted. */
  if (cpurtIpcFindRef(h.pid, h.ino, devPtr)) return cudaSuccess;
  struct cpurtAlloc a = {0};
  cudaError_t err = mapHandle(&h, &a);
  if (err == cudaSuccess) err = cpurtAllocInsert(&a);
  if (err != cudaSuccess) {
    if (a.base) munmap((void *)a.base, a.mapSize);
    return cpurtRet(err);
  }
  *devPtr = (void *)a.base;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaIpcCloseMemHandle(void *devPtr) {
  cpurtInit();
  struct cpurtAlloc a;
  bool found;
  if (devPtr == NULL) return cpurtRet(cudaErrorInvalidValue);
  if (cpurtIpcUnref(devPtr, &a, &found)) cpurtAllocRelease(&a);
  return found ? cudaSuccess : cpurtRet(cudaErrorInvalidValue);
}
