/* anyccl-cpu: the CUDA runtime API, implemented on the host.
 *
 * Written for anyccl; function names and signatures follow CUDA 13 so that
 * host code written for CUDA builds against libanyccl-cpu unchanged.
 * "Device" memory is host memory (shareable between processes, so IPC
 * works); a stream is an ordered queue of work run by its own thread; an
 * event completes when the work before it has. */
#ifndef ANYCCL_CPU_CUDA_RUNTIME_API_H
#define ANYCCL_CPU_CUDA_RUNTIME_API_H

#include <stddef.h>
#include "host_defines.h"
#include "driver_types.h"

#define CUDART_VERSION 13000
#define __CUDART_API_VERSION CUDART_VERSION

#ifdef __cplusplus
extern "C" {
#endif

typedef void (CUDART_CB *cudaStreamCallback_t)(cudaStream_t stream, cudaError_t status,
                                               void *userData);

/* Present only in anyccl-cpu: lets libnccl tell it apart from the real CUDA
 * runtime (dlsym(RTLD_DEFAULT, "anycclCpuRuntimeVersion")). */
int anycclCpuRuntimeVersion(void);

/* ---- errors ------------------------------------------------------------ */
extern __host__ cudaError_t CUDARTAPI cudaGetLastError(void);
extern __host__ cudaError_t CUDARTAPI cudaPeekAtLastError(void);
extern __host__ const char *CUDARTAPI cudaGetErrorName(cudaError_t error);
extern __host__ const char *CUDARTAPI cudaGetErrorString(cudaError_t error);

/* ---- devices ----------------------------------------------------------- */
extern __host__ cudaError_t CUDARTAPI cudaGetDeviceCount(int *count);
extern __host__ cudaError_t CUDARTAPI cudaSetDevice(int device);
extern __host__ cudaError_t CUDARTAPI cudaGetDevice(int *device);
extern __host__ cudaError_t CUDARTAPI cudaInitDevice(int device, unsigned int deviceFlags,
                                                     unsigned int flags);
extern __host__ cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *prop,
                                                              int device);
extern __host__ cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value,
                                                             enum cudaDeviceAttr attr,
                                                             int device);
extern __host__ cudaError_t CUDARTAPI cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);
extern __host__ cudaError_t CUDARTAPI cudaDeviceGetByPCIBusId(int *device, const char *pciBusId);
extern __host__ cudaError_t CUDARTAPI cudaDeviceSynchronize(void);
extern __host__ cudaError_t CUDARTAPI cudaDeviceReset(void);
extern __host__ cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int *canAccessPeer, int device,
                                                              int peerDevice);
extern __host__ cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peerDevice,
                                                                 unsigned int flags);
extern __host__ cudaError_t CUDARTAPI cudaDeviceDisablePeerAccess(int peerDevice);
extern __host__ cudaError_t CUDARTAPI cudaSetDeviceFlags(unsigned int flags);
extern __host__ cudaError_t CUDARTAPI cudaGetDeviceFlags(unsigned int *flags);
extern __host__ cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int *leastPriority,
                                                                       int *greatestPriority);
extern __host__ cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free, size_t *total);
extern __host__ cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion);
extern __host__ cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion);
/* Driver entry points (cuGetProcAddress through the runtime). anyccl-cpu
 * answers them from its driver library (libcuda.so.1 of the build's
 * cpu-driver folder, found through LD_LIBRARY_PATH); without it, or when the
 * libcuda.so.1 found is another driver, cudaErrorInsufficientDriver. */
extern __host__ cudaError_t CUDARTAPI cudaGetDriverEntryPoint(
    const char *symbol, void **funcPtr, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus __dv(NULL));
extern __host__ cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus __dv(NULL));

/* ---- memory ------------------------------------------------------------ */
extern __host__ cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size);
extern __host__ cudaError_t CUDARTAPI cudaFree(void *devPtr);
extern __host__ cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size);
extern __host__ cudaError_t CUDARTAPI cudaFreeHost(void *ptr);
extern __host__ cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size,
                                                    unsigned int flags);
extern __host__ cudaError_t CUDARTAPI cudaHostGetDevicePointer(void **pDevice, void *pHost,
                                                               unsigned int flags);
extern __host__ cudaError_t CUDARTAPI cudaHostGetFlags(unsigned int *pFlags, void *pHost);
extern __host__ cudaError_t CUDARTAPI cudaHostRegister(void *ptr, size_t size,
                                                       unsigned int flags);
extern __host__ cudaError_t CUDARTAPI cudaHostUnregister(void *ptr);
extern __host__ cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size,
                                                        unsigned int flags
                                                        __dv(cudaMemAttachGlobal));
extern __host__ cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size,
                                                      cudaStream_t hStream);
extern __host__ cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream);
extern __host__ cudaError_t CUDARTAPI cudaPointerGetAttributes(
    struct cudaPointerAttributes *attributes, const void *ptr);
/* anyccl extension: the allocation of any kind (device, managed, pinned or
 * registered host memory) that holds p. Returns 0 and fills base and size
 * when found, else 1. */
int anycclCpuMemFind(const void *p, void **base, size_t *size);

extern __host__ cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count,
                                                 enum cudaMemcpyKind kind);
extern __host__ cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                                      enum cudaMemcpyKind kind,
                                                      cudaStream_t stream __dv(0));
extern __host__ cudaError_t CUDARTAPI cudaMemcpyPeer(void *dst, int dstDevice, const void *src,
                                                     int srcDevice, size_t count);
extern __host__ cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void *dst, int dstDevice,
                                                          const void *src, int srcDevice,
                                                          size_t count,
                                                          cudaStream_t stream __dv(0));
extern __host__ cudaError_t CUDARTAPI cudaMemcpy2D(void *dst, size_t dpitch, const void *src,
                                                   size_t spitch, size_t width, size_t height,
                                                   enum cudaMemcpyKind kind);
extern __host__ cudaError_t CUDARTAPI cudaMemcpy2DAsync(void *dst, size_t dpitch,
                                                        const void *src, size_t spitch,
                                                        size_t width, size_t height,
                                                        enum cudaMemcpyKind kind,
                                                        cudaStream_t stream __dv(0));
extern __host__ cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count);
extern __host__ cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count,
                                                      cudaStream_t stream __dv(0));
extern __host__ cudaError_t CUDARTAPI cudaMemset2D(void *devPtr, size_t pitch, int value,
                                                   size_t width, size_t height);
extern __host__ cudaError_t CUDARTAPI cudaMemset2DAsync(void *devPtr, size_t pitch, int value,
                                                        size_t width, size_t height,
                                                        cudaStream_t stream __dv(0));

/* ---- IPC --------------------------------------------------------------- */
extern __host__ cudaError_t CUDARTAPI cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle,
                                                          void *devPtr);
extern __host__ cudaError_t CUDARTAPI cudaIpcOpenMemHandle(void **devPtr,
                                                           cudaIpcMemHandle_t handle,
                                                           unsigned int flags);
extern __host__ cudaError_t CUDARTAPI cudaIpcCloseMemHandle(void *devPtr);
extern __host__ cudaError_t CUDARTAPI cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle,
                                                            cudaEvent_t event);
extern __host__ cudaError_t CUDARTAPI cudaIpcOpenEventHandle(cudaEvent_t *event,
                                                             cudaIpcEventHandle_t handle);

/* ---- streams ----------------------------------------------------------- */
extern __host__ cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream);
extern __host__ cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream,
                                                                unsigned int flags);
extern __host__ cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream,
                                                                   unsigned int flags,
                                                                   int priority);
extern __host__ cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream);
extern __host__ cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream);
extern __host__ cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream);
extern __host__ cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                                          unsigned int flags __dv(0));
extern __host__ cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t hStream,
                                                         unsigned int *flags);
extern __host__ cudaError_t CUDARTAPI cudaStreamGetPriority(cudaStream_t hStream, int *priority);
extern __host__ cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t hStream, int *device);
extern __host__ cudaError_t CUDARTAPI cudaStreamGetId(cudaStream_t hStream,
                                                      unsigned long long *streamId);
extern __host__ cudaError_t CUDARTAPI cudaStreamAddCallback(cudaStream_t stream,
                                                            cudaStreamCallback_t callback,
                                                            void *userData, unsigned int flags);
extern __host__ cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn,
                                                         void *userData);
extern __host__ cudaError_t CUDARTAPI cudaStreamIsCapturing(
    cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus);
extern __host__ cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(
    enum cudaStreamCaptureMode *mode);

/* ---- events ------------------------------------------------------------ */
extern __host__ cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event);
extern __host__ cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event,
                                                               unsigned int flags);
extern __host__ cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event,
                                                      cudaStream_t stream __dv(0));
extern __host__ cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event,
                                                               cudaStream_t stream __dv(0),
                                                               unsigned int flags __dv(0));
extern __host__ cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event);
extern __host__ cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event);
extern __host__ cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                                           cudaEvent_t end);
extern __host__ cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event);

#ifdef __cplusplus
}
#endif

#endif /* ANYCCL_CPU_CUDA_RUNTIME_API_H */
