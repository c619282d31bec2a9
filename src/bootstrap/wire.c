/* Checks of the bootstrap's wire bytes (see wire.h): pure functions, no I/O,
 * no logging; the callers in bootstrap.c WARN with the reason given here. */
#include "wire.h"
#include "transport.h"

#include <stdio.h>
#include <string.h>

int bsParseHeader(const void* bytes, size_t len, uint64_t magic, int rootMode, int nranks, int connPeer,
                  struct bsHdr* out, char* why, size_t whyLen) {
  struct bsHdr h;
  if (len != sizeof(h)) {
    snprintf(why, whyLen, "a header is %zu bytes, got %zu", sizeof(h), len);
    return BS_HDR_BAD;
  }
  memcpy(&h, bytes, sizeof(h));
  if (h.magic != magic) {
    snprintf(why, whyLen, "wrong magic");
    return BS_HDR_WRONG_MAGIC;
  }
  if (rootMode) {
    if (h.kind == BS_KIND_HELLO && h.size == (int)sizeof(union ncclSocketAddress) && h.tag > 0 && h.rank >= 0 &&
        h.rank < h.tag) {
      *out = h;
      return BS_HDR_OK;
    }
    snprintf(why, whyLen, "bad hello (rank %d, nranks %d, kind %d, size %d)", h.rank, h.tag, h.kind, h.size);
    return BS_HDR_BAD;
  }
  if ((h.kind == BS_KIND_P2P || h.kind == BS_KIND_ALLGATHER || h.kind == BS_KIND_BARRIER) && h.rank >= 0 &&
      h.rank < nranks && h.size >= 0 && h.size <= BS_MAX_MSG && (connPeer < 0 || connPeer == h.rank)) {
    *out = h;
    return BS_HDR_OK;
  }
  snprintf(why, whyLen, "bad header (rank %d, kind %d, tag %d, size %d%s)", h.rank, h.kind, h.tag, h.size,
           connPeer >= 0 && connPeer != h.rank ? ", not the rank that opened the connection" : "");
  return BS_HDR_BAD;
}

ncclResult_t wireParseAddr(const void* bytes, size_t len, union ncclSocketAddress* out, char* why, size_t whyLen) {
  union ncclSocketAddress a;
  if (len != sizeof(a)) {
    snprintf(why, whyLen, "an address is %zu bytes, got %zu", sizeof(a), len);
    return ncclRemoteError;
  }
  memcpy(&a, bytes, sizeof(a));
  if (a.sa.sa_family != AF_INET && a.sa.sa_family != AF_INET6) {
    snprintf(why, whyLen, "address family %d is neither IPv4 nor IPv6", (int)a.sa.sa_family);
    return ncclRemoteError;
  }
  if (ncclSocketAddrPort(&a) == 0) {
    char name[NCCL_SOCKET_NAME_MAXLEN];
    snprintf(why, whyLen, "address %s has no port", ncclSocketToString(&a, name));
    return ncclRemoteError;
  }
  *out = a;
  return ncclSuccess;
}

ncclResult_t bsParseRootReply(const void* bytes, size_t len, uint64_t magic, int nranks, struct bsRootReply* out,
                              char* why, size_t whyLen) {
  if (len != sizeof(*out)) {
    snprintf(why, whyLen, "an answer is %zu bytes, got %zu", sizeof(*out), len);
    return ncclRemoteError;
  }
  memcpy(out, bytes, sizeof(*out));
  out->msg[sizeof(out->msg) - 1] = '\0';
  if (out->magic != magic) {
    snprintf(why, whyLen, "wrong magic: not this communicator's root");
    return ncclRemoteError;
  }
  if (out->status != ncclSuccess) {
    snprintf(why, whyLen, "%s", out->msg);
    /* Not ncclInProgress: callers take that for success (NCCLCHECK) and
     * would go on without a ring successor (fuzz/corpus/bootstrap/
     * crash-reply-inprogress). */
    int known = out->status > ncclSuccess && out->status < ncclNumResults && out->status != ncclInProgress;
    return known ? (ncclResult_t)out->status : ncclRemoteError;
  }
  if (out->nranks != nranks) {
    snprintf(why, whyLen, "the root counts %d ranks, this rank %d", out->nranks, nranks);
    return ncclRemoteError;
  }
  char sub[160];
  if (wireParseAddr(&out->next, sizeof(out->next), &out->next, sub, sizeof(sub)) != ncclSuccess) {
    snprintf(why, whyLen, "bad ring successor: %s", sub);
    return ncclRemoteError;
  }
  return ncclSuccess;
}

ncclResult_t bsParseUniqueId(const void* bytes, size_t len, struct bsHandle* out, char* why, size_t whyLen) {
  struct bsHandle h;
  if (len < sizeof(h)) {
    snprintf(why, whyLen, "an id is %d bytes, got %zu", NCCL_UNIQUE_ID_BYTES, len);
    return ncclInvalidArgument;
  }
  memcpy(&h, bytes, sizeof(h));
  char sub[160];
  if (wireParseAddr(&h.addr, sizeof(h.addr), &h.addr, sub, sizeof(sub)) != ncclSuccess) {
    snprintf(why, whyLen, "it holds no valid root address (%s)", sub);
    return ncclInvalidArgument;
  }
  *out = h;
  return ncclSuccess;
}

ncclResult_t wireCheckPeerInfo(const struct anycclPeerInfo* info, int n, char* why, size_t whyLen) {
  for (int i = 0; i < n; i++) {
    const struct anycclPeerInfo* p = &info[i];
    if (p->rank != i) {
      snprintf(why, whyLen, "entry %d says it is rank %d", i, p->rank);
      return ncclRemoteError;
    }
    if (memchr(p->busId, '\0', sizeof(p->busId)) == NULL || memchr(p->hostId, '\0', sizeof(p->hostId)) == NULL) {
      snprintf(why, whyLen, "rank %d's bus id or host id is not a terminated string", i);
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

void wireFifoGeometry(int nslotsIn, size_t buffIn, int* nslots, size_t* slotBytes) {
  int k = nslotsIn < 2 ? 2 : nslotsIn > ANYCCL_MAX_SLOTS ? ANYCCL_MAX_SLOTS : nslotsIn;
  size_t buff = buffIn;
  if (buff < (size_t)k * 4096) buff = (size_t)k * 4096;
  if (buff > ANYCCL_MAX_BUFFSIZE) buff = ANYCCL_MAX_BUFFSIZE;
  *nslots = k;
  *slotBytes = buff / k / 64 * 64;
}
