/* Error propagation: one line per failing frame at INFO, cleanup by goto. */
#ifndef ANYCCL_CHECKS_H
#define ANYCCL_CHECKS_H

#include <errno.h>
#include <string.h>
#include "nccl.h"
#include "debug.h"

#define NCCLCHECK(call)                                                             \
  do {                                                                              \
    ncclResult_t res_ = (call);                                                     \
    if (res_ != ncclSuccess && res_ != ncclInProgress) {                            \
      INFO(NCCL_ALL, "%s:%d -> %d", __FILE__, __LINE__, res_);                      \
      return res_;                                                                  \
    }                                                                               \
  } while (0)

#define NCCLCHECKGOTO(call, res, label)                                             \
  do {                                                                              \
    (res) = (call);                                                                 \
    if ((res) != ncclSuccess && (res) != ncclInProgress) {                          \
      INFO(NCCL_ALL, "%s:%d -> %d", __FILE__, __LINE__, (res));                     \
      goto label;                                                                   \
    }                                                                               \
  } while (0)

/* System call returning -1 on error. */
#define SYSCHECK(call, name)                                                        \
  do {                                                                              \
    int ret_;                                                                       \
    do { ret_ = (call); } while (ret_ == -1 && errno == EINTR);                     \
    if (ret_ == -1) {                                                               \
      WARN("Call to " name " failed: %s", strerror(errno));                         \
      return ncclSystemError;                                                       \
    }                                                                               \
  } while (0)

#define ANYCCL_CALLOC(ptr, n)                                                       \
  do {                                                                              \
    (ptr) = calloc((n), sizeof(*(ptr)));                                            \
    if ((ptr) == NULL) {                                                            \
      WARN("Failed to allocate %zu bytes", (size_t)(n) * sizeof(*(ptr)));           \
      return ncclSystemError;                                                       \
    }                                                                               \
  } while (0)

#endif
