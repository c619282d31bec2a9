/* cudaGetDriverEntryPoint[ByVersion]: driver entry points through the
 * runtime, as libraries built against CUDA resolve them (an NCCL net plugin
 * such as aws-ofi-nccl does at init). They come from anyccl-cpu's own driver
 * library (cpu-runtime/driver, built as cpu-driver/libcuda.so.1), found on
 * the library path; a libcuda.so.1 that is not anyccl-cpu's (an NVIDIA
 * driver) is never used: its contexts and pointers would not be ours. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include "cpurt.h"

typedef int (*procAddress_t)(const char *, void **, int, unsigned long long, int *);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static procAddress_t procAddress;

static void findDriver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    cpurtWarn("cudaGetDriverEntryPoint: no libcuda.so.1 on the library path; put anyccl's "
              "cpu-driver folder (build/cpu-driver) on LD_LIBRARY_PATH");
    return;
  }
  if (dlsym(h, "anycclCpuDriverAbi") == NULL) {
    cpurtWarn("cudaGetDriverEntryPoint: the libcuda.so.1 found is not anyccl-cpu's driver; put "
              "anyccl's cpu-driver folder (build/cpu-driver) first on LD_LIBRARY_PATH");
    dlclose(h);
    return;
  }
  procAddress = (procAddress_t)dlsym(h, "cuGetProcAddress_v2");   /* kept loaded */
}

static cudaError_t entryPoint(const char *symbol, void **funcPtr, int version,
                              unsigned long long flags,
                              enum cudaDriverEntryPointQueryResult *status) {
  if (funcPtr == NULL || symbol == NULL || (flags & ~3ull)) return cpurtRet(cudaErrorInvalidValue);
  *funcPtr = NULL;
  if (status) *status = cudaDriverEntryPointSymbolNotFound;
  pthread_once(&once, findDriver);
  if (procAddress == NULL) return cpurtRet(cudaErrorInsufficientDriver);
  int st = cudaDriverEntryPointSymbolNotFound;
  procAddress(symbol, funcPtr, version, flags, &st);
  if (status) *status = (enum cudaDriverEntryPointQueryResult)st;
  return cudaSuccess;   /* as CUDA: a missing symbol is told by *status and NULL */
}

CPURT_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                              unsigned long long flags,
                                              enum cudaDriverEntryPointQueryResult *driverStatus) {
  return entryPoint(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

CPURT_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                                       unsigned int cudaVersion,
                                                       unsigned long long flags,
                                                       enum cudaDriverEntryPointQueryResult *driverStatus) {
  if (cudaVersion == 0 || cudaVersion > (unsigned)INT32_MAX) return cpurtRet(cudaErrorInvalidValue);
  return entryPoint(symbol, funcPtr, (int)cudaVersion, flags, driverStatus);
}
