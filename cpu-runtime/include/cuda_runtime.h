/* anyccl-cpu: the header that CUDA host programs include.
 *
 * The C API lives in cuda_runtime_api.h. As with CUDA, C++ code also gets
 * typed overloads of the allocation calls, so that cudaMalloc(&floatPtr, n)
 * compiles without a cast to void**. */
#ifndef ANYCCL_CPU_CUDA_RUNTIME_H
#define ANYCCL_CPU_CUDA_RUNTIME_H

#include "host_defines.h"
#include "vector_types.h"
#include "cuda_runtime_api.h"

#ifdef __cplusplus
template <class T>
static __inline__ cudaError_t cudaMalloc(T **devPtr, size_t size) {
  return ::cudaMalloc((void **)(void *)devPtr, size);
}
template <class T>
static __inline__ cudaError_t cudaMallocHost(T **ptr, size_t size) {
  return ::cudaMallocHost((void **)(void *)ptr, size);
}
template <class T>
static __inline__ cudaError_t cudaHostAlloc(T **ptr, size_t size, unsigned int flags) {
  return ::cudaHostAlloc((void **)(void *)ptr, size, flags);
}
template <class T>
static __inline__ cudaError_t cudaHostGetDevicePointer(T **pDevice, void *pHost,
                                                       unsigned int flags) {
  return ::cudaHostGetDevicePointer((void **)(void *)pDevice, pHost, flags);
}
template <class T>
static __inline__ cudaError_t cudaMallocManaged(T **devPtr, size_t size,
                                                unsigned int flags = cudaMemAttachGlobal) {
  return ::cudaMallocManaged((void **)(void *)devPtr, size, flags);
}
template <class T>
static __inline__ cudaError_t cudaMallocAsync(T **devPtr, size_t size, cudaStream_t stream) {
  return ::cudaMallocAsync((void **)(void *)devPtr, size, stream);
}
template <class T>
static __inline__ cudaError_t cudaIpcOpenMemHandle(T **devPtr, cudaIpcMemHandle_t handle,
                                                   unsigned int flags) {
  return ::cudaIpcOpenMemHandle((void **)(void *)devPtr, handle, flags);
}
#endif

#endif /* ANYCCL_CPU_CUDA_RUNTIME_H */
