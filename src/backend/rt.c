/* Find the CUDA runtime API in the process (see rt.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "cuda_exec.h"
#include "rt.h"

struct anycclRt anycclRt;
static pthread_once_t rtOnce = PTHREAD_ONCE_INIT;
static ncclResult_t rtResult = ncclSuccess;

static const char* unknownError(int e) { return "unknown error"; }

static void* lookup(const char* name) { return dlsym(RTLD_DEFAULT, name); }

/* cuda backend: IPC in the table's shape (src/onesided uses it) */
static int cuIpcGet(cudaIpcMemHandle_t* h, void* p) { return acuIpcGetMemHandle(h, p); }
static int cuIpcOpen(void** p, cudaIpcMemHandle_t h, unsigned flags) { return acuIpcOpenMemHandle(p, &h); }

/* The sim backend asked for, without loading anything: ncclGetUniqueId must
 * not initialise CUDA (a program may fork its ranks after it, and CUDA does
 * not survive a fork). */
int anycclRtSimRequested(void) {
  int (*simMode)(void);
  *(void**)&simMode = lookup("anycclCpuSimMode");
  return simMode != NULL && simMode();
}

static void rtLoad(void) {
  struct anycclRt rt = {0};
  rt.getErrorString = unknownError;
  const char* want = getenv("ANYCCL_BACKEND");
  int (*simMode)(void);
  *(void**)&simMode = lookup("anycclCpuSimMode");
  if (want && strcmp(want, "sim") == 0 && (simMode == NULL || !simMode())) {
    WARN("ANYCCL_BACKEND=sim needs the anyccl-cpu runtime: link the program with anyccl-cpu "
         "(pkg-config --libs anyccl-cpu) instead of the CUDA runtime");
    rtResult = ncclInvalidUsage;
    return;
  }
  if (simMode != NULL && simMode()) {
    rt.kind = ANYCCL_BACKEND_SIM;
    rt.name = "sim";
    *(void**)&rt.simOpStart = lookup("anycclCpuSimOpStart");
    *(void**)&rt.simOpSetEnd = lookup("anycclCpuSimOpSetEnd");
    *(void**)&rt.simOpDefer = lookup("anycclCpuSimOpDefer");
    *(void**)&rt.simResolve = lookup("anycclCpuSimResolve");
    if (!rt.simOpStart || !rt.simOpSetEnd || !rt.simOpDefer || !rt.simResolve) {
      WARN("ANYCCL_BACKEND=sim: this anyccl-cpu lacks the virtual clock (anycclCpuSimOpStart); use the one built "
           "with this libnccl");
      rtResult = ncclSystemError;
      return;
    }
  } else if (lookup("anycclCpuRuntimeVersion") != NULL) {
    rt.kind = ANYCCL_BACKEND_CPU;
    rt.name = "cpu";
  } else if (acuDeviceCount != NULL && acuDeviceCount() > 0) {
    /* The cuda backend: our own (static) CUDA runtime, whichever runtime
     * the program uses; handles (streams, events, pointers) are shared
     * through the driver. */
    rt.kind = ANYCCL_BACKEND_CUDA;
    rt.name = "cuda";
    rt.getErrorString = acuErrorString;
    rt.getDevice = acuGetDevice;
    rt.setDevice = acuSetDevice;
    rt.getDeviceCount = acuGetDeviceCount;
    rt.deviceGetPCIBusId = acuDeviceGetPCIBusId;
    *(void**)&rt.launchHostFunc = (void*)acuLaunchHostFunc;
    rt.malloc = acuMalloc;
    rt.free = acuFree;
    *(void**)&rt.streamSynchronize = (void*)acuStreamSynchronize;
    *(void**)&rt.eventCreateWithFlags = (void*)acuEventCreateWithFlags;
    *(void**)&rt.eventRecord = (void*)acuEventRecord;
    *(void**)&rt.streamWaitEvent = (void*)acuStreamWaitEvent;
    *(void**)&rt.eventDestroy = (void*)acuEventDestroy;
    *(void**)&rt.streamGetDevice = (void*)acuStreamGetDevice;
    *(void**)&rt.streamIsCapturing = (void*)acuStreamIsCapturing;
    if (acuMemcpyAsync != NULL) { /* one-sided layer (absent in an older rt.cu) */
      rt.ipcGetMemHandle = cuIpcGet;
      rt.ipcOpenMemHandle = cuIpcOpen;
      rt.ipcCloseMemHandle = acuIpcCloseMemHandle;
      rt.memcpy = acuMemcpy;
      *(void**)&rt.memcpyAsync = (void*)acuMemcpyAsync;
      *(void**)&rt.streamCreateNonBlocking = (void*)acuStreamCreateNonBlocking;
      *(void**)&rt.streamDestroy = (void*)acuStreamDestroy;
      *(void**)&rt.eventQuery = (void*)acuEventQuery;
      rt.hostAllocMapped = acuHostAllocMapped;
      rt.freeHost = acuFreeHost;
      rt.hostRegister = acuHostRegister;
      rt.hostUnregister = acuHostUnregister;
    }
    anycclRt = rt;
    return;
  } else if (lookup("cudaLaunchHostFunc") != NULL) {
    WARN("A CUDA runtime is in this process but %s: link the program with anyccl-cpu to run on the CPU",
         acuDeviceCount == NULL ? "this libnccl was built without the cuda backend (no nvcc)"
                                : "no GPU or driver was found");
    rtResult = ncclSystemError;
    return;
  } else {
    WARN("No CUDA runtime found in this process: link the program with anyccl-cpu "
         "(pkg-config --libs anyccl-cpu) or with the CUDA runtime (-lcudart)");
    rtResult = ncclSystemError;
    return;
  }
#define RT_SYM(field, sym)                                               \
  do {                                                                   \
    *(void**)&rt.field = lookup(sym);                                    \
    if (rt.field == NULL) {                                              \
      WARN("CUDA runtime (%s) lacks %s", rt.name, sym);                  \
      rtResult = ncclSystemError;                                        \
      return;                                                            \
    }                                                                    \
  } while (0)
  RT_SYM(getDevice, "cudaGetDevice");
  RT_SYM(setDevice, "cudaSetDevice");
  RT_SYM(getDeviceCount, "cudaGetDeviceCount");
  RT_SYM(deviceGetPCIBusId, "cudaDeviceGetPCIBusId");
  RT_SYM(launchHostFunc, "cudaLaunchHostFunc");
  RT_SYM(malloc, "cudaMalloc");
  RT_SYM(free, "cudaFree");
  RT_SYM(streamSynchronize, "cudaStreamSynchronize");
  RT_SYM(getErrorString, "cudaGetErrorString");
  RT_SYM(eventCreateWithFlags, "cudaEventCreateWithFlags");
  RT_SYM(eventRecord, "cudaEventRecord");
  RT_SYM(streamWaitEvent, "cudaStreamWaitEvent");
  RT_SYM(eventDestroy, "cudaEventDestroy");
  *(void**)&rt.streamGetDevice = lookup("cudaStreamGetDevice");
  *(void**)&rt.ipcGetMemHandle = lookup("cudaIpcGetMemHandle");
  *(void**)&rt.ipcOpenMemHandle = lookup("cudaIpcOpenMemHandle");
  *(void**)&rt.ipcCloseMemHandle = lookup("cudaIpcCloseMemHandle");
  *(void**)&rt.memGetAddressRange = lookup("anycclCpuMemGetAddressRange");
#undef RT_SYM
  anycclRt = rt;
}

ncclResult_t anycclRtInit(void) {
  pthread_once(&rtOnce, rtLoad);
  return rtResult;
}
