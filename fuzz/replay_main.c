/* Replay mode: a main() for a harness built without libFuzzer (the normal
 * gcc build). Every argument is a file or a directory of files (the corpus,
 * in name order); each file is fed to LLVMFuzzerTestOneInput once. A harness
 * check that fails aborts, so the ctest fails; so does an empty corpus. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define FUZZ_REPLAY_MAIN
#include "fuzz.h"

static int runFile(const char* path) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  size_t cap = 1 << 16, len = 0;
  uint8_t* buf = malloc(cap);
  for (;;) {
    if (buf == NULL) {
      fclose(f);
      return -1;
    }
    len += fread(buf + len, 1, cap - len, f);
    if (len < cap) break;
    cap *= 2;
    buf = realloc(buf, cap);
  }
  fclose(f);
  /* a copy of exactly len bytes: ASan sees a read past the input's end */
  uint8_t* exact = malloc(len ? len : 1);
  if (exact == NULL) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, len);
  free(buf);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  return 0;
}

static int byName(const struct dirent** a, const struct dirent** b) { return strcmp((*a)->d_name, (*b)->d_name); }

int main(int argc, char** argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  int files = 0, errors = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
      errors++;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      errors += runFile(argv[i]) != 0;
      files++;
      continue;
    }
    struct dirent** list;
    int n = scandir(argv[i], &list, NULL, byName);
    for (int k = 0; k < n; k++) {
      char path[4096];
      snprintf(path, sizeof(path), "%s/%s", argv[i], list[k]->d_name);
      if (list[k]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        errors += runFile(path) != 0;
        files++;
      }
      free(list[k]);
    }
    if (n >= 0) free(list);
  }
  printf("replay: %d input(s), %d error(s)\n", files, errors);
  return files == 0 || errors ? 1 : 0;
}
