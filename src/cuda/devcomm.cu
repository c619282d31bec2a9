/* The device API's few runtime needs beyond rt.cu (the device code itself
 * is all in the public headers, include/nccl_device/): the allocation a
 * pointer lies in, through the driver's cuMemGetAddressRange, resolved at
 * run time (libnccl links no libcuda). */
#include <cuda.h>
#include <cuda_runtime.h>
/* declared where used: backend/cuda_devcomm.c */

extern "C" {

typedef CUresult (*memGetAddressRangeFn)(CUdeviceptr* base, size_t* size, CUdeviceptr p);

int acuMemGetAddressRange(const void* p, void** base, size_t* size) {
  static memGetAddressRangeFn fn = NULL;
  if (fn == NULL) {
    void* f = NULL;
    cudaDriverEntryPointQueryResult q;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess) return e;
    if (q != cudaDriverEntryPointSuccess || f == NULL) return cudaErrorSymbolNotFound;
    fn = (memGetAddressRangeFn)f;
  }
  CUdeviceptr b = 0;
  size_t s = 0;
  CUresult r = fn(&b, &s, (CUdeviceptr)p);
  if (r != CUDA_SUCCESS) return cudaErrorInvalidValue;
  *base = (void*)b;
  *size = s;
  return cudaSuccess;
}

}  // extern "C"
