/* What the P2P engine's tests share: the result and expectation checks, a
 * clock, a fill pattern, and a connected pair of endpoints over loopback
 * (a listens, b connects). */
#ifndef ANYCCL_P2P_TEST_H
#define ANYCCL_P2P_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "anyccl_p2p.h"

#define CK(x)                                                                                    \
  do {                                                                                           \
    ncclResult_t r_ = (x);                                                                       \
    if (r_ != ncclSuccess) {                                                                     \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      exit(2);                                                                                   \
    }                                                                                            \
  } while (0)
#define EXPECT(c)                                                      \
  do {                                                                 \
    if (!(c)) {                                                        \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #c); \
      exit(3);                                                         \
    }                                                                  \
  } while (0)

static inline double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline void fill(char* b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) b[i] = (char)((i * 2654435761u + seed) >> 7);
}

struct pair {
  anycclP2pEndpoint_t a, b; /* a listens, b connects */
  anycclP2pConn_t ca, cb;
  anycclP2pHandle_t h;
};

/* dev: the endpoints' device (-1: none) */
static inline void pairOpen(struct pair* p, int dev, int channels, size_t chunk, int window, int timeoutSec) {
  anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
  cfg.channels = channels;
  cfg.chunkBytes = chunk;
  cfg.window = window;
  cfg.ifname = "lo";
  cfg.timeoutSec = timeoutSec;
  CK(anycclP2pEndpointCreate(dev, &cfg, &p->a));
  CK(anycclP2pEndpointCreate(dev, &cfg, &p->b));
  CK(anycclP2pListen(p->a, &p->h));
  CK(anycclP2pConnect(p->b, &p->h, &p->cb));
  CK(anycclP2pAccept(p->a, &p->ca));
}

static inline void pairClose(struct pair* p) {
  CK(anycclP2pClose(p->cb));
  CK(anycclP2pClose(p->ca));
  CK(anycclP2pEndpointDestroy(p->a));
  CK(anycclP2pEndpointDestroy(p->b));
}
#endif
