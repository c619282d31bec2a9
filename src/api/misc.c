/* The rest of the API: queries, errors, version, memory, registration,
 * user reduction ops, group simulation. */
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "checks.h"
#include "comm.h"
#include "cuda_exec.h"
#include "param.h"
#include "reduce.h"
#include "rt.h"

NCCL_API(ncclResult_t, ncclGetVersion, (int* version)) {
  if (version == NULL) {
    WARN("ncclGetVersion: version is NULL");
    return ncclInvalidArgument;
  }
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

NCCL_API(const char*, ncclGetErrorString, (ncclResult_t code)) {
  switch (code) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the anyccl developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

NCCL_API(const char*, ncclGetLastError, (ncclComm_t comm)) { return anycclLastError(); }

void ncclResetDebugInit(void) __attribute__((visibility("default")));
void pncclResetDebugInit(void) __attribute__((visibility("default"), alias("ncclResetDebugInit")));
void ncclResetDebugInit(void) {}

NCCL_API(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommCount", 1));
  if (count == NULL) {
    WARN("ncclCommCount: count is NULL");
    return ncclInvalidArgument;
  }
  *count = comm->nRanks;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommCuDevice", 1));
  if (device == NULL) {
    WARN("ncclCommCuDevice: device is NULL");
    return ncclInvalidArgument;
  }
  *device = comm->cudaDev;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommUserRank", 1));
  if (rank == NULL) {
    WARN("ncclCommUserRank: rank is NULL");
    return ncclInvalidArgument;
  }
  *rank = comm->rank;
  return ncclSuccess;
}

/* ---- memory --------------------------------------------------------------- */
NCCL_API(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size)) {
  if (ptr == NULL) {
    WARN("ncclMemAlloc: ptr is NULL");
    return ncclInvalidArgument;
  }
  *ptr = NULL;
  if (size == 0) return ncclSuccess;
  NCCLCHECK(anycclRtInit());
  /* the cuda backend: virtual memory management, as NCCL's (windows map their peers' allocations side by side:
   * src/backend/cuda_devcomm.c), unless the driver has none */
  if (anycclRt.kind == ANYCCL_BACKEND_CUDA && acuVmmAlloc != NULL && anycclParamInt(PARAM_CUDA_MEM_VMM)) {
    int e = acuVmmAlloc(ptr, size);
    if (e == 0) return ncclSuccess;
    if (e != 801 /* cudaErrorNotSupported */) {
      WARN("ncclMemAlloc: %zu bytes: %s (%d)", size, anycclRt.getErrorString(e), e);
      return ncclUnhandledCudaError;
    }
    INFO(NCCL_ALLOC, "ncclMemAlloc: no virtual memory management on this device: cudaMalloc");
  }
  CUDACHECK(anycclRt.malloc(ptr, size));
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, (void* ptr)) {
  if (ptr == NULL) return ncclSuccess;
  NCCLCHECK(anycclRtInit());
  if (anycclRt.kind == ANYCCL_BACKEND_CUDA && acuVmmFree != NULL && acuVmmFree(ptr) == 0) return ncclSuccess;
  CUDACHECK(anycclRt.free(ptr));
  return ncclSuccess;
}

/* Registration: the cpu backend moves data through its FIFOs either way, so
 * a registration only remembers the range (and catches bad handles). */
struct anycclReg {
  uint64_t magic;
  struct ncclComm* comm;
  void* buff;
  size_t size;
};
#define REG_MAGIC 0x616e796363526567ULL
#define WIN_MAGIC 0x616e796363577267ULL

NCCL_API(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommRegister", 1));
  if (handle == NULL || (buff == NULL && size > 0)) {
    WARN("ncclCommRegister: buff %p, size %zu, handle %p: pass a buffer and a place for the handle", buff, size,
         (void*)handle);
    return ncclInvalidArgument;
  }
  struct anycclReg* r;
  ANYCCL_CALLOC(r, 1);
  *r = (struct anycclReg){REG_MAGIC, comm, buff, size};
  *handle = r;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommDeregister", 0));
  struct anycclReg* r = handle;
  if (r == NULL || r->magic != REG_MAGIC || r->comm != comm) {
    WARN("ncclCommDeregister: handle %p was not returned by ncclCommRegister on comm %p", handle, (void*)comm);
    return ncclInvalidArgument;
  }
  r->magic = 0;
  free(r);
  return ncclSuccess;
}

/* Windows: on the cuda backend the device API's (backend/cuda_devcomm.c,
 * collective); on the cpu backend a record of the range, as registrations. */
NCCL_API(ncclResult_t, ncclCommWindowRegister,
         (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommWindowRegister", 1));
  if (win == NULL || buff == NULL || size == 0) {
    WARN("ncclCommWindowRegister: buff %p, size %zu, win %p: pass a buffer, its size and a place for the window", buff,
         size, (void*)win);
    return ncclInvalidArgument;
  }
  if (comm->cuda) return anycclWindowRegister(comm, buff, size, win, winFlags);
  struct anycclReg* r;
  ANYCCL_CALLOC(r, 1);
  *r = (struct anycclReg){WIN_MAGIC, comm, buff, size};
  *win = (ncclWindow_t)r;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclCommWindowDeregister", 0));
  if (comm->cuda) return anycclWindowDeregister(comm, win);
  struct anycclReg* r = (struct anycclReg*)win;
  if (r == NULL || r->magic != WIN_MAGIC || r->comm != comm) {
    WARN("ncclCommWindowDeregister: win %p was not returned by ncclCommWindowRegister on comm %p", (void*)win,
         (void*)comm);
    return ncclInvalidArgument;
  }
  r->magic = 0;
  free(r);
  return ncclSuccess;
}

/* ---- user reduction ops ------------------------------------------------------ */
NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum,
         (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclRedOpCreatePreMulSum", 1));
  if (op == NULL || scalar == NULL) {
    WARN("ncclRedOpCreatePreMulSum: op %p, scalar %p: both must be non-NULL", (void*)op, scalar);
    return ncclInvalidArgument;
  }
  if ((int)datatype < 0 || datatype >= ncclNumTypes) {
    WARN("ncclRedOpCreatePreMulSum: datatype %d is not an ncclDataType_t", (int)datatype);
    return ncclInvalidArgument;
  }
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    WARN("ncclRedOpCreatePreMulSum: residence %d is neither ncclScalarDevice nor ncclScalarHostImmediate",
         (int)residence);
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&comm->lock);
  int idx = -1;
  for (int i = 0; i < ANYCCL_MAX_USER_OPS && idx < 0; i++)
    if (!comm->userOps[i].used) idx = i;
  if (idx >= 0) {
    struct anycclUserOp* u = &comm->userOps[idx];
    memset(u, 0, sizeof(*u));
    u->used = 1;
    u->type = datatype;
    u->residence = residence;
    if (residence == ncclScalarHostImmediate) memcpy(&u->scalar, scalar, anycclTypeSize(datatype));
    else u->devScalar = scalar;
  }
  pthread_mutex_unlock(&comm->lock);
  if (idx < 0) {
    WARN("ncclRedOpCreatePreMulSum: comm %p already has %d live ops; destroy some with ncclRedOpDestroy",
         (void*)comm, ANYCCL_MAX_USER_OPS);
    return ncclInvalidUsage;
  }
  *op = (ncclRedOp_t)(ncclNumOps + idx);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclRedOpDestroy", 0));
  int idx = (int)op - (int)ncclNumOps;
  if ((int)op >= 0 && (int)op < ncclNumOps) {
    WARN("ncclRedOpDestroy: op %d is a built-in op; only ops from ncclRedOpCreatePreMulSum can be destroyed", (int)op);
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&comm->lock);
  int ok = idx >= 0 && idx < ANYCCL_MAX_USER_OPS && comm->userOps[idx].used;
  if (ok) comm->userOps[idx].used = 0;
  pthread_mutex_unlock(&comm->lock);
  if (!ok) {
    WARN("ncclRedOpDestroy: op %d is not a live op of comm %p", (int)op, (void*)comm);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* ---- simulation ------------------------------------------------------------- */
NCCL_API(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo)) {
  if (simInfo == NULL || simInfo->magic != 0x74685283) {
    WARN("ncclGroupSimulateEnd: simInfo must be initialised with NCCL_SIM_INFO_INITIALIZER");
    anycclGroupSetError(ncclInvalidArgument);
    ncclGroupEnd();
    return ncclInvalidArgument;
  }
  /* Every backend models the group and launches nothing, as NCCL
   * (sim/estimate.c). */
  return anycclGroupSimulateEndInternal(simInfo);
}
