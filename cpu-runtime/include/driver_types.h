/* anyccl-cpu: types, enums and flags of the CUDA runtime API.
 *
 * Written for anyccl; the names, numeric values and struct layouts follow
 * CUDA 13 so that host code written for CUDA compiles against this header
 * unchanged and numbers that it logs or compares mean the same thing. */
#ifndef ANYCCL_CPU_DRIVER_TYPES_H
#define ANYCCL_CPU_DRIVER_TYPES_H

#include <stddef.h>
#include "host_defines.h"
#include "anyccl_cpu_errors.h"

/* ---- flags ------------------------------------------------------------- */
#define cudaHostAllocDefault          0x00
#define cudaHostAllocPortable         0x01
#define cudaHostAllocMapped           0x02
#define cudaHostAllocWriteCombined    0x04

#define cudaHostRegisterDefault       0x00
#define cudaHostRegisterPortable      0x01
#define cudaHostRegisterMapped        0x02
#define cudaHostRegisterIoMemory      0x04
#define cudaHostRegisterReadOnly      0x08

#define cudaStreamDefault             0x00
#define cudaStreamNonBlocking         0x01

#define cudaEventDefault              0x00
#define cudaEventBlockingSync         0x01
#define cudaEventDisableTiming        0x02
#define cudaEventInterprocess         0x04
#define cudaEventRecordDefault        0x00
#define cudaEventRecordExternal       0x01
#define cudaEventWaitDefault          0x00
#define cudaEventWaitExternal         0x01

#define cudaDeviceScheduleAuto        0x00
#define cudaDeviceScheduleSpin        0x01
#define cudaDeviceScheduleYield       0x02
#define cudaDeviceScheduleBlockingSync 0x04
#define cudaDeviceBlockingSync        0x04
#define cudaDeviceScheduleMask        0x07
#define cudaDeviceMapHost             0x08
#define cudaDeviceLmemResizeToMax     0x10
#define cudaDeviceSyncMemops          0x80
#define cudaDeviceMask                0xff

#define cudaIpcMemLazyEnablePeerAccess 0x01

#define cudaMemAttachGlobal           0x01
#define cudaMemAttachHost             0x02
#define cudaMemAttachSingle           0x04

#define cudaCpuDeviceId               ((int)-1)
#define cudaInvalidDeviceId           ((int)-2)

#define CUDA_IPC_HANDLE_SIZE 64

/* ---- errors ------------------------------------------------------------ */
#define ANYCCL_CPU_ENUM_ENTRY(name, value, text) name = value,
enum __device_builtin__ cudaError { ANYCCL_CPU_ERRORS(ANYCCL_CPU_ENUM_ENTRY) };
#undef ANYCCL_CPU_ENUM_ENTRY
typedef enum cudaError cudaError_t;

/* ---- enums ------------------------------------------------------------- */
enum __device_builtin__ cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

enum __device_builtin__ cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3
};

enum __device_builtin__ cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2
};

enum __device_builtin__ cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2
};

/* The attributes that host code commonly asks for (values are CUDA's). */
enum __device_builtin__ cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2
};
#define cudaEnableDefault                0x0
#define cudaEnableLegacyStream           0x1
#define cudaEnablePerThreadDefaultStream 0x2

enum __device_builtin__ cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxBlockDimX = 2,
  cudaDevAttrMaxBlockDimY = 3,
  cudaDevAttrMaxBlockDimZ = 4,
  cudaDevAttrMaxGridDimX = 5,
  cudaDevAttrMaxGridDimY = 6,
  cudaDevAttrMaxGridDimZ = 7,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrTotalConstantMemory = 9,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMaxRegistersPerBlock = 12,
  cudaDevAttrClockRate = 13,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrIntegrated = 18,
  cudaDevAttrCanMapHostMemory = 19,
  cudaDevAttrComputeMode = 20,
  cudaDevAttrConcurrentKernels = 31,
  cudaDevAttrEccEnabled = 32,
  cudaDevAttrPciBusId = 33,
  cudaDevAttrPciDeviceId = 34,
  cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrGlobalMemoryBusWidth = 37,
  cudaDevAttrL2CacheSize = 38,
  cudaDevAttrMaxThreadsPerMultiProcessor = 39,
  cudaDevAttrAsyncEngineCount = 40,
  cudaDevAttrUnifiedAddressing = 41,
  cudaDevAttrPciDomainId = 50,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrStreamPrioritiesSupported = 78,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaDevAttrManagedMemory = 83,
  cudaDevAttrHostNativeAtomicSupported = 86,
  cudaDevAttrPageableMemoryAccess = 88,
  cudaDevAttrConcurrentManagedAccess = 89,
  cudaDevAttrCanUseHostPointerForRegisteredMem = 91,
  cudaDevAttrCooperativeLaunch = 95,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
  cudaDevAttrHostRegisterSupported = 99,
  cudaDevAttrDirectManagedMemAccessFromHost = 101,
  cudaDevAttrMaxBlocksPerMultiprocessor = 106,
  cudaDevAttrMemoryPoolsSupported = 115,
  cudaDevAttrGPUDirectRDMASupported = 116,
  cudaDevAttrClusterLaunch = 120,
  cudaDevAttrIpcEventSupport = 125,
  cudaDevAttrNumaConfig = 130,
  cudaDevAttrNumaId = 131,
  cudaDevAttrMpsEnabled = 133,
  cudaDevAttrHostNumaId = 134
};

/* ---- structs ----------------------------------------------------------- */
struct __device_builtin__ cudaPointerAttributes {
  enum cudaMemoryType type;
  int device;
  void *devicePointer;
  void *hostPointer;
  long reserved[8];
};

struct __device_builtin__ CUuuid_st { char bytes[16]; };
typedef struct CUuuid_st cudaUUID_t;

/* Same field order and types as CUDA 13's, so the struct has CUDA's size and
 * offsets; anyccl-cpu fills the fields that have a meaning on a CPU. */
struct __device_builtin__ cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  char luid[8];
  unsigned int luidDeviceNodeMask;
  size_t totalGlobalMem, sharedMemPerBlock;
  int regsPerBlock, warpSize;
  size_t memPitch;
  int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
  size_t totalConstMem;
  int major, minor;
  size_t textureAlignment, texturePitchAlignment;
  int multiProcessorCount, integrated, canMapHostMemory;
  int maxTexture1D, maxTexture1DMipmap, maxTexture2D[2], maxTexture2DMipmap[2];
  int maxTexture2DLinear[3], maxTexture2DGather[2], maxTexture3D[3], maxTexture3DAlt[3];
  int maxTextureCubemap, maxTexture1DLayered[2], maxTexture2DLayered[3];
  int maxTextureCubemapLayered[2];
  int maxSurface1D, maxSurface2D[2], maxSurface3D[3], maxSurface1DLayered[2];
  int maxSurface2DLayered[3], maxSurfaceCubemap, maxSurfaceCubemapLayered[2];
  size_t surfaceAlignment;
  int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver;
  int asyncEngineCount, unifiedAddressing, memoryBusWidth, l2CacheSize;
  int persistingL2CacheMaxSize, maxThreadsPerMultiProcessor, streamPrioritiesSupported;
  int globalL1CacheSupported, localL1CacheSupported;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID;
  int hostNativeAtomicSupported, pageableMemoryAccess, concurrentManagedAccess;
  int computePreemptionSupported, canUseHostPointerForRegisteredMem, cooperativeLaunch;
  size_t sharedMemPerBlockOptin;
  int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost;
  int maxBlocksPerMultiProcessor, accessPolicyMaxWindowSize;
  size_t reservedSharedMemPerBlock;
  int hostRegisterSupported, sparseCudaArraySupported, hostRegisterReadOnlySupported;
  int timelineSemaphoreInteropSupported, memoryPoolsSupported, gpuDirectRDMASupported;
  unsigned int gpuDirectRDMAFlushWritesOptions;
  int gpuDirectRDMAWritesOrdering;
  unsigned int memoryPoolSupportedHandleTypes;
  int deferredMappingCudaArraySupported, ipcEventSupported, clusterLaunch;
  int unifiedFunctionPointers, deviceNumaConfig, deviceNumaId, mpsEnabled, hostNumaId;
  unsigned int gpuPciDeviceID, gpuPciSubsystemID;
  int hostNumaMultinodeIpcSupported;
  int reserved[56];
};

/* IPC handles are opaque blobs of CUDA's size; anyccl-cpu's layout is private
 * (src/ipc.c). */
typedef __device_builtin__ struct cudaIpcMemHandle_st {
  char reserved[CUDA_IPC_HANDLE_SIZE];
} cudaIpcMemHandle_t;

typedef __device_builtin__ struct cudaIpcEventHandle_st {
  char reserved[CUDA_IPC_HANDLE_SIZE];
} cudaIpcEventHandle_t;

/* ---- handles ----------------------------------------------------------- */
typedef __device_builtin__ struct CUstream_st *cudaStream_t;
typedef __device_builtin__ struct CUevent_st *cudaEvent_t;

/* The legacy default stream (the same as stream 0) and the per-thread
 * default stream, as special handle values. */
#define cudaStreamLegacy    ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

typedef void (CUDART_CB *cudaHostFn_t)(void *userData);

#endif /* ANYCCL_CPU_DRIVER_TYPES_H */
