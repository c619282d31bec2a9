/* Numbers and lists from the environment. First byte mod 4:
 *   0  an integer parameter's text (anycclParamParseInt: ANYCCL_*, NCCL_*)
 *   1  NCCL_SOCKET_IFNAME: an interface name, a NUL, then the spec
 *   2  NCCL_DEBUG_SUBSYS
 *   3  NCCL_DEBUG_FILE: a host name, a NUL, then the pattern (%h, %p)
 *   4  ANYCCL_NSLOTS, a NUL, NCCL_BUFFSIZE: the FIFO shape init makes of them */
#include <errno.h>
#include "debug.h"
#include "fuzz.h"
#include "param.h"
#include "socket.h"
#include "transport.h"
#include "wire.h"

static void integer(struct fuzzIn* in) {
  char text[256];
  fuzzString(in, text, sizeof(text));
  int64_t v = 12345;
  if (anycclParamParseInt(text, &v) != 0) {
    FUZZ_CHECK(v == 12345); /* untouched: the default stays */
    return;
  }
  char* end;
  errno = 0;
  long long ref = strtoll(text, &end, 0);
  FUZZ_CHECK(errno == 0 && ref == v);
}

static void ifName(struct fuzzIn* in) {
  char name[NCCL_SOCKET_IFNAME_MAXLEN], spec[512];
  fuzzString(in, name, sizeof(name));
  fuzzString(in, spec, sizeof(spec));
  int m = ncclSocketIfMatches(name, spec);
  FUZZ_CHECK(m == 0 || m == 1);
  /* "^spec" selects exactly what spec does not (when spec has no ^ of its own) */
  if (spec[0] != '^' && strlen(spec) + 2 < sizeof(spec)) {
    char inv[sizeof(spec) + 1];
    snprintf(inv, sizeof(inv), "^%s", spec);
    if (spec[0] != '\0') FUZZ_CHECK(ncclSocketIfMatches(name, inv) == !m);
  }
}

static void subsys(struct fuzzIn* in) {
  char text[512];
  fuzzString(in, text, sizeof(text));
  unsigned long mask = anycclDebugParseSubsys(text);
  if (text[0] != '^') {
    char inv[sizeof(text) + 1];
    snprintf(inv, sizeof(inv), "^%s", text);
    FUZZ_CHECK(anycclDebugParseSubsys(inv) == ~mask);
  }
}

static void debugFile(struct fuzzIn* in) {
  char host[64], pattern[8192];
  fuzzString(in, host, sizeof(host)); /* gethostname: at most 63 characters here */
  fuzzString(in, pattern, sizeof(pattern));
  /* 4096 bytes for the path and a guard after them: a write past the end
   * shows without ASan too (the replay ctest in the gcc build) */
  char* path = malloc(4096 + 128);
  FUZZ_CHECK(path != NULL);
  memset(path + 4096, 0x5a, 128);
  anycclDebugExpandPath(pattern, host, 4194304, path, 4096);
  FUZZ_CHECK(strlen(path) < 4096);
  for (int i = 4096; i < 4096 + 128; i++) FUZZ_CHECK(path[i] == 0x5a);
  free(path);
}

static void fifo(struct fuzzIn* in) {
  char a[64], b[64];
  fuzzString(in, a, sizeof(a));
  fuzzString(in, b, sizeof(b));
  int64_t nslots = 8, buff = 1048576; /* the defaults */
  anycclParamParseInt(a, &nslots);
  anycclParamParseInt(b, &buff);
  int k;
  size_t slotBytes;
  wireFifoGeometry((int)nslots, (size_t)buff, &k, &slotBytes); /* as init.c converts them */
  FUZZ_CHECK(k >= 2 && k <= ANYCCL_MAX_SLOTS && slotBytes >= 4096 && slotBytes % 64 == 0);
  FUZZ_CHECK((size_t)k * slotBytes <= ANYCCL_MAX_BUFFSIZE);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {data, size};
  switch (fuzzByte(&in) % 5) {
  case 0: integer(&in); break;
  case 1: ifName(&in); break;
  case 2: subsys(&in); break;
  case 3: debugFile(&in); break;
  default: fifo(&in); break;
  }
  return 0;
}
