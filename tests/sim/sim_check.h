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

/* main's exit: 1 and the count when a check failed, else 0 and "PASS: case". */
static inline int simCheckDone(const char* name) {
  if (failures) {
    printf("%d checks failed\n", failures);
    return 1;
  }
  printf("PASS: %s\n", name);
  return 0;
}
#endif
