/* Shared by the harnesses: reading the fuzzer's bytes, and checks that stop
 * the run (libFuzzer then saves the input as a crash). */
#ifndef ANYCCL_FUZZ_H
#define ANYCCL_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fuzzIn {
  const uint8_t* p;
  size_t n;
};

static inline unsigned fuzzByte(struct fuzzIn* in) {
  if (in->n == 0) return 0;
  in->n--;
  return *in->p++;
}

/* Up to len bytes into dst, the rest zero; returns how many came from the input. */
static inline size_t fuzzTake(struct fuzzIn* in, void* dst, size_t len) {
  size_t k = in->n < len ? in->n : len;
  memcpy(dst, in->p, k);
  memset((char*)dst + k, 0, len - k);
  in->p += k;
  in->n -= k;
  return k;
}

/* A NUL-terminated string: the bytes up to the next NUL (or the end, or
 * max - 1 bytes); the NUL is consumed. */
static inline void fuzzString(struct fuzzIn* in, char* dst, size_t max) {
  size_t k = 0;
  while (in->n > 0 && k + 1 < max) {
    uint8_t c = *in->p++;
    in->n--;
    if (c == 0) break;
    dst[k++] = (char)c;
  }
  dst[k] = '\0';
}

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond);       \
      abort();                                                                            \
    }                                                                                     \
  } while (0)

int LLVMFuzzerInitialize(int* argc, char*** argv);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

#ifndef FUZZ_REPLAY_MAIN
/* Every harness: no log lines from the library while fuzzing (a user's
 * NCCL_DEBUG wins). */
int LLVMFuzzerInitialize(int* argc, char*** argv) {
  setenv("NCCL_DEBUG", "NONE", 0);
  return 0;
}
#endif

#endif
