/* The sim backend's text files (src/sim/fabric.c), read from memory. First
 * byte: bit 0 set, a calibration file (simCalibRead); else a fabric file
 * (simFabricRead, without opening the files it names) for a communicator of
 * 1 + (next two bytes) ranks. An error names the file, the line and the
 * field ("fuzz.fabric:3: hosts: ..."); a fabric that loads has a route
 * between any two ranks over links that exist, with positive capacities. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include "fuzz.h"
#include "sim.h"

#define FUZZ_NAME "/nonexistent/fuzz.fabric"

/* "NAME:LINE: field: what", or (no line: hosts computed from the ranks) "NAME: hosts: what" */
static void checkError(const char* err) {
  size_t n = strlen(FUZZ_NAME);
  FUZZ_CHECK(strncmp(err, FUZZ_NAME ":", n + 1) == 0);
  const char* p = err + n + 1;
  if (strncmp(p, " hosts: ", 8) == 0) return;
  int line = 0, at = 0;
  FUZZ_CHECK(sscanf(p, "%d: %n", &line, &at) == 1 && at > 0 && line >= 1);
  const char* field = p + at; /* the key as the file wrote it, then ": what" */
  const char* colon = strstr(field, ": ");
  FUZZ_CHECK(colon != NULL && colon > field);
}

static void calib(const uint8_t* text, size_t len) {
  FILE* in = fmemopen((void*)text, len, "r");
  if (in == NULL) return; /* no bytes */
  struct simCalib c;
  simCalibDefaults(&c);
  char err[1024] = "";
  ncclResult_t r = simCalibRead(FUZZ_NAME, in, &c, err, sizeof(err));
  fclose(in);
  if (r != ncclSuccess) {
    FUZZ_CHECK(r == ncclInvalidUsage);
    checkError(err);
    return;
  }
  FUZZ_CHECK(c.blockGBps > 0 && c.nvlinkGBps > 0 && c.pcieGBps > 0 && c.copyGBps > 0 && c.launchUs >= 0);
  FUZZ_CHECK(c.llEfficiency > 0 && c.llEfficiency <= 1 && isfinite(c.simpleStepUs));
}

static void fabric(int nranks, const uint8_t* text, size_t len) {
  FILE* in = fmemopen((void*)text, len, "r");
  if (in == NULL) return;
  struct simFabric f;
  char err[1024] = "";
  ncclResult_t r = simFabricRead(FUZZ_NAME, in, 0, nranks, &f, err, sizeof(err));
  fclose(in);
  if (r != ncclSuccess) {
    FUZZ_CHECK(r == ncclInvalidUsage);
    checkError(err);
    return;
  }
  FUZZ_CHECK(f.nGpus >= nranks && f.nLinks > 0);
  for (int l = 0; l < f.nLinks; l++) FUZZ_CHECK(f.linkBps[l] > 0 && isfinite(f.linkBps[l]) && f.linkLat[l] >= 0);
  for (int i = 0; i < 64; i++) { /* a few routes, spread over the ranks */
    int src = (int)((uint64_t)i * 7919 % (uint64_t)nranks), dst = (int)((uint64_t)i * 104729 % (uint64_t)nranks);
    int links[8];
    double lat = -1;
    int n = simRoute(&f, src, dst, links, &lat);
    FUZZ_CHECK(n >= 0 && n <= 8 && lat >= 0);
    for (int k = 0; k < n; k++) FUZZ_CHECK(links[k] >= 0 && links[k] < f.nLinks);
    char name[128];
    if (n > 0) simLinkName(&f, links[n - 1], name, sizeof(name));
  }
  simFabricFree(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {data, size};
  unsigned mode = fuzzByte(&in);
  if (mode & 1) {
    calib(in.p, in.n);
  } else {
    int nranks = 1 + (int)fuzzByte(&in);
    nranks += (int)fuzzByte(&in) * 256;
    fabric(nranks, in.p, in.n);
  }
  return 0;
}
