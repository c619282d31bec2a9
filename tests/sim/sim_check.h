/* The sim tests' check: count a failure, say where and why, go on. */
#ifndef ANYCCL_TESTS_SIM_CHECK_H
#define ANYCCL_TESTS_SIM_CHECK_H
#include <stdio.h>

static int failures;
#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      failures++;                                          \
    }                                                      \
  } while (0)
#endif
