/* The bootstrap's wire bytes, as every listening port and the root's answer
 * see them (src/bootstrap/wire.c). The first byte picks what the rest is:
 *   0  a connection to the root's port: a hello header and its address
 *   1  a connection to a rank's port: headers and payloads (P2P, all-gather,
 *      barrier), read one after another as epReadConn does
 *   2  the root's answer to a hello
 *   3  an all-gather of listen addresses
 *   4  the rank information all-gathered at init (struct anycclPeerInfo),
 *      and the FIFO shape taken from rank 0's entry
 * The second byte is nranks - 1 (mod 64). The magic is FUZZ_BS_MAGIC. */
#include <arpa/inet.h>
#include "fuzz.h"
#include "transport.h"
#include "wire.h"

#define FUZZ_BS_MAGIC 0x3130646c63796e61ULL /* "anyccld01" */

static void checkAddr(const union ncclSocketAddress* a) {
  FUZZ_CHECK(a->sa.sa_family == AF_INET || a->sa.sa_family == AF_INET6);
  FUZZ_CHECK(ncclSocketAddrPort(a) > 0);
  char name[NCCL_SOCKET_NAME_MAXLEN];
  ncclSocketToString(a, name);
  FUZZ_CHECK(strlen(name) < sizeof(name));
}

static void port(struct fuzzIn* in, int rootMode, int nranks) {
  int peer = -1; /* the rank the connection said it is */
  char why[256];
  while (in->n >= sizeof(struct bsHdr)) {
    struct bsHdr h;
    why[0] = '\0';
    int st = bsParseHeader(in->p, sizeof(h), FUZZ_BS_MAGIC, rootMode, nranks, peer, &h, why, sizeof(why));
    in->p += sizeof(h);
    in->n -= sizeof(h);
    FUZZ_CHECK(st == BS_HDR_OK || st == BS_HDR_WRONG_MAGIC || st == BS_HDR_BAD);
    if (st != BS_HDR_OK) {
      FUZZ_CHECK(why[0] != '\0');
      return; /* the connection is dropped */
    }
    FUZZ_CHECK(h.magic == FUZZ_BS_MAGIC && h.rank >= 0);
    if (rootMode) {
      FUZZ_CHECK(h.kind == BS_KIND_HELLO && h.rank < h.tag && h.size == (int)sizeof(union ncclSocketAddress));
    } else {
      FUZZ_CHECK(h.kind == BS_KIND_P2P || h.kind == BS_KIND_ALLGATHER || h.kind == BS_KIND_BARRIER);
      FUZZ_CHECK(h.rank < nranks && h.size >= 0 && h.size <= BS_MAX_MSG && (peer < 0 || peer == h.rank));
    }
    peer = h.rank;
    if ((size_t)h.size > in->n) return; /* the rest has not arrived: the connection waits */
    const uint8_t* payload = in->p;
    in->p += h.size;
    in->n -= h.size;
    if (rootMode || (h.kind == BS_KIND_ALLGATHER && h.size == (int)sizeof(union ncclSocketAddress))) {
      union ncclSocketAddress a;
      if (wireParseAddr(payload, h.size, &a, why, sizeof(why)) == ncclSuccess) checkAddr(&a);
    }
    if (rootMode) return; /* the root hands the connection over after its hello */
  }
}

static void rootReply(struct fuzzIn* in, int nranks) {
  uint8_t bytes[sizeof(struct bsRootReply)];
  fuzzTake(in, bytes, sizeof(bytes));
  struct bsRootReply r;
  char why[256] = "";
  ncclResult_t res = bsParseRootReply(bytes, sizeof(bytes), FUZZ_BS_MAGIC, nranks, &r, why, sizeof(why));
  FUZZ_CHECK(strlen(r.msg) < sizeof(r.msg));
  if (res == ncclSuccess) {
    FUZZ_CHECK(r.magic == FUZZ_BS_MAGIC && r.status == 0 && r.nranks == nranks);
    checkAddr(&r.next);
  } else {
    FUZZ_CHECK(res > ncclSuccess && res < ncclNumResults && res != ncclInProgress);
    FUZZ_CHECK(strlen(why) < sizeof(why));
  }
}

static void allGather(struct fuzzIn* in, int nranks) {
  union ncclSocketAddress* addrs = calloc(nranks, sizeof(*addrs));
  FUZZ_CHECK(addrs != NULL);
  fuzzTake(in, addrs, nranks * sizeof(*addrs));
  char why[256];
  for (int p = 0; p < nranks; p++)
    if (wireParseAddr(&addrs[p], sizeof(addrs[p]), &addrs[p], why, sizeof(why)) == ncclSuccess) checkAddr(&addrs[p]);
  free(addrs);
}

static void rankInfo(struct fuzzIn* in, int nranks) {
  struct anycclPeerInfo* info = calloc(nranks, sizeof(*info));
  FUZZ_CHECK(info != NULL);
  fuzzTake(in, info, nranks * sizeof(*info));
  char why[256] = "";
  if (wireCheckPeerInfo(info, nranks, why, sizeof(why)) != ncclSuccess) {
    FUZZ_CHECK(why[0] != '\0');
  } else {
    for (int i = 0; i < nranks; i++) {
      FUZZ_CHECK(info[i].rank == i);
      FUZZ_CHECK(strnlen(info[i].busId, sizeof(info[i].busId)) < sizeof(info[i].busId));
      FUZZ_CHECK(strnlen(info[i].hostId, sizeof(info[i].hostId)) < sizeof(info[i].hostId));
    }
  }
  int nslots;
  size_t slotBytes;
  wireFifoGeometry(info[0].nslots, info[0].slotBytes, &nslots, &slotBytes);
  FUZZ_CHECK(nslots >= 2 && nslots <= ANYCCL_MAX_SLOTS && slotBytes >= 4096 && slotBytes % 64 == 0);
  FUZZ_CHECK((size_t)nslots * slotBytes <= ANYCCL_MAX_BUFFSIZE);
  free(info);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {data, size};
  int mode = fuzzByte(&in) % 5;
  int nranks = 1 + fuzzByte(&in) % 64;
  switch (mode) {
  case 0: port(&in, 1, nranks); break;
  case 1: port(&in, 0, nranks); break;
  case 2: rootReply(&in, nranks); break;
  case 3: allGather(&in, nranks); break;
  default: rankInfo(&in, nranks); break;
  }
  return 0;
}
