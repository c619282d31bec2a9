/* The socket network transport's wire bytes (src/transport/net_socket.c).
 * First byte mod 3:
 *   0  a connect handle as received through the bootstrap (netParseHandle)
 *   1  hellos arriving on a listener's accepted sockets, one after another,
 *      against a listener with 1 + (second byte mod 64) data sockets; a
 *      socket index may be claimed once (as netAccept does)
 *   2  message headers on a receive of a size from the next 4 bytes */
#include "fuzz.h"
#include "net.h"
#include "wire.h"

#define FUZZ_NET_COOKIE 0x6b6f6f6365697a7aULL

static void handle(struct fuzzIn* in) {
  uint8_t bytes[ANYCCL_NET_HANDLE_MAXSIZE];
  fuzzTake(in, bytes, sizeof(bytes));
  struct netSockHandle h;
  char why[256] = "";
  if (netParseHandle(bytes, sizeof(bytes), &h, why, sizeof(why)) != ncclSuccess) {
    FUZZ_CHECK(why[0] != '\0');
    return;
  }
  FUZZ_CHECK(h.magic == NET_MAGIC && h.nsocks >= 1 && h.nsocks <= NET_MAX_SOCKS);
  FUZZ_CHECK((h.addr.sa.sa_family == AF_INET || h.addr.sa.sa_family == AF_INET6) && ncclSocketAddrPort(&h.addr) > 0);
}

static void hellos(struct fuzzIn* in) {
  struct netSockHandle mine;
  memset(&mine, 0, sizeof(mine));
  mine.magic = NET_MAGIC;
  mine.cookie = FUZZ_NET_COOKIE;
  mine.nsocks = 1 + fuzzByte(in) % NET_MAX_SOCKS;
  char claimed[NET_MAX_SOCKS + 1] = {0};
  int have = 0;
  while (in->n >= sizeof(struct netHello) && have < mine.nsocks + 1) {
    struct netHello hi;
    ncclResult_t res = netParseHello(in->p, sizeof(hi), &mine, &hi);
    in->p += sizeof(hi);
    in->n -= sizeof(hi);
    if (res != ncclSuccess || claimed[hi.index]) continue; /* dropped */
    FUZZ_CHECK(hi.magic == NET_MAGIC && hi.cookie == FUZZ_NET_COOKIE && hi.nsocks == mine.nsocks);
    FUZZ_CHECK(hi.index >= 0 && hi.index <= mine.nsocks);
    claimed[hi.index] = 1;
    have++;
  }
}

static void headers(struct fuzzIn* in) {
  uint32_t room;
  fuzzTake(in, &room, sizeof(room));
  char* buf = malloc(64);
  FUZZ_CHECK(buf != NULL);
  while (in->n >= sizeof(struct netMsgHeader)) {
    struct netMsgHeader hdr;
    fuzzTake(in, &hdr, sizeof(hdr));
    size_t size = 0;
    int tag = 0;
    int kind = netParseMsgHeader(&hdr, room, &size, &tag);
    FUZZ_CHECK(kind >= -1 && kind <= 1);
    if (kind == 1) break; /* goodbye: nothing follows */
    if (kind < 0) break;  /* the connection fails */
    FUZZ_CHECK(size <= room && tag == hdr.tag);
    if (size <= 64) memset(buf, 0, size); /* a receive of room bytes has space for it */
  }
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {data, size};
  switch (fuzzByte(&in) % 3) {
  case 0: handle(&in); break;
  case 1: hellos(&in); break;
  default: headers(&in); break;
  }
  return 0;
}
