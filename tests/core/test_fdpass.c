/* src/core/fdpass.c: file descriptors between processes of one host, as the
 * cuda backend's windows exchange their peers' allocations.
 *
 *   test_fdpass swap [N]  N forked processes (default 4) each send a memfd
 *                         holding its index to all others; each checks it
 *                         got every peer's, by content, in its slot
 *   test_fdpass stray     a sender with the wrong token is ignored: the
 *                         swap times out with nothing taken, and a
 *                         right one after it is taken
 *   test_fdpass dead      a peer that never sends: bounded, reported
 *   test_fdpass abort     the abort flag ends the wait early
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "fdpass.h"

#define MAXN 16
#define CHECK(c)                                                        \
  do {                                                                  \
    if (!(c)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

struct shared {
  struct anycclFdAddr addr[MAXN];
  int opened;
};

static int memfdWith(int v) {
  int fd = memfd_create("fdpass", MFD_CLOEXEC);
  CHECK(fd >= 0);
  CHECK(write(fd, &v, sizeof(v)) == sizeof(v));
  return fd;
}

static int contentOf(int fd) {
  int v = -1;
  CHECK(pread(fd, &v, sizeof(v), 0) == sizeof(v));
  return v;
}

static long long nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int child(struct shared* sh, int me, int n) {
  struct anycclFdBox box;
  CHECK(anycclFdBoxOpen(&box) == ncclSuccess);
  sh->addr[me] = box.addr;
  __atomic_add_fetch(&sh->opened, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&sh->opened, __ATOMIC_SEQ_CST) < n) usleep(100); /* the address exchange */
  struct anycclFdAddr to[MAXN];
  int nTo = 0;
  for (int i = 0; i < n; i++)
    if (i != me) to[nTo++] = sh->addr[i];
  int mine = memfdWith(1000 + me), from[MAXN];
  CHECK(anycclFdBoxSwap(&box, mine, me, to, nTo, from, n, n - 1, 10000, NULL) == ncclSuccess);
  for (int i = 0; i < n; i++) {
    if (i == me) {
      CHECK(from[i] == -1);
      continue;
    }
    CHECK(from[i] >= 0);
    CHECK(contentOf(from[i]) == 1000 + i);
    close(from[i]);
  }
  close(mine);
  anycclFdBoxClose(&box);
  return 0;
}

static int swapCase(int n) {
  CHECK(n >= 2 && n <= MAXN);
  struct shared* sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(sh != MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  pid_t pids[MAXN];
  for (int i = 0; i < n; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0);
    if (pids[i] == 0) {
      alarm(30);
      _exit(child(sh, i, n));
    }
  }
  int bad = 0;
  for (int i = 0; i < n; i++) {
    int st = 0;
    CHECK(waitpid(pids[i], &st, 0) == pids[i]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
  }
  printf("swap: %d processes, %d failed\n", n, bad);
  return bad != 0;
}

/* A box that expects one descriptor; a sender that knows the address but
 * not the token is ignored. */
static int strayCase(void) {
  struct anycclFdBox rx, tx;
  CHECK(anycclFdBoxOpen(&rx) == ncclSuccess);
  CHECK(anycclFdBoxOpen(&tx) == ncclSuccess);
  struct anycclFdAddr wrong = rx.addr;
  wrong.token ^= 1;
  int fd = memfdWith(7), from[2], dummy[1];
  /* tx sends with the wrong token (it expects nothing itself) */
  CHECK(anycclFdBoxSwap(&tx, fd, 0, &wrong, 1, dummy, 1, 0, 1000, NULL) == ncclSuccess);
  long long t0 = nowMs();
  CHECK(anycclFdBoxSwap(&rx, -1, 0, NULL, 0, from, 2, 1, 300, NULL) == ncclSystemError);
  CHECK(nowMs() - t0 >= 250);
  CHECK(from[0] == -1 && from[1] == -1);
  /* an index out of range is dropped too, then a right one is taken */
  CHECK(anycclFdBoxSwap(&tx, fd, 5, &rx.addr, 1, dummy, 1, 0, 1000, NULL) == ncclSuccess);
  CHECK(anycclFdBoxSwap(&tx, fd, 1, &rx.addr, 1, dummy, 1, 0, 1000, NULL) == ncclSuccess);
  CHECK(anycclFdBoxSwap(&rx, -1, 0, NULL, 0, from, 2, 1, 2000, NULL) == ncclSuccess);
  CHECK(from[0] == -1 && from[1] >= 0 && contentOf(from[1]) == 7);
  close(from[1]);
  close(fd);
  anycclFdBoxClose(&rx);
  anycclFdBoxClose(&tx);
  printf("stray: wrong token and bad index ignored, the right one taken\n");
  return 0;
}

/* A peer that never sends (and one whose box is gone): the wait ends at its
 * bound with an error. */
static int deadCase(void) {
  struct anycclFdBox rx, gone;
  CHECK(anycclFdBoxOpen(&rx) == ncclSuccess);
  CHECK(anycclFdBoxOpen(&gone) == ncclSuccess);
  struct anycclFdAddr goneAddr = gone.addr;
  anycclFdBoxClose(&gone);
  int fd = memfdWith(1), from[2];
  long long t0 = nowMs();
  CHECK(anycclFdBoxSwap(&rx, fd, 0, &goneAddr, 1, from, 2, 1, 500, NULL) == ncclSystemError);
  long long dt = nowMs() - t0;
  CHECK(dt >= 450 && dt < 5000);
  CHECK(from[0] == -1 && from[1] == -1);
  close(fd);
  anycclFdBoxClose(&rx);
  printf("dead: failed after %lld ms\n", dt);
  return 0;
}

static volatile uint32_t abortWord;
static void onAlarm(int sig) {
  (void)sig;
  abortWord = 1;
}

static int abortCase(void) {
  struct anycclFdBox rx;
  CHECK(anycclFdBoxOpen(&rx) == ncclSuccess);
  signal(SIGALRM, onAlarm);
  alarm(1);
  int from[1];
  long long t0 = nowMs();
  CHECK(anycclFdBoxSwap(&rx, -1, 0, NULL, 0, from, 1, 1, 0 /* forever */, &abortWord) == ncclInternalError);
  long long dt = nowMs() - t0;
  CHECK(dt >= 500 && dt < 5000);
  anycclFdBoxClose(&rx);
  printf("abort: ended after %lld ms\n", dt);
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "swap";
  int rc;
  if (strcmp(mode, "swap") == 0)
    rc = swapCase(argc > 2 ? atoi(argv[2]) : 4);
  else if (strcmp(mode, "stray") == 0)
    rc = strayCase();
  else if (strcmp(mode, "dead") == 0)
    rc = deadCase();
  else if (strcmp(mode, "abort") == 0)
    rc = abortCase();
  else {
    fprintf(stderr, "usage: test_fdpass swap [N] | stray | dead | abort\n");
    return 2;
  }
  printf("%s\n", rc ? "FAIL" : "PASS");
  return rc;
}
