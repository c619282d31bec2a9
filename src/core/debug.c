/* NCCL-style logging. Lines look like NCCL's:
 *   host:pid:tid [dev] NCCL INFO message
 * WARN lines also become this thread's "last error" (ncclGetLastError). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>
#include "debug.h"
#include "param.h"

static int debugLevel = -1;
static unsigned long debugMask = NCCL_INIT | NCCL_BOOTSTRAP | NCCL_ENV;
static FILE* debugFile;
static char hostName[64];
static pthread_mutex_t debugLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t debugOnce = PTHREAD_ONCE_INIT;
static __thread char lastError[1024];
/* The last error seen by any thread, for ncclGetLastError(NULL). */
static char globalLastError[1024];

static const struct { const char* name; unsigned long bit; } subsysNames[] = {
    {"INIT", NCCL_INIT}, {"COLL", NCCL_COLL}, {"P2P", NCCL_P2P}, {"SHM", NCCL_SHM},
    {"NET", NCCL_NET}, {"GRAPH", NCCL_GRAPH}, {"TUNING", NCCL_TUNING}, {"ENV", NCCL_ENV},
    {"ALLOC", NCCL_ALLOC}, {"CALL", NCCL_CALL}, {"PROXY", NCCL_PROXY}, {"NVLS", NCCL_NVLS},
    {"BOOTSTRAP", NCCL_BOOTSTRAP}, {"REG", NCCL_REG}, {"PROFILE", NCCL_PROFILE}, {"RAS", NCCL_RAS},
    {"ALL", NCCL_ALL}};

unsigned long anycclDebugParseSubsys(const char* s) {
  int invert = (s[0] == '^');
  if (invert) s++;
  unsigned long mask = 0;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", s);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    for (size_t i = 0; i < sizeof(subsysNames) / sizeof(subsysNames[0]); i++)
      if (strcasecmp(tok, subsysNames[i].name) == 0) mask |= subsysNames[i].bit;
  }
  return invert ? ~mask : mask;
}

void anycclDebugExpandPath(const char* pattern, const char* host, int pid, char* path, size_t len) {
  int j = 0;
  for (int i = 0; pattern[i] && j < (int)len - 32; i++) {
    if (pattern[i] == '%' && pattern[i + 1] == 'h') {
      j += snprintf(path + j, len - j, "%s", host);
      i++;
    } else if (pattern[i] == '%' && pattern[i + 1] == 'p') {
      j += snprintf(path + j, len - j, "%d", pid);
      i++;
    } else {
      path[j++] = pattern[i];
    }
    /* snprintf returns what it would have written: a host name longer than
     * the room left must not move j past the end (fuzz/corpus/params/
     * crash-debugfile-overflow) */
    if (j > (int)len - 1) j = (int)len - 1;
  }
  path[j] = '\0';
}

static FILE* openDebugFile(const char* pattern) {
  char path[4096];
  anycclDebugExpandPath(pattern, hostName, (int)getpid(), path, sizeof(path));
  FILE* f = fopen(path, "w");
  if (f == NULL) fprintf(stderr, "anyccl WARN cannot open NCCL_DEBUG_FILE %s; logging to stdout\n", path);
  return f;
}

static void debugInit(void) {
  gethostname(hostName, sizeof(hostName) - 1);
  char* dot = strchr(hostName, '.');
  if (dot) *dot = '\0';
  const char* lvl = anycclParamStr(PARAM_DEBUG);
  int level = NCCL_LOG_WARN;
  if (lvl) {
    if (strcasecmp(lvl, "VERSION") == 0) level = NCCL_LOG_VERSION;
    else if (strcasecmp(lvl, "WARN") == 0) level = NCCL_LOG_WARN;
    else if (strcasecmp(lvl, "INFO") == 0) level = NCCL_LOG_INFO;
    else if (strcasecmp(lvl, "ABORT") == 0) level = NCCL_LOG_ABORT;
    else if (strcasecmp(lvl, "TRACE") == 0) level = NCCL_LOG_TRACE;
    else if (strcasecmp(lvl, "NONE") == 0) level = NCCL_LOG_NONE;
  }
  const char* sub = anycclParamStr(PARAM_DEBUG_SUBSYS);
  if (sub) debugMask = anycclDebugParseSubsys(sub);
  const char* file = anycclParamStr(PARAM_DEBUG_FILE);
  debugFile = stdout;
  if (file && level > NCCL_LOG_NONE) {
    FILE* f = openDebugFile(file);
    if (f) debugFile = f;
  }
  __atomic_store_n(&debugLevel, level, __ATOMIC_RELEASE);
}

int ncclDebugLevel(void) {
  int l = __atomic_load_n(&debugLevel, __ATOMIC_ACQUIRE);
  if (l >= 0) return l;
  pthread_once(&debugOnce, debugInit);
  return debugLevel;
}

void anycclSetLastError(const char* msg) {
  snprintf(lastError, sizeof(lastError), "%s", msg);
  pthread_mutex_lock(&debugLock);
  snprintf(globalLastError, sizeof(globalLastError), "%s", msg);
  pthread_mutex_unlock(&debugLock);
}

const char* anycclLastError(void) {
  if (lastError[0]) return lastError;
  return globalLastError;
}

void ncclDebugLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt,
                  ...) {
  int cur = ncclDebugLevel();
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == NCCL_LOG_WARN) anycclSetLastError(msg);
  if (cur < (int)level) return;
  if (level != NCCL_LOG_WARN && !(flags & debugMask)) return;
  struct timeval tv;
  gettimeofday(&tv, NULL);
  long tid = syscall(SYS_gettid);
  pthread_mutex_lock(&debugLock);
  if (level == NCCL_LOG_WARN) {
    fprintf(debugFile, "%s:%d:%ld [%s:%d] NCCL WARN %s\n", hostName, (int)getpid(), tid, file, line, msg);
  } else if (level == NCCL_LOG_TRACE) {
    fprintf(debugFile, "%s:%d:%ld %ld.%06ld %s:%d NCCL TRACE %s\n", hostName, (int)getpid(), tid,
            (long)tv.tv_sec, (long)tv.tv_usec, file, line, msg);
  } else {
    fprintf(debugFile, "%s:%d:%ld NCCL INFO %s\n", hostName, (int)getpid(), tid, msg);
  }
  fflush(debugFile);
  pthread_mutex_unlock(&debugLock);
}
