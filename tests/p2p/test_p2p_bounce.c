/* The P2P engine with device buffers (cudaMalloc) on anyccl-cpu, run with
 * ANYCCL_P2P_BOUNCE=1 (device memory goes through the bounce buffers, as on
 * GPUs) and ANYCCL_P2P_BOUNCE_DEBUG (slow copies, poisoned free buffers).
 * The bytes are checked through cudaMemcpy, as on a GPU. Cases:
 *   sizes  0 .. several chunks, channels 1/4, windows 1/16, device->device,
 *          device->host and host->device, nothing written past the message
 *   tags   receives posted in reverse tag order and waited out of order;
 *          one tag's messages sent before their receives (early chunks)
 *   region one-sided writes into and reads from a region in device memory,
 *          from and into device and host buffers: the bytes are in the region
 *          when the write completes and when its notification arrives,
 *          nothing outside the range changes
 *   dead   a peer killed while a 64 MB receive into device memory has bounce
 *          buffers in use: ncclRemoteError within 3 s, and nothing lands in
 *          the buffer after that */
#define _GNU_SOURCE
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include "anyccl_p2p.h"

#include "p2p_test.h"

#define CU(x) EXPECT((x) == cudaSuccess)

/* n bytes (and the 64 guard bytes after them) of a device or host buffer, read back */
static void readBack(char* out, const char* buf, size_t n) { CU(cudaMemcpy(out, buf, n, cudaMemcpyDefault)); }

static void caseSizes(void) {
  const size_t chunk = 4096, maxN = 9 * 4096 + 3;
  size_t sizes[] = {0, 1, 4095, 4096, 4097, 3 * 4096 + 5, maxN};
  int chans[] = {1, 4};
  int wins[] = {1, 16};
  char *hs = malloc(maxN), *hr = malloc(maxN + 64), *back = malloc(maxN + 64);
  char *ds, *dr;
  CU(cudaMalloc((void**)&ds, maxN));
  CU(cudaMalloc((void**)&dr, maxN + 64));
  for (int ci = 0; ci < 2; ci++)
    for (int wi = 0; wi < 2; wi++) {
      struct pair p;
      pairOpen(&p, 0, chans[ci], chunk, wins[wi], 10);
      for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        fill(hs, n, k + 7 * ci + 3 * wi);
        CU(cudaMemcpy(ds, hs, n, cudaMemcpyHostToDevice));
        /* 0: device -> device, 1: device -> host, 2: host -> device */
        for (int dir = 0; dir < 3; dir++) {
          char* src = dir == 2 ? hs : ds;
          char* dst = dir == 1 ? hr : dr;
          CU(cudaMemset(dst, 0x5a, n + 64));
          anycclP2pRequest_t rr, rs;
          CK(anycclP2pIrecv(p.ca, dst, n + 64, 9, &rr));
          CK(anycclP2pIsend(p.cb, src, n, 9, &rs));
          size_t got = 12345;
          CK(anycclP2pWait(rr, &got));
          CK(anycclP2pWait(rs, NULL));
          EXPECT(got == n);
          readBack(back, dst, n + 64);
          EXPECT(memcmp(back, hs, n) == 0);
          for (size_t i = n; i < n + 64; i++) EXPECT(back[i] == 0x5a); /* nothing past the message */
          /* the other direction, blocking helpers */
          CK(anycclP2pIsend(p.ca, src, n, 10, &rs));
          CK(anycclP2pRecv(p.cb, dst, n, 10, &got));
          CK(anycclP2pWait(rs, NULL));
          readBack(back, dst, n);
          EXPECT(got == n && memcmp(back, hs, n) == 0);
        }
      }
      pairClose(&p);
    }
  CU(cudaFree(ds));
  CU(cudaFree(dr));
  free(hs);
  free(hr);
  free(back);
}

static void caseTags(void) {
  struct pair p;
  pairOpen(&p, 0, 4, 4096, 2, 10);
  enum { N = 6, SZ = 5 * 4096 + 100 };
  char* hs = malloc((size_t)N * SZ);
  char* back = malloc(SZ);
  char *ds, *dr;
  CU(cudaMalloc((void**)&ds, (size_t)N * SZ));
  CU(cudaMalloc((void**)&dr, (size_t)N * SZ));
  for (int i = 0; i < N; i++) fill(hs + (size_t)i * SZ, SZ, 100 + i);
  CU(cudaMemcpy(ds, hs, (size_t)N * SZ, cudaMemcpyHostToDevice));
  anycclP2pRequest_t rr[N], rs[N];
  for (int round = 0; round < 2; round++) {
    CU(cudaMemset(dr, 0, (size_t)N * SZ));
    if (round == 0) { /* receives in reverse tag order, waited last tag first */
      for (int i = N - 1; i >= 0; i--) CK(anycclP2pIrecv(p.ca, dr + (size_t)i * SZ, SZ, 10 + i, &rr[i]));
      for (int i = 0; i < N; i++) CK(anycclP2pIsend(p.cb, ds + (size_t)i * SZ, SZ, 10 + i, &rs[i]));
    } else { /* one tag, sent before the receives exist: early chunks, then the window stalls the channels */
      for (int i = 0; i < N; i++) CK(anycclP2pIsend(p.cb, ds + (size_t)i * SZ, SZ, 77, &rs[i]));
      usleep(100000);
      for (int i = 0; i < N; i++) CK(anycclP2pIrecv(p.ca, dr + (size_t)i * SZ, SZ, 77, &rr[i]));
    }
    for (int i = N - 1; i >= 0; i--) CK(anycclP2pWait(rr[i], NULL));
    for (int i = 0; i < N; i++) CK(anycclP2pWait(rs[i], NULL));
    for (int i = 0; i < N; i++) {
      readBack(back, dr + (size_t)i * SZ, SZ);
      EXPECT(memcmp(back, hs + (size_t)i * SZ, SZ) == 0);
    }
  }
  pairClose(&p);
  CU(cudaFree(ds));
  CU(cudaFree(dr));
  free(hs);
  free(back);
}

static void caseRegion(void) {
  struct pair p;
  pairOpen(&p, 0, 3, 4096, 2, 10);
  enum { REG = 9 * 4096 + 10, OFF = 1000, N = 7 * 4096 + 5 };
  char *hs = malloc(REG), *back = malloc(REG), *zero = calloc(1, REG);
  char *region, *ds, *dd;
  CU(cudaMalloc((void**)&region, REG));
  CU(cudaMalloc((void**)&ds, REG));
  CU(cudaMalloc((void**)&dd, REG));
  CU(cudaMemset(region, 0, REG));
  fill(hs, REG, 5);
  CU(cudaMemcpy(ds, hs, REG, cudaMemcpyHostToDevice));
  anycclP2pMr_t mr;
  anycclP2pMrDesc_t d;
  CK(anycclP2pRegMr(p.a, region, REG, &mr));
  CK(anycclP2pMrGetDesc(mr, &d));
  /* device source -> device region: in place when the write completes, then the notification */
  CK(anycclP2pWrite(p.cb, ds, N, &d, OFF, 0x77));
  readBack(back, region, REG);
  EXPECT(memcmp(back + OFF, hs, N) == 0);
  EXPECT(memcmp(back, zero, OFF) == 0 && memcmp(back + OFF + N, zero, REG - OFF - N) == 0);
  uint64_t v = 0;
  int got = 0;
  for (double t0 = now(); !got && now() - t0 < 5;) CK(anycclP2pNotifyPoll(p.ca, &v, &got));
  EXPECT(got && v == 0x77);
  /* host source -> device region, several in flight */
  anycclP2pRequest_t w[4];
  for (int i = 0; i < 4; i++) CK(anycclP2pIwrite(p.cb, hs + i * 9000, 9000, &d, i * 9000, 0, &w[i]));
  for (int i = 0; i < 4; i++) CK(anycclP2pWait(w[i], NULL));
  readBack(back, region, REG);
  EXPECT(memcmp(back, hs, 36000) == 0);
  /* device region -> device and host destinations */
  CU(cudaMemset(dd, 0x5a, REG));
  CK(anycclP2pRead(p.cb, dd, 30000, &d, 100));
  readBack(back, dd, REG);
  EXPECT(memcmp(back, hs + 100, 30000) == 0);
  for (int i = 30000; i < REG; i++) EXPECT(back[i] == 0x5a);
  memset(back, 0, REG);
  CK(anycclP2pRead(p.cb, back, 20000, &d, 0));
  EXPECT(memcmp(back, hs, 20000) == 0);
  CK(anycclP2pDeregMr(mr));
  pairClose(&p);
  CU(cudaFree(region));
  CU(cudaFree(ds));
  CU(cudaFree(dd));
  free(hs);
  free(back);
  free(zero);
}

static void caseDead(void) {
  anycclP2pConfig_t cfg = ANYCCL_P2P_CONFIG_INITIALIZER;
  cfg.ifname = "lo";
  cfg.timeoutSec = 5;
  cfg.chunkBytes = 65536;
  cfg.channels = 4;
  anycclP2pEndpoint_t a;
  CK(anycclP2pEndpointCreate(0, &cfg, &a));
  anycclP2pHandle_t h;
  CK(anycclP2pListen(a, &h));
  enum { SZ = 64 << 20 };
  int go[2];
  EXPECT(pipe(go) == 0);
  pid_t pid = fork(); /* before any runtime call here: the child starts its own */
  if (pid == 0) {
    close(go[0]);
    anycclP2pEndpoint_t b;
    anycclP2pConn_t c;
    CK(anycclP2pEndpointCreate(0, &cfg, &b));
    CK(anycclP2pConnect(b, &h, &c));
    char* s;
    CU(cudaMalloc((void**)&s, SZ));
    CU(cudaMemset(s, 0x11, SZ));
    anycclP2pRequest_t q;
    CK(anycclP2pIsend(c, s, SZ, 1, &q));
    EXPECT(write(go[1], "g", 1) == 1); /* the send is posted: the parent's clock starts */
    anycclP2pWait(q, NULL); /* killed before the end: the copies are slow (ANYCCL_P2P_BOUNCE_DEBUG) */
    _exit(0);
  }
  anycclP2pConn_t c;
  CK(anycclP2pAccept(a, &c));
  char* r;
  CU(cudaMalloc((void**)&r, SZ));
  CU(cudaMemset(r, 0, SZ));
  anycclP2pRequest_t q;
  CK(anycclP2pIrecv(c, r, SZ, 1, &q));
  /* 100 ms after the sender posted (bounce buffers in use: every copy waits
   * 2 ms, one stream a direction, so 64 MB takes >= 256 ms), kill it. The
   * clock starts at the child's word, not at fork: a child under a sanitizer
   * can take longer than 100 ms to start its runtime. The buffer is not read
   * while the request runs (the copies write it: a race). */
  close(go[1]);
  struct pollfd pf = {.fd = go[0], .events = POLLIN};
  EXPECT(poll(&pf, 1, 15000) == 1);
  char g;
  EXPECT(read(go[0], &g, 1) == 1);
  close(go[0]);
  char* snap = malloc(SZ);
  double t0 = now();
  while (now() - t0 < 0.1) {
    int done = 0;
    CK(anycclP2pTest(q, &done, NULL));
    EXPECT(!done);
    usleep(1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  t0 = now();
  ncclResult_t res = anycclP2pWait(q, NULL);
  double dt = now() - t0;
  fprintf(stderr, "dead peer, bounce buffers in use: %s after %.2f s\n", ncclGetErrorString(res), dt);
  EXPECT(res == ncclRemoteError);
  EXPECT(dt < 3);
  /* the request is done: no copy writes into its buffer any more */
  CU(cudaMemcpy(snap, r, SZ, cudaMemcpyDefault));
  size_t landed = 0;
  for (size_t i = 0; i < SZ; i++) landed += snap[i] == 0x11;
  usleep(200000);
  char* later = malloc(SZ);
  CU(cudaMemcpy(later, r, SZ, cudaMemcpyDefault));
  EXPECT(memcmp(snap, later, SZ) == 0);
  fprintf(stderr, "%zu of %d bytes had landed\n", landed, SZ);
  EXPECT(landed > 0 && landed < SZ);
  EXPECT(anycclP2pIsend(c, r, 10, 1, &q) == ncclRemoteError); /* the connection stays failed */
  CK(anycclP2pClose(c));
  CK(anycclP2pEndpointDestroy(a));
  CU(cudaFree(r));
  free(snap);
  free(later);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_p2p_bounce sizes|tags|region|dead\n");
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  alarm(25);
  const char* c = argv[1];
  if (!strcmp(c, "sizes")) caseSizes();
  else if (!strcmp(c, "tags")) caseTags();
  else if (!strcmp(c, "region")) caseRegion();
  else if (!strcmp(c, "dead")) caseDead();
  else return 1;
  printf("PASS: %s\n", c);
  return 0;
}
