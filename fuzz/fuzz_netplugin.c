/* What an external net plugin answers (src/transport/net_plugin_check.c),
 * as the loader checks it before use. Input: the answers of devices(),
 * getProperties() (names as NUL-terminated strings, or NULL; the numbers as
 * raw bits, so NaN and infinite latencies come too) and a series of test()
 * results. Accepted properties are in range and their names terminated. */
#include <math.h>
#include "fuzz.h"
#include "net_plugin_check.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {data, size};
  char why[160];
  int n;
  fuzzTake(&in, &n, sizeof(n));
  why[0] = '\0';
  if (anycclPluginCheckDevices(n, why, sizeof(why)) == ncclSuccess) FUZZ_CHECK(n >= 0 && n <= ANYCCL_PLUGIN_MAX_DEVICES);
  else FUZZ_CHECK(why[0] != '\0');

  unsigned flags = fuzzByte(&in);
  char name[300], pci[300];
  fuzzString(&in, name, sizeof(name));
  fuzzString(&in, pci, sizeof(pci));
  anycclPluginProps_v8 v;
  memset(&v, 0, sizeof(v));
  v.name = flags & 1 ? NULL : name;
  v.pciPath = flags & 2 ? NULL : pci;
  fuzzTake(&in, &v.guid, sizeof(v.guid));
  fuzzTake(&in, &v.speed, sizeof(v.speed));
  fuzzTake(&in, &v.port, sizeof(v.port));
  fuzzTake(&in, &v.latency, sizeof(v.latency));
  fuzzTake(&in, &v.maxComms, sizeof(v.maxComms));
  anycclNetProperties p;
  why[0] = '\0';
  if (anycclPluginCheckProps(&v, &p, why, sizeof(why)) == ncclSuccess) {
    FUZZ_CHECK(memchr(p.name, 0, sizeof(p.name)) != NULL && memchr(p.pciPath, 0, sizeof(p.pciPath)) != NULL);
    FUZZ_CHECK(p.speed >= 0 && p.port >= 0 && p.maxComms >= 1 && p.latency >= 0 && p.guid == v.guid);
    FUZZ_CHECK(strncmp(p.name, v.name ? v.name : "?", sizeof(p.name) - 1) == 0);
  } else {
    FUZZ_CHECK(why[0] != '\0');
  }

  while (in.n >= 2 * sizeof(int)) {
    int done, bytes, d = -1;
    fuzzTake(&in, &done, sizeof(done));
    fuzzTake(&in, &bytes, sizeof(bytes));
    size_t got = 1;
    why[0] = '\0';
    if (anycclPluginCheckTest(done, bytes, &d, (flags & 4) ? NULL : &got, why, sizeof(why)) != ncclSuccess) {
      FUZZ_CHECK(why[0] != '\0' && done != 0 && bytes < 0);
      continue;
    }
    FUZZ_CHECK(d == (done != 0));
    if (!(flags & 4)) FUZZ_CHECK(got == (d ? (size_t)bytes : 0) && got <= INT32_MAX);
  }
  return 0;
}
