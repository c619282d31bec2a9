/* The one-sided layer's outside bytes (src/onesided). First byte mod 3:
 *   0  triggers as device code writes them into the proxy's FIFO
 *      (portTriggerDecode), against a service whose memories and channels
 *      come from the next bytes; an accepted put is copied, so ASan sees a
 *      copy that would leave either memory
 *   1  message headers from another host's proxy (portNetParseMsg): an
 *      accepted put is written at the pointer it gives, an accepted signal
 *      names one of the peer's semaphores
 *   2  a trigger made by anycclPortEncode from the input's fields decodes to
 *      the same fields (the producers' and the proxy's layouts agree)
 *   3  memory descriptions a peer sends through the bootstrap
 *      (portParseMemWire), from the peer of the next byte */
#include "fuzz.h"
#include "port.h"

#define FUZZ_MEMS 8
#define FUZZ_BIG (1ULL << 40) /* a memory with no bytes behind it: only the arithmetic is checked */

struct fuzzSvc {
  struct anycclProxyService s;
  struct portMem mems[FUZZ_MEMS];
  struct portChan chans[FUZZ_MEMS];
  struct portSem sems[FUZZ_MEMS];
  int real[FUZZ_MEMS]; /* bytes behind ptr */
};

static uint64_t fuzzU64(struct fuzzIn* in) {
  uint64_t v;
  fuzzTake(in, &v, sizeof(v));
  return v;
}

/* Memories: small ones are real buffers; others are FUZZ_BIG bytes, never touched. */
static void svcSetup(struct fuzzIn* in, struct fuzzSvc* f) {
  memset(f, 0, sizeof(*f));
  f->s.mems = f->mems;
  f->s.chans = f->chans;
  f->s.sems = f->sems;
  f->s.nMems = 1 + fuzzByte(in) % FUZZ_MEMS;
  for (int i = 0; i < f->s.nMems; i++) {
    unsigned b = fuzzByte(in), size = fuzzByte(in) * 17;
    f->mems[i].kind = (b & 3) == 3 ? MEM_NET : 1 + (b & 1); /* LOCAL, MAPPED or NET */
    f->mems[i].owner = 1;
    if (b & 4) {
      f->mems[i].size = FUZZ_BIG;
      f->mems[i].ptr = (char*)(uintptr_t)0x10000; /* never dereferenced */
    } else {
      f->real[i] = 1;
      f->mems[i].size = size;
      f->mems[i].ptr = malloc(size ? size : 1);
      FUZZ_CHECK(f->mems[i].ptr != NULL);
    }
  }
  f->s.nChans = fuzzByte(in) % (FUZZ_MEMS + 1);
  for (int i = 0; i < f->s.nChans; i++) /* as anycclPortChannelCreate makes them: known ids */
  {
    f->chans[i].sem = fuzzByte(in) % FUZZ_MEMS;
    f->chans[i].dst = fuzzByte(in) % f->s.nMems;
    f->chans[i].src = fuzzByte(in) % f->s.nMems;
  }
  f->s.nSems = fuzzByte(in) % (FUZZ_MEMS + 1);
  for (int i = 0; i < f->s.nSems; i++) f->sems[i] = (struct portSem){(int)(fuzzByte(in) % 4) - 1, i, 0, 0, 0};
}

static void svcFree(struct fuzzSvc* f) {
  for (int i = 0; i < f->s.nMems; i++)
    if (f->real[i]) free(f->mems[i].ptr);
}

static void triggers(struct fuzzIn* in) {
  struct fuzzSvc f;
  svcSetup(in, &f);
  while (in->n >= 16) {
    uint64_t w0 = fuzzU64(in), w1 = fuzzU64(in) & ~ANYCCL_TRIG_COMMIT;
    struct portTrigger t;
    const char* what = NULL;
    uint64_t value = 0, limit = 0;
    if (portTriggerDecode(&f.s, w0, w1, &t, &what, &value, &limit) != ncclSuccess) {
      FUZZ_CHECK(what != NULL && what[0] != '\0');
      continue;
    }
    FUZZ_CHECK(t.type != 0 && t.type <= 0xf);
    if (t.type & ANYCCL_TRIG_CUSTOM) continue;
    FUZZ_CHECK(t.chan < (uint32_t)f.s.nChans);
    if (!(t.type & ANYCCL_TRIG_PUT)) continue;
    const struct portMem* dst = &f.mems[f.chans[t.chan].dst];
    const struct portMem* src = &f.mems[f.chans[t.chan].src];
    FUZZ_CHECK(t.bytes <= ANYCCL_PORT_MAX_PUT);
    FUZZ_CHECK((unsigned __int128)t.srcOff + t.bytes <= src->size);
    FUZZ_CHECK((unsigned __int128)t.dstOff + t.bytes <= dst->size);
    if (f.real[f.chans[t.chan].dst] && f.real[f.chans[t.chan].src]) memmove(dst->ptr + t.dstOff, src->ptr + t.srcOff, t.bytes);
  }
  svcFree(&f);
}

static void messages(struct fuzzIn* in) {
  struct fuzzSvc f;
  svcSetup(in, &f);
  int peer = fuzzByte(in) % 4;
  while (in->n > 0) {
    unsigned g = fuzzByte(in);
    size_t got = g < 200 ? sizeof(struct portMsg) : g - 200; /* mostly whole headers */
    /* a received message of headers (a batch), perhaps with a put's data inline after the last */
    size_t batch = fuzzByte(in);
    batch = (batch | (size_t)fuzzByte(in) << 8) % (PORT_MSG_WORDS * sizeof(struct portMsg) + 2);
    struct portMsg bmsg[PORT_MSG_WORDS + 1];
    memset(bmsg, 0, sizeof(bmsg));
    fuzzTake(in, bmsg, batch);
    if (batch >= sizeof(struct portMsg) && fuzzByte(in) % 2) { /* mostly a well-formed inline put last */
      const size_t k = (batch - 1) / sizeof(struct portMsg) < PORT_BATCH ? (batch - 1) / sizeof(struct portMsg) : PORT_BATCH;
      if (k >= 1) {
        bmsg[k - 1].type = ANYCCL_TRIG_PUT | PORT_MSG_INLINE;
        bmsg[k - 1].size = batch - k * sizeof(struct portMsg);
      }
    }
    char bwhy[256] = "";
    size_t inl = 99;
    int nb = portNetBatchCount(bmsg, batch, &inl, bwhy, sizeof(bwhy));
    if (nb < 0) {
      FUZZ_CHECK(bwhy[0] != '\0');
    } else {
      FUZZ_CHECK(nb >= 1 && nb <= PORT_BATCH && (size_t)nb * sizeof(struct portMsg) + inl == batch && inl <= PORT_INLINE);
      for (int j = 0; j < nb; j++) /* only the last header may say its data follows, and it is a put of exactly that */
        FUZZ_CHECK(!(bmsg[j].type & PORT_MSG_INLINE) ||
                   (j == nb - 1 && bmsg[j].type == (ANYCCL_TRIG_PUT | PORT_MSG_INLINE) && bmsg[j].size == inl && inl > 0));
      if (inl == 0) FUZZ_CHECK(!(bmsg[nb - 1].type & PORT_MSG_INLINE));
    }
    uint8_t bytes[sizeof(struct portMsg)];
    fuzzTake(in, bytes, sizeof(bytes));
    struct portMsg m;
    char* ptr = (char*)1;
    int slot = -2;
    char why[256] = "";
    int kind = portNetParseMsg(&f.s, peer, bytes, got, &m, &ptr, &slot, why, sizeof(why));
    if (kind != PORT_MSG_BAD) FUZZ_CHECK(got == sizeof(struct portMsg)); /* a short header holds stale bytes */
    if (kind == PORT_MSG_PUT) {
      FUZZ_CHECK(m.type == ANYCCL_TRIG_PUT && m.id < (uint32_t)f.s.nMems && f.mems[m.id].kind == MEM_LOCAL);
      FUZZ_CHECK((unsigned __int128)m.off + m.size <= f.mems[m.id].size && ptr == f.mems[m.id].ptr + m.off);
      if (f.real[m.id]) memset(ptr, 0xab, m.size); /* the receive lands here */
    } else if (kind == PORT_MSG_SIGNAL) {
      FUZZ_CHECK(m.type == ANYCCL_TRIG_SIGNAL && slot >= 0 && slot < f.s.nSems && f.sems[slot].peer == peer);
    } else {
      FUZZ_CHECK(kind == PORT_MSG_DISCARD || kind == PORT_MSG_BAD);
      FUZZ_CHECK(why[0] != '\0' && ptr == NULL && slot == -1);
      /* a discarded put's bytes still come: the receive buffer grows to them */
      if (kind == PORT_MSG_DISCARD && m.type == ANYCCL_TRIG_PUT) FUZZ_CHECK(m.size <= ANYCCL_PORT_MAX_PUT);
      if (kind == PORT_MSG_BAD) break; /* the connection fails */
    }
  }
  svcFree(&f);
}

static void roundTrip(struct fuzzIn* in) {
  uint32_t type = 1 + fuzzByte(in) % 7; /* not custom */
  uint32_t chan = (uint32_t)fuzzU64(in) & 0xffff;
  uint64_t dstOff = fuzzU64(in) & ANYCCL_TRIG_OFF_MASK, srcOff = fuzzU64(in) & ANYCCL_TRIG_OFF_MASK;
  uint64_t bytes = fuzzU64(in) % (ANYCCL_PORT_MAX_PUT + 1);
  uint64_t w0, w1;
  anycclPortEncode(type, chan, dstOff, srcOff, bytes, &w0, &w1);
  FUZZ_CHECK(!(w1 & ANYCCL_TRIG_COMMIT));
  static struct portChan chans[65536]; /* every id known; both memories hold any put */
  static struct portMem mems[1] = {{MEM_LOCAL, 0, 0, NULL, 1ULL << 40, NULL}};
  struct anycclProxyService s;
  memset(&s, 0, sizeof(s));
  s.chans = chans;
  s.nChans = 65536;
  s.mems = mems;
  s.nMems = 1;
  struct portTrigger t;
  const char* what = NULL;
  uint64_t value, limit;
  FUZZ_CHECK(portTriggerDecode(&s, w0, w1, &t, &what, &value, &limit) == ncclSuccess);
  FUZZ_CHECK(t.type == type && t.chan == chan);
  if (type & ANYCCL_TRIG_PUT) FUZZ_CHECK(t.dstOff == dstOff && t.srcOff == srcOff && t.bytes == bytes);
}

static void memWires(struct fuzzIn* in) {
  int peer = (int)(fuzzByte(in) % 4);
  while (in->n > 0) {
    unsigned cut = fuzzByte(in);
    size_t len = cut < 250 ? sizeof(struct memWire) : cut - 250;
    uint8_t bytes[sizeof(struct memWire)];
    fuzzTake(in, bytes, sizeof(bytes));
    struct memWire w;
    char why[200] = "";
    ncclResult_t r = portParseMemWire(bytes, len, peer, &w, why, sizeof(why));
    if (r != ncclSuccess) {
      FUZZ_CHECK((r == ncclInvalidArgument || r == ncclRemoteError) && why[0] != '\0');
      continue;
    }
    /* a put's checks add offsets below 2^37 to this size: no overflow */
    FUZZ_CHECK(w.owner == peer && w.id >= 0 && w.size >= 1 && w.size < ANYCCL_PORT_MAX_OFFSET &&
               w.off < ANYCCL_PORT_MAX_OFFSET);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {data, size};
  switch (fuzzByte(&in) % 4) {
  case 0: triggers(&in); break;
  case 1: messages(&in); break;
  case 2: roundTrip(&in); break;
  default: memWires(&in); break;
  }
  return 0;
}
