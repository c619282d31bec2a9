/* The real CUDA runtime behind the core's runtime table (cuda_exec.h).
 * libnccl links the runtime statically and keeps its symbols local, as NCCL
 * does: the runtime loads libcuda at run time, so a machine with no driver
 * still loads libnccl (and uses the cpu backend through anyccl-cpu). */
#include <cuda_runtime.h>
#include <string.h>
#include "cuda_exec.h"

extern "C" {

int acuDeviceCount(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}
const char* acuErrorString(int err) { return cudaGetErrorString((cudaError_t)err); }
int acuGetDevice(int* dev) { return cudaGetDevice(dev); }
int acuSetDevice(int dev) { return cudaSetDevice(dev); }

/* The calling thread's current context (NULL: it never used CUDA), read and
 * set through the driver's entry points, so that a library call made on a
 * thread that is not ours (PyTorch's watchdog calling
 * ncclCommGetAsyncError) leaves it as it found it: switching such a thread
 * "back" with cudaSetDevice(0) would create device 0's context in this
 * process, some 200 ms during which other threads' CUDA calls wait. */
typedef int (*ctxGetFn)(void**);
typedef int (*ctxSetFn)(void*);
static void* driverFn(const char* name) {
  void* fn = NULL;
  cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
  if (cudaGetDriverEntryPointByVersion(name, &fn, 4000, cudaEnableDefault, &q) != cudaSuccess) fn = NULL;
#else
  if (cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q) != cudaSuccess) fn = NULL;
#endif
  if (fn == NULL) cudaGetLastError();
  return fn;
}
int acuCtxGet(void** ctx) {
  static ctxGetFn get = (ctxGetFn)driverFn("cuCtxGetCurrent");
  *ctx = NULL;
  return get ? get(ctx) : (int)cudaErrorNotSupported;
}
int acuCtxSet(void* ctx) {
  static ctxSetFn set = (ctxSetFn)driverFn("cuCtxSetCurrent");
  return set ? set(ctx) : (int)cudaErrorNotSupported;
}
int acuGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
int acuDeviceGetPCIBusId(char* busId, int len, int dev) { return cudaDeviceGetPCIBusId(busId, len, dev); }
int acuLaunchHostFunc(void* stream, void (*fn)(void*), void* arg) {
  return cudaLaunchHostFunc((cudaStream_t)stream, fn, arg);
}
int acuMalloc(void** p, size_t size) { return cudaMalloc(p, size); }
int acuFree(void* p) { return cudaFree(p); }
int acuStreamSynchronize(void* stream) { return cudaStreamSynchronize((cudaStream_t)stream); }
int acuEventCreateWithFlags(void** ev, unsigned flags) { return cudaEventCreateWithFlags((cudaEvent_t*)ev, flags); }
int acuEventRecord(void* ev, void* stream) { return cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream); }
int acuStreamWaitEvent(void* stream, void* ev, unsigned flags) {
  return cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)ev, flags);
}
int acuEventDestroy(void* ev) { return cudaEventDestroy((cudaEvent_t)ev); }
int acuStreamGetDevice(void* stream, int* dev) { return cudaStreamGetDevice((cudaStream_t)stream, dev); }
int acuStreamIsCapturing(void* stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing((cudaStream_t)stream, &st) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return st != cudaStreamCaptureStatusNone;
}
int acuIpcGetMemHandle(void* handle64, void* p) { return cudaIpcGetMemHandle((cudaIpcMemHandle_t*)handle64, p); }
int acuIpcOpenMemHandle(void** p, const void* handle64) {
  cudaIpcMemHandle_t h;
  memcpy(&h, handle64, sizeof(h));
  return cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess);
}
int acuIpcCloseMemHandle(void* p) { return cudaIpcCloseMemHandle(p); }
int acuMemsetD(void* p, int v, size_t n) { return cudaMemset(p, v, n); }
int acuMemcpyHtoD(void* dst, const void* src, size_t n) { return cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice); }
int acuMemcpyDtoH(void* dst, const void* src, size_t n) { return cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost); }
int acuHostAllocMapped(void** host, void** dev, size_t n) {
  cudaError_t e = cudaHostAlloc(host, n, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) return e;
  memset(*host, 0, n);
  return cudaHostGetDevicePointer(dev, *host, 0);
}
int acuFreeHost(void* p) { return cudaFreeHost(p); }
int acuHostRegister(void* p, size_t n, void** dev) {
  cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e != cudaSuccess) return e;
  return cudaHostGetDevicePointer(dev, p, 0);
}
int acuHostUnregister(void* p) { return cudaHostUnregister(p); }
int acuMemcpy(void* dst, const void* src, size_t n) { return cudaMemcpy(dst, src, n, cudaMemcpyDefault); }
int acuMemcpyAsync(void* dst, const void* src, size_t n, void* stream) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)stream);
}
int acuStreamCreateNonBlocking(void** stream) {
  return cudaStreamCreateWithFlags((cudaStream_t*)stream, cudaStreamNonBlocking);
}
int acuStreamDestroy(void* stream) { return cudaStreamDestroy((cudaStream_t)stream); }
int acuEventQuery(void* ev) { return cudaEventQuery((cudaEvent_t)ev); }
int acuCaptureModeExchange(int mode) {
  cudaStreamCaptureMode m = (cudaStreamCaptureMode)mode;
  if (cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) cudaGetLastError();
  return (int)m;
}
int acuCanAccessPeer(int dev, int peerDev) {
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, dev, peerDev) != cudaSuccess) return 0;
  return can;
}
int acuEnablePeer(int dev, int peerDev) {
  int saved = 0;
  cudaGetDevice(&saved);
  cudaSetDevice(dev);
  cudaError_t e = cudaDeviceEnablePeerAccess(peerDev, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    e = cudaSuccess;
  }
  cudaSetDevice(saved);
  return e;
}
int acuDeviceSynchronize(void) { return cudaDeviceSynchronize(); }
int acuPointerIsDevice(const void* p, int* dev) {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (dev) *dev = a.device;
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

}  // extern "C"
