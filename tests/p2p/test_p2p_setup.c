/* The engine's connection setup under the collectives' network table
 * (ANYCCL_NET_ENGINE=p2p, src/transport/net_p2p.c): bounded by
 * ANYCCL_BOOTSTRAP_TIMEOUT (not ANYCCL_OP_TIMEOUT), and ended by the
 * communicator's abort flag.
 *
 *   test_p2p_setup timeout   accept with no peer fails within ANYCCL_BOOTSTRAP_TIMEOUT (1 s; OP_TIMEOUT 600)
 *   test_p2p_setup abort     accept with no peer, and connect to a closed port, end once the flag is set
 *
 * Prints "PASS: <case>"; alarm(20) turns a hang into a failure. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "net.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define FAIL(...)                     \
  do {                                \
    fprintf(stderr, "FAIL: " __VA_ARGS__); \
    fprintf(stderr, "\n");            \
    exit(1);                          \
  } while (0)

static volatile uint32_t abortFlag;

static void* setAbort(void* arg) {
  (void)arg;
  usleep(300 * 1000);
  __atomic_store_n(&abortFlag, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* accept on a fresh listener that nobody connects to: result and seconds */
static ncclResult_t lonelyAccept(double* secs) {
  const anycclNet_t* net = &anycclNetP2p;
  char handle[ANYCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL, *rc = NULL;
  if (net->init() != ncclSuccess || net->listen(0, handle, &lc, &abortFlag) != ncclSuccess) FAIL("listen");
  double t0 = now();
  ncclResult_t res = net->accept(lc, &rc);
  *secs = now() - t0;
  net->closeListen(lc);
  if (res == ncclSuccess) FAIL("accept succeeded with no peer");
  return res;
}

int main(int argc, char** argv) {
  alarm(20);
  if (argc < 2) FAIL("usage: test_p2p_setup timeout|abort");
  double secs = 0;
  if (strcmp(argv[1], "timeout") == 0) {
    ncclResult_t res = lonelyAccept(&secs);
    if (res != ncclSystemError || secs < 0.9 || secs > 4) FAIL("accept: %d after %.2f s (want ncclSystemError after ~1 s)", res, secs);
    printf("PASS: timeout (accept failed after %.2f s)\n", secs);
    return 0;
  }
  if (strcmp(argv[1], "abort") == 0) {
    pthread_t t;
    pthread_create(&t, NULL, setAbort, NULL);
    ncclResult_t res = lonelyAccept(&secs);
    pthread_join(t, NULL);
    if (res != ncclInternalError || secs < 0.25 || secs > 2) FAIL("accept: %d after %.2f s (want ncclInternalError after ~0.3 s)", res, secs);
    /* connect to a port nobody listens on any more: retried until the abort */
    const anycclNet_t* net = &anycclNetP2p;
    char handle[ANYCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *sc = NULL;
    if (net->listen(0, handle, &lc, NULL) != ncclSuccess) FAIL("listen");
    net->closeListen(lc);
    abortFlag = 0;
    pthread_create(&t, NULL, setAbort, NULL);
    double t0 = now();
    res = net->connect(0, handle, &sc, &abortFlag);
    double csecs = now() - t0;
    pthread_join(t, NULL);
    if (res == ncclSuccess || csecs > 2) FAIL("connect: %d after %.2f s (want a failure soon after the abort)", res, csecs);
    printf("PASS: abort (accept ended after %.2f s, connect after %.2f s)\n", secs, csecs);
    return 0;
  }
  FAIL("unknown case %s", argv[1]);
}
