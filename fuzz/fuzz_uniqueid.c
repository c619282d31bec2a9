/* Unique ids and NCCL_COMM_ID. First byte even: the rest is the 128 bytes of
 * an ncclUniqueId given to ncclCommInitRank (bsParseUniqueId); odd: a
 * NCCL_COMM_ID string "host:port" (ncclSocketSplitHostPort, then, for
 * numeric hosts only -- no name lookups while fuzzing -- ncclSocketParseAddr).
 * An id that parses prints as text that parses back to the same address. */
#include <arpa/inet.h>
#include "fuzz.h"
#include "wire.h"

static void sameAddr(const union ncclSocketAddress* a, const union ncclSocketAddress* b) {
  FUZZ_CHECK(a->sa.sa_family == b->sa.sa_family);
  FUZZ_CHECK(ncclSocketAddrPort(a) == ncclSocketAddrPort(b));
  if (a->sa.sa_family == AF_INET) FUZZ_CHECK(a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr);
  else FUZZ_CHECK(memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, sizeof(struct in6_addr)) == 0);
}

static void uniqueId(struct fuzzIn* in) {
  ncclUniqueId id;
  fuzzTake(in, id.internal, sizeof(id.internal));
  struct bsHandle h;
  char why[256] = "";
  if (bsParseUniqueId(id.internal, sizeof(id.internal), &h, why, sizeof(why)) != ncclSuccess) {
    FUZZ_CHECK(why[0] != '\0');
    return;
  }
  char text[NCCL_SOCKET_NAME_MAXLEN];
  ncclSocketToString(&h.addr, text);
  union ncclSocketAddress back;
  FUZZ_CHECK(ncclSocketParseAddr(&back, text, why, sizeof(why)) == ncclSuccess);
  sameAddr(&h.addr, &back);
}

static void commId(struct fuzzIn* in) {
  char text[512], host[256], why[320];
  fuzzString(in, text, sizeof(text));
  int port = -1;
  if (ncclSocketSplitHostPort(text, host, sizeof(host), &port) != 0) return;
  FUZZ_CHECK(port >= 1 && port <= 65535);
  FUZZ_CHECK(host[0] != '\0' && strlen(host) < sizeof(host));
  unsigned char bin[16];
  int family = inet_pton(AF_INET, host, bin) == 1 ? AF_INET : inet_pton(AF_INET6, host, bin) == 1 ? AF_INET6 : 0;
  if (family == 0) return;
  union ncclSocketAddress a;
  FUZZ_CHECK(ncclSocketParseAddr(&a, text, why, sizeof(why)) == ncclSuccess);
  FUZZ_CHECK(a.sa.sa_family == family && ncclSocketAddrPort(&a) == port);
  /* as an id: what ncclGetUniqueId builds from NCCL_COMM_ID */
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  struct bsHandle h = {1, a}, back;
  memcpy(id.internal, &h, sizeof(h));
  FUZZ_CHECK(bsParseUniqueId(id.internal, sizeof(id.internal), &back, why, sizeof(why)) == ncclSuccess);
  sameAddr(&a, &back.addr);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {data, size};
  if (fuzzByte(&in) % 2 == 0) uniqueId(&in);
  else commId(&in);
  return 0;
}
