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
    *(void**)&rt.simSetNeed = lookup("anycclCpuSimSetNeed");
    *(void**)&rt.simOpIdle = lookup("anycclCpuSimOpIdle"); /* optional */
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

/* ---- staging copies (rt.h, struct anycclRtCopy) ---- */
static struct anycclRtCopy copyOps;
static ncclResult_t copyResult = ncclSuccess;
static pthread_once_t copyOnce = PTHREAD_ONCE_INIT;

/* the cuda backend: our static runtime (src/cuda/rt.cu) */
static int cuStreamCreate(cudaStream_t* s) { return acuStreamCreateNonBlocking((void**)s); }
static int cuStreamDestroy(cudaStream_t s) { return acuStreamDestroy(s); }
static int cuStreamSync(cudaStream_t s) { return acuStreamSynchronize(s); }
static int cuEventCreate(cudaEvent_t* ev) { return acuEventCreateWithFlags((void**)ev, 2 /* DisableTiming */); }
static int cuEventRecord(cudaEvent_t ev, cudaStream_t s) { return acuEventRecord(ev, s); }
static int cuEventQuery(cudaEvent_t ev) { return acuEventQuery(ev); }
static int cuEventDestroy(cudaEvent_t ev) { return acuEventDestroy(ev); }
static int cuMemcpyAsync(void* d, const void* s, size_t n, cudaStream_t st) { return acuMemcpyAsync(d, s, n, st); }
static int cuHostAlloc(void** p, size_t n) {
  void* dev = NULL;
  return acuHostAllocMapped(p, &dev, n);
}
static int cuIsDevice(const void* p) { return acuPointerIsDevice(p, NULL); }
static int cuLaunchHostFunc(cudaStream_t s, anycclHostFn fn, void* arg) { return acuLaunchHostFunc(s, fn, arg); }

/* the cpu backend: anyccl-cpu's CUDA runtime API, found by name */
static int (*cpMemcpyAsyncFn)(void*, const void*, size_t, int, cudaStream_t);
static int (*cpStreamCreateFn)(cudaStream_t*, unsigned);
static int (*cpEventCreateFn)(cudaEvent_t*, unsigned);
static int (*cpHostAllocFn)(void**, size_t, unsigned);
static int (*cpPointerAttrFn)(void*, const void*);
static int (*cpGetLastErrorFn)(void);
static int cpMemcpyAsync(void* d, const void* s, size_t n, cudaStream_t st) { return cpMemcpyAsyncFn(d, s, n, 4, st); }
static int cpStreamCreate(cudaStream_t* s) { return cpStreamCreateFn(s, 1 /* NonBlocking */); }
static int cpEventCreate(cudaEvent_t* ev) { return cpEventCreateFn(ev, 2 /* DisableTiming */); }
static int cpHostAlloc(void** p, size_t n) { return cpHostAllocFn(p, n, 0); }
static int cpIsDevice(const void* p) {
  struct { /* cudaPointerAttributes, with room to spare */
    int type, device;
    void *devicePointer, *hostPointer;
    long reserved[16];
  } a;
  memset(&a, 0, sizeof(a));
  if (cpPointerAttrFn(&a, p) != 0) {
    if (cpGetLastErrorFn) cpGetLastErrorFn();
    return 0;
  }
  return a.type == 2 /* Device */ || a.type == 3 /* Managed */;
}

static void copyLoad(void) {
  struct anycclRtCopy o = {0};
  if ((copyResult = anycclRtInit()) != ncclSuccess) return;
  o.errorString = anycclRt.getErrorString;
  o.getDevice = anycclRt.getDevice;
  o.setDevice = anycclRt.setDevice;
  if (anycclRt.kind == ANYCCL_BACKEND_CUDA) {
    if (acuMemcpyAsync == NULL || acuPointerIsDevice == NULL) {
      WARN("P2P: this libnccl's CUDA runtime part lacks asynchronous copies (rebuild it)");
      copyResult = ncclSystemError;
      return;
    }
    o.memcpyAsync = cuMemcpyAsync, o.streamCreate = cuStreamCreate, o.streamDestroy = cuStreamDestroy;
    o.streamSynchronize = cuStreamSync, o.eventCreate = cuEventCreate, o.eventRecord = cuEventRecord;
    o.eventQuery = cuEventQuery, o.eventDestroy = cuEventDestroy, o.hostAlloc = cuHostAlloc;
    o.freeHost = acuFreeHost, o.isDevice = cuIsDevice, o.launchHostFunc = cuLaunchHostFunc;
    copyOps = o;
    return;
  }
  const char* missing = NULL;
#define COPY_SYM(var, sym)                      \
  do {                                          \
    *(void**)&(var) = lookup(sym);              \
    if ((var) == NULL && missing == NULL) missing = sym; \
  } while (0)
  COPY_SYM(cpMemcpyAsyncFn, "cudaMemcpyAsync");
  COPY_SYM(cpStreamCreateFn, "cudaStreamCreateWithFlags");
  COPY_SYM(cpEventCreateFn, "cudaEventCreateWithFlags");
  COPY_SYM(cpHostAllocFn, "cudaHostAlloc");
  COPY_SYM(cpPointerAttrFn, "cudaPointerGetAttributes");
  COPY_SYM(o.streamDestroy, "cudaStreamDestroy");
  COPY_SYM(o.streamSynchronize, "cudaStreamSynchronize");
  COPY_SYM(o.eventRecord, "cudaEventRecord");
  COPY_SYM(o.eventQuery, "cudaEventQuery");
  COPY_SYM(o.eventDestroy, "cudaEventDestroy");
  COPY_SYM(o.freeHost, "cudaFreeHost");
#undef COPY_SYM
  *(void**)&cpGetLastErrorFn = lookup("cudaGetLastError");
  o.launchHostFunc = anycclRt.launchHostFunc;
  if (missing || o.launchHostFunc == NULL || o.getDevice == NULL) {
    WARN("P2P: the CUDA runtime in this process (%s) lacks %s, which bounce buffers need", anycclRt.name,
         missing ? missing : "cudaLaunchHostFunc");
    copyResult = ncclSystemError;
    return;
  }
  o.memcpyAsync = cpMemcpyAsync, o.streamCreate = cpStreamCreate, o.eventCreate = cpEventCreate;
  o.hostAlloc = cpHostAlloc, o.isDevice = cpIsDevice;
  copyOps = o;
}

int anycclRtCudaBackend(void) {
  if (lookup("anycclCpuRuntimeVersion") != NULL || acuDeviceCount == NULL) return 0;
  return anycclRtInit() == ncclSuccess && anycclRt.kind == ANYCCL_BACKEND_CUDA;
}

ncclResult_t anycclRtCopyOps(const struct anycclRtCopy** ops) {
  pthread_once(&copyOnce, copyLoad);
  *ops = copyResult == ncclSuccess ? &copyOps : NULL;
  return copyResult;
}
