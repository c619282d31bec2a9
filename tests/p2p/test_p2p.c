/* Tests of the P2P engine (include/anyccl_p2p.h) over loopback: both ends
 * in one process (connect completes against the listener's backlog, then
 * accept), except the dead-peer case, which forks. Every case runs under
 * alarm() and prints "PASS: <case>". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "anyccl_p2p.h"

#include "p2p_test.h"

/* Every size from 0 to several chunks, channels 1..8, windows 1..16. */
static void caseSizes(void) {
  const size_t chunk = 4096;
  size_t sizes[] = {0, 1, 7, 4095, 4096, 4097, 8192, 3 * 4096 + 5, 9 * 4096, 17 * 4096 + 1};
  int chans[] = {1, 2, 3, 4, 8};
  int wins[] = {1, 2, 16};
  char* s = malloc(17 * 4096 + 1);
  char* r = malloc(17 * 4096 + 128);
  for (unsigned ci = 0; ci < 5; ci++)
    for (unsigned wi = 0; wi < 3; wi++) {
      struct pair p;
      pairOpen(&p, -1, chans[ci], chunk, wins[wi], 10);
      int nch = 0;
      CK(anycclP2pConnInfo(p.ca, &nch, NULL, NULL));
      EXPECT(nch == chans[ci]);
      for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        fill(s, n, k + 31 * ci);
        memset(r, 0x5a, n + 64);
        anycclP2pRequest_t rs, rr;
        CK(anycclP2pIrecv(p.ca, r, n + 8, 5, &rr));
        CK(anycclP2pIsend(p.cb, s, n, 5, &rs));
        size_t got = 12345;
        CK(anycclP2pWait(rr, &got));
        CK(anycclP2pWait(rs, NULL));
        EXPECT(got == n);
        EXPECT(memcmp(r, s, n) == 0);
        for (size_t i = n; i < n + 64; i++) EXPECT(r[i] == 0x5a); /* nothing past the message */
        /* the other direction on the same connection */
        CK(anycclP2pIsend(p.ca, s, n, 6, &rs));
        CK(anycclP2pRecv(p.cb, r, n, 6, &got));
        CK(anycclP2pWait(rs, NULL));
        EXPECT(got == n && memcmp(r, s, n) == 0);
      }
      pairClose(&p);
    }
  free(s);
  free(r);
}

/* Tags: receives of different tags complete in any order; one tag's
 * messages arrive in send order; messages before their receive wait. */
static void caseTags(void) {
  struct pair p;
  pairOpen(&p, -1, 4, 4096, 4, 10);
  enum { N = 6, SZ = 3 * 4096 + 100 };
  char s[N][SZ], r[N][SZ];
  anycclP2pRequest_t rr[N], rs[N];
  size_t got0;
  for (int i = 0; i < N; i++) fill(s[i], SZ, 100 + i);
  /* receives posted in reverse tag order; sends in tag order */
  for (int i = N - 1; i >= 0; i--) CK(anycclP2pIrecv(p.ca, r[i], SZ, 10 + i, &rr[i]));
  for (int i = 0; i < N; i++) CK(anycclP2pIsend(p.cb, s[i], SZ, 10 + i, &rs[i]));
  /* complete out of order: wait for the last tag first */
  for (int i = N - 1; i >= 0; i--) CK(anycclP2pWait(rr[i], NULL));
  for (int i = 0; i < N; i++) CK(anycclP2pWait(rs[i], NULL));
  for (int i = 0; i < N; i++) EXPECT(memcmp(r[i], s[i], SZ) == 0);
  /* same tag: in order; sent before the receives exist (unexpected, then stalled past the window) */
  memset(r, 0, sizeof(r));
  for (int i = 0; i < N; i++) CK(anycclP2pIsend(p.cb, s[i], SZ, 77, &rs[i]));
  usleep(100000);
  for (int i = 0; i < N; i++) CK(anycclP2pRecv(p.ca, r[i], SZ, 77, NULL));
  for (int i = 0; i < N; i++) CK(anycclP2pWait(rs[i], NULL));
  for (int i = 0; i < N; i++) EXPECT(memcmp(r[i], s[i], SZ) == 0);
  /* messages of one chunk go by the channel both ends compute from the tag
   * and its sequence, and a receive waited alone blocks on that channel:
   * other tags' messages wait on the others, a large message between two
   * small ones of a tag keeps its place */
  for (int i = 0; i < N; i++) CK(anycclP2pIsend(p.cb, s[i], 100 + i, 20 + i, &rs[i]));
  for (int i = N - 1; i >= 0; i--) {
    CK(anycclP2pRecv(p.ca, r[i], SZ, 20 + i, &got0));
    EXPECT(got0 == (size_t)(100 + i) && memcmp(r[i], s[i], got0) == 0);
  }
  for (int i = 0; i < N; i++) CK(anycclP2pWait(rs[i], NULL));
  for (int it = 0; it < 50; it++) {
    size_t n = it % 5 == 2 ? SZ : (size_t)(1 + it);
    CK(anycclP2pSend(p.cb, s[it % N], n, 5));
    CK(anycclP2pRecv(p.ca, r[0], SZ, 5, &got0));
    EXPECT(got0 == n && memcmp(r[0], s[it % N], n) == 0);
    CK(anycclP2pSend(p.ca, r[0], n, 6));
    CK(anycclP2pRecv(p.cb, r[1], SZ, 6, &got0));
    EXPECT(got0 == n && memcmp(r[1], s[it % N], n) == 0);
  }
  /* test() polls to completion */
  anycclP2pRequest_t q;
  CK(anycclP2pIrecv(p.ca, r[0], SZ, 3, &q));
  CK(anycclP2pSend(p.cb, s[1], SZ, 3));
  int done = 0;
  size_t got = 0;
  for (double t0 = now(); !done && now() - t0 < 5;) CK(anycclP2pTest(q, &done, &got));
  EXPECT(done && got == SZ && memcmp(r[0], s[1], SZ) == 0);
  /* a message longer than the receive fails that receive, not the connection */
  CK(anycclP2pIrecv(p.ca, r[0], 10, 4, &q));
  CK(anycclP2pSend(p.cb, s[0], SZ, 4));
  EXPECT(anycclP2pWait(q, NULL) == ncclInvalidUsage);
  CK(anycclP2pSend(p.cb, s[2], 100, 4));
  CK(anycclP2pRecv(p.ca, r[1], 100, 4, &got));
  EXPECT(got == 100 && memcmp(r[1], s[2], 100) == 0);
  pairClose(&p);
}

/* One-sided write (with notification) and read; refused and out-of-range. */
static void caseWriteRead(void) {
  struct pair p;
  pairOpen(&p, -1, 3, 4096, 2, 10);
  enum { REG = 40000 };
  char* region = calloc(1, REG);
  char* src = malloc(REG);
  char* back = malloc(REG);
  fill(src, REG, 9);
  anycclP2pMr_t mr;
  anycclP2pMrDesc_t d;
  CK(anycclP2pRegMr(p.a, region, REG, &mr));
  CK(anycclP2pMrGetDesc(mr, &d));
  CK(anycclP2pWrite(p.cb, src, 30000, &d, 1000, 0xabc));
  EXPECT(memcmp(region + 1000, src, 30000) == 0);
  for (int i = 0; i < 1000; i++) EXPECT(region[i] == 0);
  for (int i = 31000; i < REG; i++) EXPECT(region[i] == 0);
  uint64_t v = 0;
  int got = 0;
  CK(anycclP2pNotifyPoll(p.ca, &v, &got));
  EXPECT(got == 1 && v == 0xabc);
  CK(anycclP2pNotifyPoll(p.ca, &v, &got));
  EXPECT(got == 0);
  CK(anycclP2pWrite(p.cb, src, 0, &d, REG, 0)); /* empty, at the end */
  CK(anycclP2pRead(p.cb, back, 30000, &d, 1000));
  EXPECT(memcmp(back, src, 30000) == 0);
  CK(anycclP2pRead(p.cb, back, 0, &d, 0));
  /* many in flight */
  anycclP2pRequest_t w[8];
  for (int i = 0; i < 8; i++) CK(anycclP2pIwrite(p.cb, src + i * 5000, 5000, &d, i * 5000, 0, &w[i]));
  for (int i = 0; i < 8; i++) CK(anycclP2pWait(w[i], NULL));
  EXPECT(memcmp(region, src, REG) == 0);
  /* out of range here: refused locally */
  EXPECT(anycclP2pWrite(p.cb, src, 10, &d, REG - 5, 0) == ncclInvalidArgument);
  /* a key the peer does not know: refused there, the connection lives on */
  anycclP2pMrDesc_t bogus = d;
  bogus.key ^= 0x5555;
  EXPECT(anycclP2pWrite(p.cb, src, 100, &bogus, 0, 1) == ncclInvalidUsage);
  EXPECT(anycclP2pRead(p.cb, back, 100, &bogus, 0) == ncclInvalidUsage);
  CK(anycclP2pNotifyPoll(p.ca, &v, &got));
  EXPECT(got == 0);
  CK(anycclP2pDeregMr(mr));
  EXPECT(anycclP2pRead(p.cb, back, 100, &d, 0) == ncclInvalidUsage); /* deregistered */
  CK(anycclP2pSend(p.cb, src, 10, 1));
  CK(anycclP2pRecv(p.ca, back, 10, 1, NULL));
  pairClose(&p);
  free(region);
  free(src);
  free(back);
}

/* Many endpoints and connections at once, traffic interleaved. */
static void caseMany(void) {
  enum { N = 8, SZ = 100000 };
  struct pair p[N];
  char* s = malloc(SZ);
  char* r[N];
  anycclP2pRequest_t rr[N], rs[N];
  fill(s, SZ, 3);
  for (int i = 0; i < N; i++) pairOpen(&p[i], -1, 1 + i % 4, 8192, 1 + i, 10);
  for (int i = 0; i < N; i++) {
    r[i] = calloc(1, SZ);
    CK(anycclP2pIrecv(p[i].ca, r[i], SZ, i, &rr[i]));
  }
  for (int i = 0; i < N; i++) CK(anycclP2pIsend(p[i].cb, s, SZ, i, &rs[i]));
  for (int i = 0; i < N; i++) {
    CK(anycclP2pWait(rr[i], NULL));
    CK(anycclP2pWait(rs[i], NULL));
    EXPECT(memcmp(r[i], s, SZ) == 0);
    free(r[i]);
  }
  /* a second connection to the same listener */
  anycclP2pConn_t c2b, c2a;
  CK(anycclP2pConnect(p[0].b, &p[0].h, &c2b));
  CK(anycclP2pAccept(p[0].a, &c2a));
  char x[4] = "abc", y[4] = {0};
  CK(anycclP2pSend(c2b, x, 4, 0));
  CK(anycclP2pRecv(c2a, y, 4, 0, NULL));
  EXPECT(memcmp(x, y, 4) == 0);
  for (int i = 0; i < N; i++) pairClose(&p[i]); /* closes c2a/c2b with their endpoints */
  free(s);
}

static int rawConnect(const anycclP2pHandle_t* h) {
  /* the handle's first address: sockaddr after magic, cookie, naddrs, pad */
  struct sockaddr_in a;
  memcpy(&a, h->bytes + 24, sizeof(a));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) return -1;
  return fd;
}

/* Junk on the listening port is dropped; bad handles and arguments are refused. */
static void caseJunk(void) {
  struct pair p;
  anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
  cfg.ifname = "lo";
  cfg.timeoutSec = 10;
  CK(anycclP2pEndpointCreate(-1, &cfg, &p.a));
  CK(anycclP2pEndpointCreate(-1, &cfg, &p.b));
  CK(anycclP2pListen(p.a, &p.h));
  int j1 = rawConnect(&p.h), j2 = rawConnect(&p.h), j3 = rawConnect(&p.h);
  EXPECT(j1 >= 0 && j2 >= 0 && j3 >= 0);
  char junk[64];
  memset(junk, 0x41, sizeof(junk));
  EXPECT(write(j1, junk, sizeof(junk)) == sizeof(junk)); /* garbage hello */
  close(j2);                                             /* connects and leaves */
  /* j3 says nothing: dropped after the hello time */
  CK(anycclP2pConnect(p.b, &p.h, &p.cb));
  double t0 = now();
  CK(anycclP2pAccept(p.a, &p.ca));
  EXPECT(now() - t0 < 8);
  char x[5] = "ping", y[5] = {0};
  CK(anycclP2pSend(p.cb, x, 5, 0));
  CK(anycclP2pRecv(p.ca, y, 5, 0, NULL));
  EXPECT(strcmp(y, "ping") == 0);
  close(j1);
  close(j3);
  /* bad handles */
  anycclP2pHandle_t bad = p.h;
  bad.bytes[0] ^= 1;
  anycclP2pConn_t c;
  EXPECT(anycclP2pConnect(p.b, &bad, &c) == ncclInvalidArgument);
  bad = p.h;
  memset(bad.bytes + 16, 0x7f, 4); /* address count */
  EXPECT(anycclP2pConnect(p.b, &bad, &c) == ncclInvalidArgument);
  memset(&bad, 0, sizeof(bad));
  EXPECT(anycclP2pConnect(p.b, &bad, &c) == ncclInvalidArgument);
  EXPECT(anycclP2pConnect(p.b, NULL, &c) == ncclInvalidArgument);
  /* a wrong cookie (another listener's handle) gets no connection: the accept times out */
  anycclP2pHandle_t other = p.h;
  other.bytes[8] ^= 0x10;
  cfg.timeoutSec = 1;
  anycclP2pEndpoint_t e;
  CK(anycclP2pEndpointCreate(-1, &cfg, &e));
  anycclP2pHandle_t eh;
  CK(anycclP2pListen(e, &eh));
  memcpy(other.bytes + 24, eh.bytes + 24, ANYCCL_P2P_HANDLE_BYTES - 24); /* e's address, p.a's cookie */
  CK(anycclP2pConnect(p.b, &other, &c));
  anycclP2pConn_t ce;
  EXPECT(anycclP2pAccept(e, &ce) == ncclSystemError);
  CK(anycclP2pClose(c));
  CK(anycclP2pEndpointDestroy(e));
  /* a peer that knows the cookie, then speaks garbage: its connection fails, nothing else */
  {
    int fd = rawConnect(&p.h);
    struct {
      uint64_t magic, cookie, connId;
      int32_t index, nchannels;
      uint64_t chunk;
      int32_t window, pad;
    } hello = {0x616e79703270683aULL, 0, 42, 0, 1, 4096, 1, 0};
    memcpy(&hello.cookie, p.h.bytes + 8, 8);
    EXPECT(write(fd, &hello, sizeof(hello)) == (ssize_t)sizeof(hello));
    anycclP2pConn_t g;
    CK(anycclP2pAccept(p.a, &g));
    char trash[64];
    memset(trash, 0x33, sizeof(trash));
    EXPECT(write(fd, trash, sizeof(trash)) == (ssize_t)sizeof(trash));
    anycclP2pRequest_t gq;
    char gb[8];
    /* the progress thread may read the garbage before the receive is posted:
     * then posting it fails already */
    ncclResult_t pr = anycclP2pIrecv(g, gb, sizeof(gb), 0, &gq);
    EXPECT(pr == ncclRemoteError || (pr == ncclSuccess && anycclP2pWait(gq, NULL) == ncclRemoteError));
    CK(anycclP2pClose(g));
    close(fd);
    /* the real connection still works */
    CK(anycclP2pSend(p.cb, x, 5, 1));
    CK(anycclP2pRecv(p.ca, y, 5, 1, NULL));
    EXPECT(strcmp(y, "ping") == 0);
  }
  /* bad arguments */
  anycclP2pRequest_t q;
  EXPECT(anycclP2pIsend(p.cb, NULL, 10, 0, &q) == ncclInvalidArgument);
  EXPECT(anycclP2pIrecv(NULL, y, 1, 0, &q) == ncclInvalidArgument);
  EXPECT(anycclP2pListen(p.a, &bad) == ncclInvalidArgument); /* twice */
  cfg.channels = 1000;
  EXPECT(anycclP2pEndpointCreate(-1, &cfg, &e) == ncclInvalidArgument);
  cfg.channels = 0;
  cfg.ifname = "nosuchif0";
  EXPECT(anycclP2pEndpointCreate(-1, &cfg, &e) == ncclInvalidArgument);
  pairClose(&p);
}

/* A peer killed mid-transfer: the pending receive fails with
 * ncclRemoteError quickly; a silent live peer: ncclSystemError after the
 * timeout. */
static void caseDead(void) {
  anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
  cfg.ifname = "lo";
  cfg.timeoutSec = 2;
  cfg.chunkBytes = 65536;
  anycclP2pEndpoint_t a;
  CK(anycclP2pEndpointCreate(-1, &cfg, &a));
  anycclP2pHandle_t h;
  CK(anycclP2pListen(a, &h));
  enum { SZ = 64 << 20 };
  pid_t pid = fork();
  if (pid == 0) {
    anycclP2pEndpoint_t b;
    anycclP2pConn_t c;
    CK(anycclP2pEndpointCreate(-1, &cfg, &b));
    CK(anycclP2pConnect(b, &h, &c));
    char* s = calloc(1, SZ);
    anycclP2pRequest_t q;
    CK(anycclP2pIsend(c, s, SZ, 1, &q));
    anycclP2pWait(q, NULL); /* never completes: the receiver reads at most window chunks per channel */
    _exit(0);
  }
  anycclP2pConn_t c;
  CK(anycclP2pAccept(a, &c));
  char* r = malloc(SZ);
  anycclP2pRequest_t q;
  usleep(200000);
  kill(pid, SIGKILL); /* mid-transfer: 64 MB cannot fit the unexpected chunks and socket buffers */
  waitpid(pid, NULL, 0);
  CK(anycclP2pIrecv(c, r, SZ, 1, &q));
  double t0 = now();
  ncclResult_t res = anycclP2pWait(q, NULL);
  double dt = now() - t0;
  fprintf(stderr, "dead peer: %s after %.2f s\n", ncclGetErrorString(res), dt);
  EXPECT(res == ncclRemoteError);
  EXPECT(dt < 3);
  EXPECT(anycclP2pIsend(c, r, 10, 1, &q) == ncclRemoteError); /* the connection stays failed */
  CK(anycclP2pClose(c));
  CK(anycclP2pEndpointDestroy(a));
  free(r);
  /* a peer that dies while a small receive waits alone (blocked in recv on
   * its channel): the receive fails at once, not after the timeout */
  CK(anycclP2pEndpointCreate(-1, &cfg, &a));
  CK(anycclP2pListen(a, &h));
  pid = fork();
  if (pid == 0) {
    anycclP2pEndpoint_t b;
    anycclP2pConn_t cc;
    CK(anycclP2pEndpointCreate(-1, &cfg, &b));
    CK(anycclP2pConnect(b, &h, &cc));
    usleep(300000);
    raise(SIGKILL);
  }
  CK(anycclP2pAccept(a, &c));
  char z[16];
  t0 = now();
  res = anycclP2pRecv(c, z, sizeof(z), 1, NULL);
  dt = now() - t0;
  waitpid(pid, NULL, 0);
  fprintf(stderr, "peer dead during a small receive: %s after %.2f s\n", ncclGetErrorString(res), dt);
  EXPECT(res == ncclRemoteError && dt < 1.5);
  CK(anycclP2pClose(c));
  CK(anycclP2pEndpointDestroy(a));
  /* silent peer: nothing moves for timeoutSec */
  struct pair p;
  pairOpen(&p, -1, 2, 4096, 4, 1);
  char y[16];
  CK(anycclP2pIrecv(p.ca, y, 16, 1, &q));
  t0 = now();
  res = anycclP2pWait(q, NULL);
  dt = now() - t0;
  fprintf(stderr, "silent peer: %s after %.2f s\n", ncclGetErrorString(res), dt);
  EXPECT(res == ncclSystemError && dt >= 0.9 && dt < 3);
  pairClose(&p);
}

/* The NIC per device from topologies/a3high.xml: GPUs 0,1 -> eth1, ... 6,7
 * -> eth4; 4 channels each (8 sockets per NIC, 2 GPUs per NIC). */
static void caseTopo(const char* topoFile) {
  setenv("NCCL_TOPO_FILE", topoFile, 1);
  const char* want[8] = {"eth1", "eth1", "eth2", "eth2", "eth3", "eth3", "eth4", "eth4"};
  for (int d = 0; d < 8; d++) {
    anycclP2pEndpoint_t e;
    anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
    CK(anycclP2pEndpointCreate(d, &cfg, &e));
    anycclP2pEndpointInfo_t info;
    CK(anycclP2pEndpointGetInfo(e, &info));
    fprintf(stderr, "device %d: topology NIC %s, %d channels, interface %s\n", d, info.topoNic, info.channels,
            info.ifNames[0]);
    EXPECT(strcmp(info.topoNic, want[d]) == 0);
    EXPECT(info.channels == 4);
    EXPECT(info.nifs == 1);
    CK(anycclP2pEndpointDestroy(e));
  }
}

#ifdef P2P_WITH_RUNTIME
/* test_p2p_cpu: link anyccl-cpu (the bounce buffers' copies run on its
 * streams) without calling it before the dead case forks */
void* volatile p2pKeepRuntime = (void*)&cudaGetDeviceCount;
#endif

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_p2p sizes|tags|writeread|many|junk|dead|topo FILE\n");
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  alarm(25); /* a hang is a failure */
  const char* c = argv[1];
  if (!strcmp(c, "sizes")) caseSizes();
  else if (!strcmp(c, "tags")) caseTags();
  else if (!strcmp(c, "writeread")) caseWriteRead();
  else if (!strcmp(c, "many")) caseMany();
  else if (!strcmp(c, "junk")) caseJunk();
  else if (!strcmp(c, "dead")) caseDead();
  else if (!strcmp(c, "topo") && argc > 2) caseTopo(argv[2]);
  else return 1;
  printf("PASS: %s\n", c);
  return 0;
}
