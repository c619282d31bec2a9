/* anyccl-cpu: error codes, the per-thread last error, warnings. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include "cpurt.h"

/* The thread's state lives in static TLS: no allocation, nothing to free,
 * and a new thread starts on device 0 with no error, as in CUDA. */
static __thread struct cpurtThread self;

struct cpurtThread *cpurtSelf(void) { return &self; }

cudaError_t cpurtRet(cudaError_t err) {
  if (err != cudaSuccess && err != cudaErrorNotReady) self.lastError = err;
  return err;
}

void cpurtWarn(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  /* Formatted first, so the line leaves in one piece even when threads of
   * several ranks warn at once. */
  fprintf(stderr, "anyccl-cpu: WARN %s\n", line);
}

int64_t cpurtNowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct cpurtErrorInfo {
  int code;
  const char *name;
  const char *text;
};

#define CPURT_ERROR_ENTRY(name, value, text) {value, #name, text},
static const struct cpurtErrorInfo errorTable[] = {ANYCCL_CPU_ERRORS(CPURT_ERROR_ENTRY)};
#undef CPURT_ERROR_ENTRY

static const struct cpurtErrorInfo *findError(cudaError_t err) {
  for (size_t i = 0; i < sizeof(errorTable) / sizeof(errorTable[0]); i++)
    if (errorTable[i].code == (int)err) return &errorTable[i];
  return NULL;
}

CPURT_API const char *cudaGetErrorName(cudaError_t error) {
  const struct cpurtErrorInfo *e = findError(error);
  return e ? e->name : "unrecognized error code";
}

CPURT_API const char *cudaGetErrorString(cudaError_t error) {
  const struct cpurtErrorInfo *e = findError(error);
  return e ? e->text : "unrecognized error code";
}

CPURT_API cudaError_t cudaGetLastError(void) {
  cudaError_t err = self.lastError;
  self.lastError = cudaSuccess;
  return err;
}

CPURT_API cudaError_t cudaPeekAtLastError(void) { return self.lastError; }

/* For anyccl-cpu's driver library: its calls into the runtime leave the
 * thread's last error as it was. */
CPURT_API void anycclCpuRestoreLastError(cudaError_t err) { self.lastError = err; }

CPURT_API int anycclCpuRuntimeVersion(void) { return 1; }
