/*
 * anyccl -- the NCCL C API (2.28 level), source- and ABI-compatible.
 *
 * Written for anyccl from NCCL's published interface (names, enum values,
 * struct layouts); the implementation behind it is anyccl's own.
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <cuda_runtime.h>
/* With the real CUDA runtime, the half/bfloat16/fp8 types come along, as
 * with NCCL's header (anyccl-cpu's runtime headers have none). */
#if !defined(ANYCCL_CPU_CUDA_RUNTIME_H)
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#endif
#include <limits.h>
#include <stddef.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

/* anyccl's own version, reported by anyccl-info */
#define ANYCCL_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
#define NCCL_REVOKE_DEFAULT 0x00

typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                        \
  {                                                                                    \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                   \
  }

typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT }

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* Every entry point has a p-prefixed twin (profiling interposition). */
#define ANYCCL_DECL(ret, name, args) ret name args; ret p##name args;

ANYCCL_DECL(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))
ANYCCL_DECL(ncclResult_t, ncclMemFree, (void* ptr))
ANYCCL_DECL(ncclResult_t, ncclGetVersion, (int* version))
ANYCCL_DECL(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId))
ANYCCL_DECL(ncclResult_t, ncclCommInitRankConfig,
            (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config))
ANYCCL_DECL(ncclResult_t, ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))
ANYCCL_DECL(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist))
ANYCCL_DECL(ncclResult_t, ncclCommInitRankScalable,
            (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config))
ANYCCL_DECL(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))
ANYCCL_DECL(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))
ANYCCL_DECL(ncclResult_t, ncclCommAbort, (ncclComm_t comm))
ANYCCL_DECL(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))
ANYCCL_DECL(ncclResult_t, ncclCommSplit,
            (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))
ANYCCL_DECL(ncclResult_t, ncclCommShrink,
            (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
             ncclConfig_t* config, int shrinkFlags))
ANYCCL_DECL(const char*, ncclGetErrorString, (ncclResult_t result))
ANYCCL_DECL(const char*, ncclGetLastError, (ncclComm_t comm))
void ncclResetDebugInit(void);
void pncclResetDebugInit(void);
ANYCCL_DECL(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * asyncError))
ANYCCL_DECL(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count))
ANYCCL_DECL(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device))
ANYCCL_DECL(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank))
ANYCCL_DECL(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle))
ANYCCL_DECL(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle))
ANYCCL_DECL(ncclResult_t, ncclCommWindowRegister,
            (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))
ANYCCL_DECL(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))

ANYCCL_DECL(ncclResult_t, ncclRedOpCreatePreMulSum,
            (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
             ncclComm_t comm))
ANYCCL_DECL(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))

ANYCCL_DECL(ncclResult_t, ncclReduce,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
             int root, ncclComm_t comm, cudaStream_t stream))
ANYCCL_DECL(ncclResult_t, ncclBcast,
            (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream))
ANYCCL_DECL(ncclResult_t, ncclBroadcast,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
             ncclComm_t comm, cudaStream_t stream))
ANYCCL_DECL(ncclResult_t, ncclAllReduce,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
             ncclComm_t comm, cudaStream_t stream))
ANYCCL_DECL(ncclResult_t, ncclReduceScatter,
            (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
             ncclComm_t comm, cudaStream_t stream))
ANYCCL_DECL(ncclResult_t, ncclAllGather,
            (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream))
ANYCCL_DECL(ncclResult_t, ncclAlltoAll,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream))
ANYCCL_DECL(ncclResult_t, ncclGather,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
             ncclComm_t comm, cudaStream_t stream))
ANYCCL_DECL(ncclResult_t, ncclScatter,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
             ncclComm_t comm, cudaStream_t stream))
ANYCCL_DECL(ncclResult_t, ncclSend,
            (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
             cudaStream_t stream))
ANYCCL_DECL(ncclResult_t, ncclRecv,
            (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
             cudaStream_t stream))

/* The device API's communicator (NCCL 2.28; the types, the device functions
 * and the rest of the host functions are in nccl_device.h). */
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
ANYCCL_DECL(ncclResult_t, ncclDevCommCreate,
            (ncclComm_t comm, ncclDevCommRequirements_t const* reqs, ncclDevComm_t* outDevComm))
ANYCCL_DECL(ncclResult_t, ncclDevCommDestroy, (ncclComm_t comm, ncclDevComm_t const* devComm))

ANYCCL_DECL(ncclResult_t, ncclGroupStart, (void))
ANYCCL_DECL(ncclResult_t, ncclGroupEnd, (void))
ANYCCL_DECL(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))

#undef ANYCCL_DECL

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
