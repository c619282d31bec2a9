/* Topology XML as NCCL_TOPO_FILE gives it (src/topo: xml.c, model.c,
 * hosts.c, paths.c, rings.c), parsed from memory. Input: one flag byte
 * (bit 0: a per-host file; bits 1-2: channels - 1), NCCL_HOSTID up to a NUL,
 * then the XML. A topology that loads must:
 *   - write back (NCCL's XML) as text that loads again to an equal tree,
 *   - give rings over its GPUs that visit every rank once per channel,
 *   - narrow to the host NCCL_HOSTID names (as init does) and give rings there. */
#include "fuzz.h"
#include "topo.h"

#define MAX_FUZZ_RANKS 64

static void checkRings(const struct anycclTopo* topo, int nChannels) {
  int nHosts = topo->nHosts > 8 ? 8 : topo->nHosts;
  const struct anycclTopoHost* hosts[8];
  struct anycclTopoRank ranks[MAX_FUZZ_RANKS];
  int n = 0;
  for (int h = 0; h < nHosts; h++) {
    hosts[h] = &topo->hosts[h];
    for (int g = 0; g < topo->hosts[h].nGpus && n < MAX_FUZZ_RANKS - 1; g++) {
      ranks[n].host = h;
      snprintf(ranks[n].busId, sizeof(ranks[n].busId), "%s", topo->hosts[h].gpus[g].busId);
      n++;
    }
  }
  if (nHosts > 0) { /* a rank whose GPU the file does not list */
    ranks[n].host = nHosts - 1;
    snprintf(ranks[n].busId, sizeof(ranks[n].busId), "0000:ee:00.0");
    n++;
  }
  if (n == 0) return;
  struct anycclTopoRings* rings = NULL;
  if (anycclTopoBuildRings(hosts, nHosts, ranks, n, nChannels, &rings) != ncclSuccess) return;
  FUZZ_CHECK(rings->nRanks == n && rings->nChannels == nChannels);
  for (int c = 0; c < nChannels; c++) {
    char seen[MAX_FUZZ_RANKS] = {0};
    for (int i = 0; i < n; i++) {
      int r = rings->order[c * n + i];
      FUZZ_CHECK(r >= 0 && r < n && !seen[r]);
      seen[r] = 1;
    }
    for (int h = 0; h < nHosts; h++) {
      int nic = rings->nic[c * nHosts + h];
      FUZZ_CHECK(nic >= -1 && nic < topo->hosts[h].nNets);
    }
  }
  anycclTopoRingsFree(rings);
}

static void roundTrip(const struct anycclTopo* topo) {
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  FUZZ_CHECK(f != NULL);
  FUZZ_CHECK(anycclTopoWrite(topo, -1, f) == ncclSuccess);
  fclose(f);
  struct anycclTopo* again = NULL;
  char err[ANYCCL_TOPO_ERR_LEN] = "", why[512] = "";
  if (anycclTopoParse(text, len, "written", &again, err, sizeof(err)) != ncclSuccess) {
    fprintf(stderr, "the written topology does not load: %s\n%s\n", err, text);
    FUZZ_CHECK(!"written topology loads");
  }
  if (!anycclTopoEqual(topo, again, why, sizeof(why))) {
    fprintf(stderr, "the written topology differs: %s\n%s\n", why, text);
    FUZZ_CHECK(!"written topology is equal");
  }
  anycclTopoFree(again);
  free(text);
  /* DOT output of every host, to nowhere */
  f = open_memstream(&text, &len);
  FUZZ_CHECK(f != NULL);
  anycclTopoWriteDot(topo, -1, f);
  fclose(f);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {data, size};
  unsigned flags = fuzzByte(&in);
  int perHost = flags & 1, nChannels = 1 + ((flags >> 1) & 3);
  char hostId[72];
  fuzzString(&in, hostId, sizeof(hostId));
  struct anycclTopo* topo = NULL;
  char err[ANYCCL_TOPO_ERR_LEN] = "";
  if (anycclTopoParse((const char*)in.p, in.n, "fuzz.xml", &topo, err, sizeof(err)) != ncclSuccess) {
    FUZZ_CHECK(err[0] != '\0' && strlen(err) < sizeof(err));
    return 0;
  }
  FUZZ_CHECK(topo->nHosts >= 1);
  roundTrip(topo);
  checkRings(topo, nChannels);
  err[0] = '\0';
  if (anycclTopoKeepHost(topo, hostId[0] ? hostId : NULL, perHost, err, sizeof(err)) == ncclSuccess) {
    FUZZ_CHECK(topo->nHosts == 1);
    checkRings(topo, nChannels);
  } else {
    FUZZ_CHECK(err[0] != '\0');
  }
  anycclTopoFree(topo);
  return 0;
}
