/* anyccl-p2p-bench: throughput and latency of the P2P engine between two
 * processes (include/anyccl_p2p.h).
 *
 *   anyccl-p2p-bench server [options]           listens; prints nothing until a client comes
 *   anyccl-p2p-bench client HOST [options]      connects to the server on HOST
 *
 * The server's handle travels over a plain TCP socket (--port). For each
 * size: a ping-pong of the size (latency: half the round trip; --iters round
 * trips up to 64 KB, at most 50 above), then the
 * client streams --iters messages and the server acknowledges the last one
 * (GB/s = size x iters / time, 1e9 bytes/s). --tcp runs the same over the
 * plain TCP socket alone (one connection, no engine): the reference.
 *
 * Options: --channels N --chunk BYTES --window N --ifaces a,b --device D
 *          --size BYTES (one size) | --min BYTES --max BYTES (x4 steps)
 *          --iters N --lat-iters N (round trips for the latency; 0: none) --port P --tcp --check
 *          --gpu: the buffers in GPU memory (cudaMalloc on --device, default 0), moved through
 *          the engine's bounce buffers; the CUDA runtime is the process's (anyccl-cpu when
 *          linked or preloaded), else $ANYCCL_CUDART, libcudart.so.13, .12 or libcudart.so */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "anyccl_p2p.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CK(x)                                                                        \
  do {                                                                               \
    ncclResult_t r_ = (x);                                                           \
    if (r_ != ncclSuccess) {                                                         \
      fprintf(stderr, "anyccl-p2p-bench: %s failed: %s\n", #x, ncclGetErrorString(r_)); \
      exit(2);                                                                       \
    }                                                                                \
  } while (0)

static size_t parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  else if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  else if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

static int fullIo(int fd, void* p, size_t n, int send) {
  char* c = p;
  while (n) {
    ssize_t r = send ? write(fd, c, n) : read(fd, c, n);
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

static int oob(int server, const char* host, int port) {
  int one = 1;
  if (server) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    if (bind(l, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(l, 1) != 0) {
      perror("anyccl-p2p-bench: bind/listen on --port");
      exit(2);
    }
    int fd = accept(l, NULL, NULL);
    close(l);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
  }
  struct addrinfo hints = {0}, *res;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  if (getaddrinfo(host, ps, &hints, &res) != 0) {
    fprintf(stderr, "anyccl-p2p-bench: cannot resolve %s\n", host);
    exit(2);
  }
  int fd = -1;
  for (int i = 0; i < 200 && fd < 0; i++) { /* the server may start later */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
      usleep(50000);
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    fprintf(stderr, "anyccl-p2p-bench: cannot reach the server at %s:%d\n", host, port);
    exit(2);
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

struct opts {
  int server, channels, window, device, iters, port, tcp, check, latIters, gpu;
  size_t chunk, min, max;
  const char *ifaces, *host;
};

/* Both ends must run the same sizes and counts, or one waits for messages
 * the other never sends: they compare over the socket first, and on a
 * difference both say so and stop. */
static int agree(const struct opts* o, int fd) {
  int64_t mine[5] = {(int64_t)o->min, (int64_t)o->max, o->iters, o->latIters, o->tcp};
  int64_t theirs[5];
  int err = o->server ? fullIo(fd, mine, sizeof(mine), 1) || fullIo(fd, theirs, sizeof(theirs), 0)
                      : fullIo(fd, theirs, sizeof(theirs), 0) || fullIo(fd, mine, sizeof(mine), 1);
  if (err) {
    fprintf(stderr, "anyccl-p2p-bench: the peer closed the socket before the run started (another version?)\n");
    return 1;
  }
  if (memcmp(mine, theirs, sizeof(mine)) == 0) return 0;
  const int64_t* srv = o->server ? mine : theirs;
  const int64_t* cli = o->server ? theirs : mine;
  fprintf(stderr,
          "anyccl-p2p-bench: the server runs --min %lld --max %lld --iters %lld --lat-iters %lld%s, the client "
          "--min %lld --max %lld --iters %lld --lat-iters %lld%s: give both the same --size/--min/--max, --iters, "
          "--lat-iters and --tcp\n",
          (long long)srv[0], (long long)srv[1], (long long)srv[2], (long long)srv[3], srv[4] ? " --tcp" : "",
          (long long)cli[0], (long long)cli[1], (long long)cli[2], (long long)cli[3], cli[4] ? " --tcp" : "");
  return 1;
}

/* One size over the engine: returns GB/s and latency (us). */
/* round trips timed for the latency: all --iters for small sizes, at most 50 for large ones */
static int latIters(const struct opts* o, size_t size) {
  if (o->latIters >= 0) return o->latIters;
  return size <= 65536 || o->iters < 50 ? o->iters : 50;
}

static void runP2p(const struct opts* o, anycclP2pConn_t c, char* buf, size_t size, double* gbs, double* lat) {
  int lat_iters = latIters(o, size);
  char ack = 0;
  CK(anycclP2pSend(c, &ack, 1, 9)); /* both sides ready */
  CK(anycclP2pRecv(c, &ack, 1, 9, NULL));
  double t0 = now();
  for (int i = 0; i < lat_iters; i++) {
    if (o->server) {
      CK(anycclP2pRecv(c, buf, size, 1, NULL));
      CK(anycclP2pSend(c, buf, size, 1));
    } else {
      CK(anycclP2pSend(c, buf, size, 1));
      CK(anycclP2pRecv(c, buf, size, 1, NULL));
    }
  }
  *lat = lat_iters ? (now() - t0) / (2.0 * lat_iters) * 1e6 : 0;
  anycclP2pRequest_t* reqs = calloc((size_t)o->iters, sizeof(*reqs));
  t0 = now();
  for (int i = 0; i < o->iters; i++) {
    if (o->server) CK(anycclP2pIrecv(c, buf, size, 2, &reqs[i]));
    else CK(anycclP2pIsend(c, buf, size, 2, &reqs[i]));
  }
  for (int i = 0; i < o->iters; i++) CK(anycclP2pWait(reqs[i], NULL));
  if (o->server) CK(anycclP2pSend(c, &ack, 1, 3));
  else CK(anycclP2pRecv(c, &ack, 1, 3, NULL));
  *gbs = (double)size * o->iters / (now() - t0) / 1e9;
  free(reqs);
}

static void runTcp(const struct opts* o, int fd, char* buf, size_t size, double* gbs, double* lat) {
  int lat_iters = latIters(o, size);
  char ack = 0;
  if (fullIo(fd, &ack, 1, 1) || fullIo(fd, &ack, 1, 0)) exit(3);
  double t0 = now();
  for (int i = 0; i < lat_iters; i++) {
    int first = !o->server;
    if (fullIo(fd, buf, size, first) || fullIo(fd, buf, size, !first)) exit(3);
  }
  *lat = lat_iters ? (now() - t0) / (2.0 * lat_iters) * 1e6 : 0;
  t0 = now();
  for (int i = 0; i < o->iters; i++)
    if (fullIo(fd, buf, size, !o->server)) exit(3);
  if (fullIo(fd, &ack, 1, o->server)) exit(3);
  *gbs = (double)size * o->iters / (now() - t0) / 1e9;
}

/* --gpu: the few runtime calls, found at run time (the bench links no runtime) */
static struct {
  int (*setDevice)(int);
  int (*malloc)(void**, size_t);
  int (*free)(void*);
  int (*memcpy)(void*, const void*, size_t, int); /* kind 4: cudaMemcpyDefault */
} cu;

static void gpuInit(int dev) {
  void* h = RTLD_DEFAULT;
  const char* names[] = {getenv("ANYCCL_CUDART"), "libcudart.so.13", "libcudart.so.12", "libcudart.so"};
  for (int i = 0; i < 4 && dlsym(h, "cudaMalloc") == NULL; i++)
    if (names[i] && names[i][0]) {
      void* l = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
      if (l) h = l;
    }
  *(void**)&cu.setDevice = dlsym(h, "cudaSetDevice");
  *(void**)&cu.malloc = dlsym(h, "cudaMalloc");
  *(void**)&cu.free = dlsym(h, "cudaFree");
  *(void**)&cu.memcpy = dlsym(h, "cudaMemcpy");
  if (!cu.setDevice || !cu.malloc || !cu.free || !cu.memcpy) {
    fprintf(stderr, "anyccl-p2p-bench: --gpu needs a CUDA runtime: set ANYCCL_CUDART to libcudart.so's path\n");
    exit(2);
  }
  if (cu.setDevice(dev) != 0) {
    fprintf(stderr, "anyccl-p2p-bench: cudaSetDevice(%d) failed\n", dev);
    exit(2);
  }
}

static void usage(void) {
  fprintf(stderr, "usage: anyccl-p2p-bench server|client HOST [--channels N] [--chunk B] [--window N] [--ifaces a,b]\n"
                  "       [--device D] [--gpu] [--size B | --min B --max B] [--iters N] [--lat-iters N] [--port P] [--tcp]\n"
                  "       [--check]\n");
  exit(1);
}

int main(int argc, char** argv) {
  struct opts o = {0};
  o.device = -1;
  o.iters = 20;
  o.latIters = -1;
  o.port = 18515;
  o.min = 4096;
  o.max = 64 << 20;
  if (argc < 2) usage();
  int a = 1;
  if (strcmp(argv[a], "server") == 0) o.server = 1;
  else if (strcmp(argv[a], "client") == 0 && argc > 2) o.host = argv[++a];
  else usage();
  for (a++; a < argc; a++) {
    const char* k = argv[a];
    const char* v = a + 1 < argc ? argv[a + 1] : NULL;
    if (!strcmp(k, "--tcp")) o.tcp = 1;
    else if (!strcmp(k, "--check")) o.check = 1;
    else if (!strcmp(k, "--gpu")) o.gpu = 1;
    else if (v == NULL) usage();
    else if (!strcmp(k, "--channels")) o.channels = atoi(v), a++;
    else if (!strcmp(k, "--chunk")) o.chunk = parseSize(v), a++;
    else if (!strcmp(k, "--window")) o.window = atoi(v), a++;
    else if (!strcmp(k, "--ifaces")) o.ifaces = v, a++;
    else if (!strcmp(k, "--device")) o.device = atoi(v), a++;
    else if (!strcmp(k, "--size")) o.min = o.max = parseSize(v), a++;
    else if (!strcmp(k, "--min")) o.min = parseSize(v), a++;
    else if (!strcmp(k, "--max")) o.max = parseSize(v), a++;
    else if (!strcmp(k, "--iters")) o.iters = atoi(v), a++;
    else if (!strcmp(k, "--lat-iters")) o.latIters = atoi(v), a++;
    else if (!strcmp(k, "--port")) o.port = atoi(v), a++;
    else usage();
  }
  if (o.iters < 1 || o.min > o.max || (o.gpu && o.tcp)) usage();
  char* host = malloc(o.max ? o.max : 1);
  for (size_t i = 0; i < o.max; i++) host[i] = (char)(i * 131 + 7);
  char* buf = host;
  if (o.gpu) { /* before the endpoint: it looks for the runtime when created */
    gpuInit(o.device < 0 ? 0 : o.device);
    if (cu.malloc((void**)&buf, o.max ? o.max : 1) != 0 || cu.memcpy(buf, host, o.max, 4) != 0) {
      fprintf(stderr, "anyccl-p2p-bench: cudaMalloc/cudaMemcpy of %zu bytes failed\n", o.max);
      exit(2);
    }
  }
  int fd = oob(o.server, o.host, o.port);
  if (agree(&o, fd)) exit(2);
  anycclP2pEndpoint_t ep = NULL;
  anycclP2pConn_t c = NULL;
  int nch = 0, win = 0;
  size_t chunk = 0;
  if (!o.tcp) {
    anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
    cfg.channels = o.channels;
    cfg.chunkBytes = o.chunk;
    cfg.window = o.window;
    cfg.ifname = o.ifaces;
    CK(anycclP2pEndpointCreate(o.gpu && o.device < 0 ? 0 : o.device, &cfg, &ep));
    anycclP2pHandle_t h;
    if (o.server) {
      CK(anycclP2pListen(ep, &h));
      if (fullIo(fd, &h, sizeof(h), 1)) exit(3);
      CK(anycclP2pAccept(ep, &c));
    } else {
      if (fullIo(fd, &h, sizeof(h), 0)) exit(3);
      CK(anycclP2pConnect(ep, &h, &c));
    }
    CK(anycclP2pConnInfo(c, &nch, &chunk, &win));
  }
  printf("# anyccl-p2p-bench %s: %s", o.server ? "server" : "client", o.tcp ? "plain TCP, 1 connection" : "P2P engine");
  if (!o.tcp) printf(", %d channels, chunk %zu, window %d, ifaces %s, %s buffers", nch, chunk, win,
                     o.ifaces ? o.ifaces : "(default)", o.gpu ? "GPU" : "host");
  printf("\n# %12s %8s %10s %10s\n", "size(B)", "iters", "GB/s", "lat(us)");
  int bad = 0;
  for (size_t s = o.min;; s *= 4) {
    double gbs = 0, lat = 0;
    if (o.tcp) runTcp(&o, fd, buf, s, &gbs, &lat);
    else runP2p(&o, c, buf, s, &gbs, &lat);
    if (o.check && o.server && o.gpu && cu.memcpy(host, buf, s, 4) != 0) bad++;
    if (o.check && o.server)
      for (size_t i = 0; i < s; i++)
        if (host[i] != (char)(i * 131 + 7)) {
          bad++;
          break;
        }
    printf("  %12zu %8d %10.3f %10.1f\n", s, o.iters, gbs, lat);
    fflush(stdout);
    if (s >= o.max || s == 0) break;
    if (s * 4 > o.max) s = o.max / 4;
  }
  if (o.check && o.server) printf("# check: %s\n", bad ? "WRONG DATA" : "ok");
  if (c) CK(anycclP2pClose(c));
  if (ep) CK(anycclP2pEndpointDestroy(ep));
  close(fd);
  if (o.gpu) cu.free(buf);
  free(host);
  return bad ? 7 : 0;
}
