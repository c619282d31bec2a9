/* The P2P engine's outside bytes (src/p2p). First byte mod 4:
 *   0  a handle as a peer passes it to anycclP2pConnect (p2pParseHandle)
 *   1  hellos on a listener's accepted sockets (p2pParseHello)
 *   2  chunk headers (p2pHeaderValid)
 *   3  a whole connection: the harness connects to a real endpoint over
 *      loopback with 1 or 2 channels (valid hellos), posts receives, a write
 *      and a read, then sends the input's records on the channels and closes
 *      them. A record is a control byte c (channel c & 1), then
 *        c & 0x80: a byte n and n raw bytes (the rest of a payload, junk);
 *        else a 64-byte header and its payload (c & 0x20: no payload: raw
 *        records bring it, so payloads of two channels can interleave);
 *      c & 0x40: then wait a millisecond and test every request (the
 *      engine takes what came; finished requests are freed). Every request
 *      must end within a few seconds (the connection fails at the latest at
 *      the end of the bytes), nothing may be written outside a buffer, and a
 *      receive that succeeds got no more than its room. Header keys 0 and 1
 *      stand for the endpoint's two registered regions. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fuzz.h"
#include "p2p_int.h"

#define FUZZ_COOKIE 0x636f6f6b69653270ULL
#define FUZZ_MAX_REQS 8
#define FUZZ_REGION 8192

static void handle(struct fuzzIn* in) {
  uint8_t bytes[ANYCCL_P2P_HANDLE_BYTES];
  size_t len = fuzzTake(in, bytes, sizeof(bytes));
  struct p2pWireHandle h;
  char why[160] = "";
  /* as a plugin endpoint's handle: its magic, a terminated plugin name */
  struct p2pPlugWireHandle ph;
  if (p2pParsePlugHandle(bytes, len == sizeof(bytes) ? sizeof(bytes) : len, &ph, why, sizeof(why)) == ncclSuccess)
    FUZZ_CHECK(ph.magic == P2P_PHANDLE_MAGIC && memchr(ph.net, 0, sizeof(ph.net)) != NULL);
  why[0] = '\0';
  if (p2pParseHandle(bytes, len == sizeof(bytes) ? sizeof(bytes) : len, &h, why, sizeof(why)) != ncclSuccess) {
    FUZZ_CHECK(why[0] != '\0');
    return;
  }
  FUZZ_CHECK(h.magic == P2P_HANDLE_MAGIC && h.naddrs >= 1 && h.naddrs <= P2P_MAX_IFS);
  for (int i = 0; i < h.naddrs; i++)
    FUZZ_CHECK((h.addrs[i].sa.sa_family == AF_INET || h.addrs[i].sa.sa_family == AF_INET6) &&
               ncclSocketAddrPort(&h.addrs[i]) > 0);
}

static void hellos(struct fuzzIn* in) {
  while (in->n > 0) {
    unsigned cut = fuzzByte(in);
    size_t len = cut < 250 ? sizeof(struct p2pHello) : cut - 250; /* mostly whole hellos */
    uint8_t bytes[sizeof(struct p2pHello)];
    fuzzTake(in, bytes, sizeof(bytes));
    struct p2pHello hi;
    if (p2pParseHello(bytes, len, FUZZ_COOKIE, &hi) != ncclSuccess) continue;
    /* acceptOne allocates nchannels sockets and files this one at index */
    FUZZ_CHECK(len == sizeof(hi) && hi.cookie == FUZZ_COOKIE && hi.magic == P2P_HANDLE_MAGIC);
    FUZZ_CHECK(hi.nchannels >= 1 && hi.nchannels <= ANYCCL_P2P_MAX_CHANNELS && hi.index >= 0 &&
               hi.index < hi.nchannels);
    FUZZ_CHECK(hi.chunk >= 4096 && hi.chunk <= (1u << 30) && hi.window >= 1 && hi.window <= 1024);
  }
}

static void headers(struct fuzzIn* in) {
  size_t chunk = 4096u << (fuzzByte(in) % 19);
  while (in->n >= sizeof(struct p2pHdr)) {
    struct p2pHdr h;
    fuzzTake(in, &h, sizeof(h));
    if (!p2pHeaderValid(&h, chunk)) continue;
    /* the receive loop reads len payload bytes into a chunk-sized place */
    FUZZ_CHECK(h.magic == P2P_MAGIC && h.op >= P2P_OP_MSG && h.op <= P2P_OP_BYE && h.len <= chunk && h.len <= h.total);
  }
}

/* ---- a whole connection ------------------------------------------------------ */
static anycclP2pEndpoint_t ep;
static struct p2pWireHandle wh;
static char* regions[2];
static uint64_t keys[2];
static uint64_t connIds;

static void setup(void) {
  if (ep != NULL) return;
  signal(SIGPIPE, SIG_IGN);
  anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
  cfg.ifname = "lo";
  cfg.timeoutSec = 5;
  FUZZ_CHECK(anycclP2pEndpointCreate(-1, &cfg, &ep) == ncclSuccess);
  anycclP2pHandle_t h;
  FUZZ_CHECK(anycclP2pListen(ep, &h) == ncclSuccess);
  memcpy(&wh, h.bytes, sizeof(wh));
  for (int i = 0; i < 2; i++) {
    regions[i] = malloc(FUZZ_REGION >> i);
    FUZZ_CHECK(regions[i] != NULL);
    anycclP2pMr_t mr;
    anycclP2pMrDesc_t d;
    FUZZ_CHECK(anycclP2pRegMr(ep, regions[i], FUZZ_REGION >> i, &mr) == ncclSuccess);
    FUZZ_CHECK(anycclP2pMrGetDesc(mr, &d) == ncclSuccess);
    keys[i] = d.key;
  }
}

static int rawChannel(int index, int nch) {
  int fd = socket(wh.addrs[0].sa.sa_family, SOCK_STREAM, 0);
  FUZZ_CHECK(fd >= 0);
  socklen_t len = wh.addrs[0].sa.sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
  /* closed with a reset, not left in TIME_WAIT: a run makes hundreds of thousands of connections */
  struct linger lg = {1, 0};
  FUZZ_CHECK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
  if (connect(fd, &wh.addrs[0].sa, len) != 0) {
    int err = errno;
    if (err == EINTR) { /* libFuzzer's timer signal: the connect goes on; wait for it */
      struct pollfd p = {fd, POLLOUT, 0};
      socklen_t el = sizeof(err);
      err = poll(&p, 1, 5000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 ? err : ETIMEDOUT;
    }
    if (err != 0) {
      fprintf(stderr, "fuzz_p2p: connect to the endpoint failed: %s\n", strerror(err));
      FUZZ_CHECK(0);
    }
  }
  struct p2pHello hi = {P2P_HANDLE_MAGIC, wh.cookie, connIds, index, nch, 4096, 1024, 0};
  FUZZ_CHECK(send(fd, &hi, sizeof(hi), MSG_NOSIGNAL) == (ssize_t)sizeof(hi));
  return fd;
}

static void sendAll(int fd, const void* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return; /* the engine dropped the channel */
    p = (const char*)p + w;
    n -= (size_t)w;
  }
}

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Test every live request; a finished one is freed with its buffer. Returns how many finished. */
static int testAll(anycclP2pRequest_t* reqs, char** bufs, const size_t* room, const int* kind, int n) {
  int finished = 0;
  for (int i = 0; i < n; i++) {
    if (bufs[i] == NULL) continue;
    int done = 0;
    size_t bytes = 0;
    ncclResult_t r = anycclP2pTest(reqs[i], &done, &bytes);
    if (!done) continue;
    if (r == ncclSuccess && kind[i] == 0) FUZZ_CHECK(bytes <= room[i]);
    free(bufs[i]);
    bufs[i] = NULL;
    finished++;
  }
  return finished;
}

static void connection(struct fuzzIn* in) {
  setup();
  unsigned flags = fuzzByte(in);
  int nch = 1 + (flags & 1);
  connIds++;
  int fds[2] = {-1, -1};
  for (int k = 0; k < nch; k++) fds[k] = rawChannel(k, nch);
  anycclP2pConn_t c;
  FUZZ_CHECK(anycclP2pAccept(ep, &c) == ncclSuccess);

  anycclP2pRequest_t reqs[FUZZ_MAX_REQS];
  char* bufs[FUZZ_MAX_REQS] = {0};
  size_t room[FUZZ_MAX_REQS] = {0};
  int kind[FUZZ_MAX_REQS] = {0}; /* 0 recv, 1 write, 2 read */
  int n = 0, nrecv = (flags >> 1) % 4;
  for (int i = 0; i < nrecv; i++, n++) {
    int tag = (int)(fuzzByte(in) % 3);
    room[n] = fuzzByte(in) * 33;
    bufs[n] = malloc(room[n] ? room[n] : 1);
    FUZZ_CHECK(anycclP2pIrecv(c, bufs[n], room[n], tag, &reqs[n]) == ncclSuccess);
  }
  anycclP2pMrDesc_t remote = {77, 0, 1 << 20};
  if (flags & 8) { /* request id 1 */
    room[n] = 100;
    bufs[n] = calloc(1, room[n]);
    kind[n] = 1;
    FUZZ_CHECK(anycclP2pIwrite(c, bufs[n], room[n], &remote, 0, 5, &reqs[n]) == ncclSuccess);
    n++;
  }
  if (flags & 16) { /* request id 1 or 2 */
    room[n] = fuzzByte(in) * 33;
    bufs[n] = malloc(room[n] ? room[n] : 1);
    kind[n] = 2;
    FUZZ_CHECK(anycclP2pIread(c, bufs[n], room[n], &remote, 64, &reqs[n]) == ncclSuccess);
    n++;
  }

  int left = n;
  while (in->n >= 2) {
    unsigned ctl = fuzzByte(in);
    int k = (int)(ctl & 1) % nch;
    size_t len;
    if (ctl & 0x80) {
      len = fuzzByte(in);
    } else {
      if (in->n < sizeof(struct p2pHdr)) break;
      struct p2pHdr h;
      fuzzTake(in, &h, sizeof(h));
      if (h.key < 2) h.key = keys[h.key];
      sendAll(fds[k], &h, sizeof(h));
      len = (ctl & 0x20) ? 0 : h.len;
    }
    if (len > in->n) len = in->n;
    sendAll(fds[k], in->p, len);
    in->p += len;
    in->n -= len;
    if (ctl & 0x40) {
      usleep(1000);
      left -= testAll(reqs, bufs, room, kind, n);
    }
  }
  for (int k = 0; k < nch; k++) shutdown(fds[k], SHUT_WR); /* end of the bytes: EOF, after a goodbye or not */

  double deadline = nowSec() + 10;
  while (left > 0) {
    FUZZ_CHECK(nowSec() < deadline); /* every request ends once the channels end */
    left -= testAll(reqs, bufs, room, kind, n);
    uint64_t v;
    int got = -1;
    ncclResult_t r = anycclP2pNotifyPoll(c, &v, &got); /* the connection's error once it failed */
    FUZZ_CHECK((got == 0 || got == 1) && (got == 0 || r == ncclSuccess));
    if (left > 0) usleep(100);
  }
  FUZZ_CHECK(anycclP2pClose(c) == ncclSuccess);
  for (int k = 0; k < nch; k++) close(fds[k]);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {data, size};
  switch (fuzzByte(&in) % 4) {
  case 0: handle(&in); break;
  case 1: hellos(&in); break;
  case 2: headers(&in); break;
  default: connection(&in); break;
  }
  return 0;
}
