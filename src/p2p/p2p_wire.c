/* The P2P engine's outside bytes, checked by pure functions (fuzz/fuzz_p2p.c
 * calls them directly): the handle a peer passes to anycclP2pConnect, the
 * hello on every accepted channel socket, and the header before each chunk.
 * See p2p_int.h for the layouts. */
#include <stdio.h>
#include <string.h>
#include "p2p_int.h"
#include "wire.h"

ncclResult_t p2pParseHandle(const void* bytes, size_t len, struct p2pWireHandle* out, char* why, size_t whyLen) {
  memset(out, 0, sizeof(*out));
  if (len < sizeof(*out)) {
    snprintf(why, whyLen, "%zu bytes, not a handle of %zu", len, sizeof(*out));
    return ncclInvalidArgument;
  }
  memcpy(out, bytes, sizeof(*out));
  if (out->magic != P2P_HANDLE_MAGIC || out->naddrs < 1 || out->naddrs > P2P_MAX_IFS) {
    snprintf(why, whyLen, "not one anycclP2pListen made (magic %llx, %d addresses)", (unsigned long long)out->magic,
             out->naddrs);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < out->naddrs; i++) {
    char what[128];
    if (wireParseAddr(&out->addrs[i], sizeof(out->addrs[i]), &out->addrs[i], what, sizeof(what)) != ncclSuccess) {
      snprintf(why, whyLen, "address %d: %s", i, what);
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

ncclResult_t p2pParsePlugHandle(const void* bytes, size_t len, struct p2pPlugWireHandle* out, char* why,
                               size_t whyLen) {
  memset(out, 0, sizeof(*out));
  if (len < sizeof(*out)) {
    snprintf(why, whyLen, "%zu bytes, not a handle of %zu", len, sizeof(*out));
    return ncclInvalidArgument;
  }
  memcpy(out, bytes, sizeof(*out));
  if (out->magic != P2P_PHANDLE_MAGIC) {
    snprintf(why, whyLen, "not one anycclP2pListen made (magic %llx)", (unsigned long long)out->magic);
    return ncclInvalidArgument;
  }
  out->net[sizeof(out->net) - 1] = 0;
  return ncclSuccess;
}

ncclResult_t p2pParseHello(const void* bytes, size_t len, uint64_t cookie, struct p2pHello* out) {
  memset(out, 0, sizeof(*out));
  if (len != sizeof(*out)) return ncclRemoteError;
  memcpy(out, bytes, sizeof(*out));
  if (out->magic != P2P_HANDLE_MAGIC || out->cookie != cookie || out->nchannels < 1 ||
      out->nchannels > ANYCCL_P2P_MAX_CHANNELS || out->index < 0 || out->index >= out->nchannels ||
      out->chunk < 4096 || out->chunk > (1u << 30) || out->window < 1 || out->window > 1024)
    return ncclRemoteError;
  return ncclSuccess;
}

int p2pHeaderValid(const struct p2pHdr* h, size_t chunk) {
  return h->magic == P2P_MAGIC && h->op >= P2P_OP_MSG && h->op <= P2P_OP_BYE && h->len <= chunk && h->len <= h->total;
}
