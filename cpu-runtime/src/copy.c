/* anyccl-cpu: cudaMemcpy* and cudaMemset*.
 *
 * All memory is host memory, so every kind of copy is a memmove; the kind
 * is still checked. The synchronous calls are queued on the legacy stream
 * of the current device and waited for, so they come after earlier work
 * there (and, through its implicit synchronisation, on blocking streams). */
#include <string.h>
#include "cpurt.h"

static void runCopy(struct cpurtOp *op) {
  char *dst = op->u.mem.dst;
  const char *src = op->u.mem.src;
  if (op->u.mem.height == 1) {
    memmove(dst, src, op->u.mem.width);
    return;
  }
  for (size_t r = 0; r < op->u.mem.height; r++)
    memmove(dst + r * op->u.mem.dpitch, src + r * op->u.mem.spitch, op->u.mem.width);
}

static void runSet(struct cpurtOp *op) {
  char *dst = op->u.mem.dst;
  for (size_t r = 0; r < op->u.mem.height; r++)
    memset(dst + r * op->u.mem.dpitch, op->u.mem.value, op->u.mem.width);
}

/* Queues op on h; waits for it when sync (h is then the legacy stream). */
static cudaError_t issue(struct cpurtOp *op, cudaStream_t h, bool sync) {
  struct cpurtStream *s;
  cudaError_t err = cpurtStreamAcquire(h, &s);
  if (err != cudaSuccess) {
    cpurtOpFree(op);
    return cpurtRet(err);
  }
  /* Zero bytes: only the arguments needed checking. */
  if (op->u.mem.width == 0 || op->u.mem.height == 0) {
    cpurtOpFree(op);
    err = cudaSuccess;
  } else {
    err = sync ? cpurtSubmitWait(s, op) : cpurtSubmit(s, op, NULL);
  }
  cpurtStreamRelease(s);
  return cpurtRet(err);
}

static cudaError_t copy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                          size_t width, size_t height, enum cudaMemcpyKind kind,
                          cudaStream_t stream, bool sync) {
  cpurtInit();
  if ((unsigned)kind > cudaMemcpyDefault) return cpurtRet(cudaErrorInvalidMemcpyDirection);
  if (width != 0 && height != 0 && (dst == NULL || src == NULL))
    return cpurtRet(cudaErrorInvalidValue);
  if (height > 1 && (width > dpitch || width > spitch))
    return cpurtRet(cudaErrorInvalidPitchValue);
  struct cpurtOp *op = cpurtOpNew();
  if (op == NULL) return cpurtRet(cudaErrorMemoryAllocation);
  op->run = runCopy;
  op->u.mem.dst = dst;
  op->u.mem.src = src;
  op->u.mem.width = width;
  op->u.mem.height = height;
  op->u.mem.dpitch = dpitch;
  op->u.mem.spitch = spitch;
  if (cpurtSim && (cpurtIsDeviceMemory(dst) || cpurtIsDeviceMemory(src))) op->run = NULL; /* ordered, no work */
  return issue(op, sync ? NULL : stream, sync);
}

static cudaError_t set2D(void *dst, size_t pitch, int value, size_t width, size_t height,
                         cudaStream_t stream, bool sync) {
  cpurtInit();
  if (width != 0 && height != 0 && dst == NULL) return cpurtRet(cudaErrorInvalidValue);
  if (height > 1 && width > pitch) return cpurtRet(cudaErrorInvalidPitchValue);
  struct cpurtOp *op = cpurtOpNew();
  if (op == NULL) return cpurtRet(cudaErrorMemoryAllocation);
  op->run = runSet;
  op->u.mem.dst = dst;
  op->u.mem.value = (unsigned char)value;
  op->u.mem.width = width;
  op->u.mem.height = height;
  op->u.mem.dpitch = pitch;
  if (cpurtSim && cpurtIsDeviceMemory(dst)) op->run = NULL; /* ordered, no work */
  return issue(op, sync ? NULL : stream, sync);
}

CPURT_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                                 enum cudaMemcpyKind kind) {
  return copy2D(dst, count, src, count, count, 1, kind, NULL, true);
}

CPURT_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) {
  return copy2D(dst, count, src, count, count, 1, kind, stream, false);
}

CPURT_API cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind kind) {
  return copy2D(dst, dpitch, src, spitch, width, height, kind, NULL, true);
}

CPURT_API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                                        size_t spitch, size_t width, size_t height,
                                        enum cudaMemcpyKind kind, cudaStream_t stream) {
  return copy2D(dst, dpitch, src, spitch, width, height, kind, stream, false);
}

static cudaError_t checkPeers(int dstDevice, int srcDevice) {
  cpurtInit();
  if (!cpurtValidDevice(dstDevice) || !cpurtValidDevice(srcDevice))
    return cpurtRet(cudaErrorInvalidDevice);
  return cudaSuccess;
}

CPURT_API cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice,
                                     size_t count) {
  cudaError_t err = checkPeers(dstDevice, srcDevice);
  if (err != cudaSuccess) return err;
  return copy2D(dst, count, src, count, count, 1, cudaMemcpyDefault, NULL, true);
}

CPURT_API cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src,
                                          int srcDevice, size_t count, cudaStream_t stream) {
  cudaError_t err = checkPeers(dstDevice, srcDevice);
  if (err != cudaSuccess) return err;
  return copy2D(dst, count, src, count, count, 1, cudaMemcpyDefault, stream, false);
}

CPURT_API cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
  return set2D(devPtr, count, value, count, 1, NULL, true);
}

CPURT_API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                                      cudaStream_t stream) {
  return set2D(devPtr, count, value, count, 1, stream, false);
}

CPURT_API cudaError_t cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width,
                                   size_t height) {
  return set2D(devPtr, pitch, value, width, height, NULL, true);
}

CPURT_API cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width,
                                        size_t height, cudaStream_t stream) {
  return set2D(devPtr, pitch, value, width, height, stream, false);
}
