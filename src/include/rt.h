/* The CUDA runtime as libnccl sees it: a table of the few runtime calls the
 * core needs, resolved at run time (dlsym), so that libnccl links against no
 * runtime and works with whichever one the process brings: anyccl-cpu now,
 * the real CUDA runtime for the cuda backend. */
#ifndef ANYCCL_RT_H
#define ANYCCL_RT_H

#include "nccl.h"

typedef void (*anycclHostFn)(void* arg);

typedef enum { ANYCCL_BACKEND_NONE = 0, ANYCCL_BACKEND_CPU, ANYCCL_BACKEND_CUDA, ANYCCL_BACKEND_SIM } anycclBackendKind;

struct anycclRt {
  anycclBackendKind kind;
  const char* name; /* "cpu", "cuda" or "sim" */
  int (*getDevice)(int* dev);
  int (*setDevice)(int dev);
  int (*getDeviceCount)(int* n);
  int (*deviceGetPCIBusId)(char* busId, int len, int dev);
  int (*launchHostFunc)(cudaStream_t stream, anycclHostFn fn, void* arg);
  int (*malloc)(void** ptr, size_t size);
  int (*free)(void* ptr);
  int (*streamSynchronize)(cudaStream_t stream);
  const char* (*getErrorString)(int err);
  int (*eventCreateWithFlags)(cudaEvent_t* ev, unsigned flags);
  int (*eventRecord)(cudaEvent_t ev, cudaStream_t stream);
  int (*streamWaitEvent)(cudaStream_t stream, cudaEvent_t ev, unsigned flags);
  int (*eventDestroy)(cudaEvent_t ev);
  int (*streamGetDevice)(cudaStream_t stream, int* dev); /* optional (NULL) */
  int (*streamIsCapturing)(cudaStream_t stream);         /* optional (NULL): 1 while captured */
  /* IPC for single-copy between processes (optional: NULL disables it) */
  int (*ipcGetMemHandle)(cudaIpcMemHandle_t* h, void* p);
  int (*ipcOpenMemHandle)(void** p, cudaIpcMemHandle_t h, unsigned flags);
  int (*ipcCloseMemHandle)(void* p);
  int (*memGetAddressRange)(const void* p, void** base, size_t* size);
  /* the one-sided layer on GPUs (src/onesided; optional: NULL where the
   * runtime has none, as on the cpu backend, which copies with memcpy) */
  int (*memcpy)(void* dst, const void* src, size_t n); /* synchronous, cudaMemcpyDefault */
  int (*memcpyAsync)(void* dst, const void* src, size_t n, cudaStream_t stream);
  int (*streamCreateNonBlocking)(cudaStream_t* stream);
  int (*streamDestroy)(cudaStream_t stream);
  int (*eventQuery)(cudaEvent_t ev); /* 0: complete */
  int (*hostAllocMapped)(void** host, void** dev, size_t n);
  int (*freeHost)(void* p);
  int (*hostRegister)(void* p, size_t n, void** dev); /* pin and map host memory (optional: NULL) */
  int (*hostUnregister)(void* p);
  /* sim backend (anyccl-cpu in sim mode): the virtual clock of the stream
   * op that runs the caller (a host function), in seconds */
  double (*simOpStart)(void);
  void (*simOpSetEnd)(double end);
  void* (*simOpDefer)(void);                                   /* the op's end comes later ... */
  void (*simResolve)(void* const* handles, int n, const double* ends); /* ... here */
  void (*simSetNeed)(void (*need)(int, void*)); /* optional (NULL): a stream about to wait for an unresolved end calls need */
  unsigned (*simOpIdle)(void); /* the op found its stream idle: its queuing thread's id (from 1), else 0; optional */
};

extern struct anycclRt anycclRt;

/* Staging copies between host and device (the P2P engine's bounce buffers,
 * src/p2p/p2p_bounce.c), on both backends: the cuda backend's runtime, or
 * anyccl-cpu's (its streams run copies and host functions on worker
 * threads, so they are as asynchronous as a GPU's). */
struct anycclRtCopy {
  int (*memcpyAsync)(void* dst, const void* src, size_t n, cudaStream_t s); /* cudaMemcpyDefault */
  int (*streamCreate)(cudaStream_t* s);                                     /* non-blocking */
  int (*streamDestroy)(cudaStream_t s);
  int (*streamSynchronize)(cudaStream_t s);
  int (*eventCreate)(cudaEvent_t* ev); /* timing disabled */
  int (*eventRecord)(cudaEvent_t ev, cudaStream_t s);
  int (*eventQuery)(cudaEvent_t ev); /* 0: complete */
  int (*eventDestroy)(cudaEvent_t ev);
  int (*hostAlloc)(void** p, size_t n); /* pinned */
  int (*freeHost)(void* p);
  int (*isDevice)(const void* p); /* 1: device or managed memory */
  int (*launchHostFunc)(cudaStream_t s, anycclHostFn fn, void* arg);
  int (*getDevice)(int* dev);
  int (*setDevice)(int dev);
  const char* (*errorString)(int err);
};
/* 1 when the process runs the cuda backend (initialises the runtime table,
 * quietly: 0 without a runtime or with anyccl-cpu). */
int anycclRtCudaBackend(void);
/* The table, or ncclSystemError (one WARN) when the runtime lacks a call. */
ncclResult_t anycclRtCopyOps(const struct anycclRtCopy** ops);

/* Resolve the runtime once; WARN and fail if the process has none. */
ncclResult_t anycclRtInit(void);
int anycclRtSimRequested(void); /* ANYCCL_BACKEND=sim with anyccl-cpu (loads nothing, initialises no CUDA) */

/* Call a runtime function; on error WARN with the call text and return
 * ncclUnhandledCudaError. */
#define CUDACHECK(call)                                                                          \
  do {                                                                                           \
    int e_ = (call);                                                                             \
    if (e_ != 0) {                                                                               \
      WARN("CUDA runtime call %s failed: %s (%d)", #call, anycclRt.getErrorString(e_), e_);      \
      return ncclUnhandledCudaError;                                                             \
    }                                                                                            \
  } while (0)

#endif
