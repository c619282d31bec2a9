/* Logging in NCCL's style: NCCL_DEBUG=WARN|INFO|TRACE, NCCL_DEBUG_SUBSYS,
 * NCCL_DEBUG_FILE. A WARN also becomes the text of ncclGetLastError(). */
#ifndef ANYCCL_DEBUG_H
#define ANYCCL_DEBUG_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

/* Subsystems, same bits as NCCL's. */
typedef enum {
  NCCL_INIT = 0x1,
  NCCL_COLL = 0x2,
  NCCL_P2P = 0x4,
  NCCL_SHM = 0x8,
  NCCL_NET = 0x10,
  NCCL_GRAPH = 0x20,
  NCCL_TUNING = 0x40,
  NCCL_ENV = 0x80,
  NCCL_ALLOC = 0x100,
  NCCL_CALL = 0x200,
  NCCL_PROXY = 0x400,
  NCCL_NVLS = 0x800,
  NCCL_BOOTSTRAP = 0x1000,
  NCCL_REG = 0x2000,
  NCCL_PROFILE = 0x4000,
  NCCL_RAS = 0x8000,
  NCCL_ALL = ~0
} ncclDebugLogSubSys;

void ncclDebugLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                  const char* fmt, ...) __attribute__((format(printf, 5, 6)));
/* Current level (reads the environment on first use). */
int ncclDebugLevel(void);
/* Remember a message as this thread's last error (used by WARN). */
void anycclSetLastError(const char* msg);
const char* anycclLastError(void);
/* NCCL_DEBUG_SUBSYS's text as a mask ("INIT,NET", "^COLL"). */
unsigned long anycclDebugParseSubsys(const char* s);
/* NCCL_DEBUG_FILE's pattern with %h -> host, %p -> pid, into path (len >= 64
 * bytes; a longer result is cut). */
void anycclDebugExpandPath(const char* pattern, const char* host, int pid, char* path, size_t len);

#define WARN(...) ncclDebugLog(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__, __VA_ARGS__)
#define INFO(FLAGS, ...) \
  do { if (ncclDebugLevel() >= NCCL_LOG_INFO) ncclDebugLog(NCCL_LOG_INFO, (FLAGS), __func__, __LINE__, __VA_ARGS__); } while (0)
#define TRACE(FLAGS, ...) \
  do { if (ncclDebugLevel() >= NCCL_LOG_TRACE) ncclDebugLog(NCCL_LOG_TRACE, (FLAGS), __func__, __LINE__, __VA_ARGS__); } while (0)

#endif
