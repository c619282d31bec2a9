/* The P2P engine's choice of network (config.net, ANYCCL_P2P_NET,
 * NCCL_NET_PLUGIN): the cases that test_p2p does not cover when it runs
 * over a plugin. Prints "PASS: <case>"; ctest checks the WARN lines too.
 *
 *   mix       (NCCL_NET_PLUGIN loads) a plugin endpoint and a socket
 *             endpoint in one process refuse each other's handles, and a
 *             handle of another plugin; two plugin endpoints talk
 *   cookie    (NCCL_NET_PLUGIN loads) a handle with another cookie: no
 *             connection, both sides fail within their timeouts
 *   required  (NCCL_NET_PLUGIN does not load) config.net = "plugin" fails
 *             with ncclInvalidUsage
 *   fallback  (NCCL_NET_PLUGIN does not load) no config.net and no
 *             ANYCCL_P2P_NET: the endpoint runs on the built-in sockets */
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include "p2p_test.h"

static anycclP2pEndpoint_t make(const char* net) {
  anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
  cfg.ifname = "lo";
  cfg.timeoutSec = 5;
  cfg.channels = 2;
  cfg.net = net;
  anycclP2pEndpoint_t e;
  CK(anycclP2pEndpointCreate(-1, &cfg, &e));
  return e;
}

static void pingPong(anycclP2pEndpoint_t a, anycclP2pEndpoint_t b, const anycclP2pHandle_t* ha) {
  anycclP2pConn_t cb, ca;
  CK(anycclP2pConnect(b, ha, &cb));
  CK(anycclP2pAccept(a, &ca));
  char x[300000], y[300000];
  fill(x, sizeof(x), 7);
  anycclP2pRequest_t q;
  CK(anycclP2pIrecv(ca, y, sizeof(y), 3, &q));
  CK(anycclP2pSend(cb, x, sizeof(x), 3));
  size_t got = 0;
  CK(anycclP2pWait(q, &got));
  EXPECT(got == sizeof(x) && memcmp(x, y, sizeof(x)) == 0);
  CK(anycclP2pSend(ca, "back", 5, 0));
  CK(anycclP2pRecv(cb, y, 5, 0, NULL));
  EXPECT(strcmp(y, "back") == 0);
  CK(anycclP2pClose(cb));
  CK(anycclP2pClose(ca));
}

static void caseMix(void) {
  anycclP2pEndpoint_t pa = make("plugin"), pb = make("plugin"), sa = make("socket"), sb = make("socket");
  anycclP2pEndpointInfo_t ip, is;
  CK(anycclP2pEndpointGetInfo(pa, &ip));
  CK(anycclP2pEndpointGetInfo(sa, &is));
  EXPECT(strcmp(is.ifNames[0], "lo") == 0);
  anycclP2pHandle_t hp, hs;
  CK(anycclP2pListen(pa, &hp));
  CK(anycclP2pListen(sa, &hs));
  anycclP2pConn_t c;
  /* a plugin endpoint's handle at a socket endpoint, and the other way */
  EXPECT(anycclP2pConnect(sb, &hp, &c) == ncclInvalidArgument);
  EXPECT(anycclP2pConnect(pb, &hs, &c) == ncclInvalidArgument);
  /* another plugin's handle (the name after magic and cookie) */
  anycclP2pHandle_t other = hp;
  memcpy(other.bytes + 16, "OtherNet", 9);
  EXPECT(anycclP2pConnect(pb, &other, &c) == ncclInvalidArgument);
  /* junk at a plugin endpoint */
  memset(&other, 0x5a, sizeof(other));
  EXPECT(anycclP2pConnect(pb, &other, &c) == ncclInvalidArgument);
  /* a bad network name */
  anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
  cfg.net = "infiniband";
  anycclP2pEndpoint_t e;
  EXPECT(anycclP2pEndpointCreate(-1, &cfg, &e) == ncclInvalidArgument);
  /* each kind still talks to its own */
  pingPong(pa, pb, &hp);
  pingPong(sa, sb, &hs);
  fprintf(stderr, "plugin endpoint's NIC: %s; socket endpoint's: %s\n", ip.ifNames[0], is.ifNames[0]);
  CK(anycclP2pEndpointDestroy(pa));
  CK(anycclP2pEndpointDestroy(pb));
  CK(anycclP2pEndpointDestroy(sa));
  CK(anycclP2pEndpointDestroy(sb));
}

/* Over the plugin: a handle with another cookie gets no connection (the
 * accept fails after the 1 s timeout), and the connecting side, whose setup
 * never completes, fails its requests with ncclSystemError after its own
 * timeout and closes at once (nothing blocks in the plugin's accept). */
static void caseCookie(void) {
  anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
  cfg.net = "plugin";
  cfg.timeoutSec = 1;
  anycclP2pEndpoint_t a, b;
  CK(anycclP2pEndpointCreate(-1, &cfg, &a));
  CK(anycclP2pEndpointCreate(-1, &cfg, &b));
  anycclP2pHandle_t h;
  CK(anycclP2pListen(a, &h));
  h.bytes[8] ^= 0x10; /* the cookie, after the magic */
  anycclP2pConn_t cb, ca;
  CK(anycclP2pConnect(b, &h, &cb));
  double t0 = now();
  EXPECT(anycclP2pAccept(a, &ca) == ncclSystemError);
  double dt = now() - t0;
  fprintf(stderr, "accept with a wrong cookie: failed after %.2f s\n", dt);
  EXPECT(dt >= 0.9 && dt < 3);
  char y[8];
  anycclP2pRequest_t q;
  ncclResult_t res = anycclP2pIrecv(cb, y, sizeof(y), 0, &q);
  if (res == ncclSuccess) res = anycclP2pWait(q, NULL);
  fprintf(stderr, "receive on the connection that never came up: %s after %.2f s\n", ncclGetErrorString(res), now() - t0);
  EXPECT(res == ncclSystemError && now() - t0 < 4);
  t0 = now();
  CK(anycclP2pClose(cb));
  EXPECT(now() - t0 < 0.5);
  CK(anycclP2pEndpointDestroy(a));
  CK(anycclP2pEndpointDestroy(b));
}

static void caseRequired(void) {
  anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
  cfg.net = "plugin";
  anycclP2pEndpoint_t e = NULL;
  EXPECT(anycclP2pEndpointCreate(-1, &cfg, &e) == ncclInvalidUsage);
  EXPECT(e == NULL);
}

static void caseFallback(void) {
  anycclP2pEndpoint_t a = make(NULL), b = make(NULL);
  anycclP2pEndpointInfo_t info;
  CK(anycclP2pEndpointGetInfo(a, &info));
  EXPECT(strcmp(info.ifNames[0], "lo") == 0);
  anycclP2pHandle_t h;
  CK(anycclP2pListen(a, &h));
  pingPong(a, b, &h);
  CK(anycclP2pEndpointDestroy(a));
  CK(anycclP2pEndpointDestroy(b));
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_p2p_plug mix|cookie|required|fallback\n");
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  alarm(25);
  const char* c = argv[1];
  if (!strcmp(c, "mix")) caseMix();
  else if (!strcmp(c, "required")) caseRequired();
  else if (!strcmp(c, "cookie")) caseCookie();
  else if (!strcmp(c, "fallback")) caseFallback();
  else return 1;
  printf("PASS: %s\n", c);
  return 0;
}
