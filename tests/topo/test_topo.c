/* Topology tests. One binary, one case per argument:
 *   shipped roundtrip nccldump malformed hostfile rings detect getsystem
 * TOPO_SOURCE_DIR is the source tree (for topologies/ and tests/topo/data/). */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "topo.h"

#define CHECK(cond)                                                                    \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);                \
      fflush(stderr);                                                                  \
      _exit(1);                                                                        \
    }                                                                                  \
  } while (0)
#define CHECKOK(call)                                                                  \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) {                                                           \
      fprintf(stderr, "FAILED %s:%d: %s returned %d\n", __FILE__, __LINE__, #call, r_); \
      _exit(1);                                                                        \
    }                                                                                  \
  } while (0)

static char tmpDir[256];
static char pathBuf[8][1024];
static int pathNext;

/* A path in the source tree (rotating static buffers). */
static const char* src(const char* rel) {
  char* p = pathBuf[pathNext++ % 8];
  snprintf(p, 1024, "%s/%s", TOPO_SOURCE_DIR, rel);
  return p;
}

static void makeTmp(void) {
  snprintf(tmpDir, sizeof(tmpDir), "/tmp/anyccl-topo-test.XXXXXX");
  CHECK(mkdtemp(tmpDir) != NULL);
}
static void rmTmp(void) {
  char cmd[400];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpDir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpDir);
}
static const char* writeTmp(const char* name, const char* text) {
  char* p = pathBuf[pathNext++ % 8];
  snprintf(p, 1024, "%s/%s", tmpDir, name);
  FILE* f = fopen(p, "w");
  CHECK(f != NULL);
  fputs(text, f);
  CHECK(fclose(f) == 0);
  return p;
}

static struct anycclTopo* load(const char* path) {
  char err[ANYCCL_TOPO_ERR_LEN] = "";
  struct anycclTopo* t = NULL;
  if (anycclTopoLoad(path, &t, err, sizeof(err)) != ncclSuccess) {
    fprintf(stderr, "FAILED loading %s: %s\n", path, err);
    _exit(1);
  }
  return t;
}

static const char* shipped[] = {"dgx8_nvswitch.xml", "a3high.xml", "2node_16gpu.xml", "2node_16gpu_node0.xml",
                                "2node_16gpu_node1.xml", "4node_32gpu.xml"};
#define NSHIPPED (int)(sizeof(shipped) / sizeof(shipped[0]))

/* ---- every shipped file loads, with the expected shape and paths ---------------- */
static int caseShipped(void) {
  static const struct { const char* file; int hosts, gpus, nets; } want[] = {
      {"dgx8_nvswitch.xml", 1, 8, 8}, {"a3high.xml", 1, 8, 4}, {"2node_16gpu.xml", 2, 8, 8},
      {"2node_16gpu_node0.xml", 1, 8, 8}, {"2node_16gpu_node1.xml", 1, 8, 8}, {"4node_32gpu.xml", 4, 8, 4}};
  for (int i = 0; i < NSHIPPED; i++) {
    char rel[256];
    snprintf(rel, sizeof(rel), "topologies/%s", want[i].file);
    struct anycclTopo* t = load(src(rel));
    CHECK(t->nHosts == want[i].hosts);
    for (int h = 0; h < t->nHosts; h++) {
      CHECK(t->hosts[h].nGpus == want[i].gpus);
      CHECK(t->hosts[h].nNets == want[i].nets);
      CHECK(t->hosts[h].nCpus == 2);
      for (int a = 0; a < t->hosts[h].nGpus; a++)
        for (int b = 0; b < t->hosts[h].nGpus; b++)
          if (a != b) CHECK(anycclTopoGpuPath(t->hosts + h, a, b).type == TOPO_PATH_NVL);
    }
    anycclTopoFree(t);
  }
  /* A3-high: 2 GPUs per NIC, PIX; the other NIC on the socket PHB, the far ones SYS. */
  struct anycclTopo* t = load(src("topologies/a3high.xml"));
  const struct anycclTopoHost* h = t->hosts;
  for (int g = 0; g < 8; g++)
    for (int n = 0; n < 4; n++) {
      struct anycclTopoPath p = anycclTopoNetPath(h, g, n);
      int want = n == g / 2 ? TOPO_PATH_PIX : (n / 2 == g / 4 ? TOPO_PATH_PHB : TOPO_PATH_SYS);
      CHECK(p.type == want);
    }
  CHECK(anycclTopoGpuPath(h, 0, 7).bw > 370 && anycclTopoGpuPath(h, 0, 7).bw < 371); /* 18 x 20.6 GB/s */
  CHECK(anycclTopoNetPath(h, 0, 0).bw == 25.0f);                                     /* 200 Gb/s */
  CHECK(anycclTopoPathTransport(anycclTopoNetPath(h, 0, 2).type) == TOPO_TRANSPORT_SHM);
  anycclTopoFree(t);
  /* DGX-like: 6 NVSwitches x 2 links x 20 GB/s; AMD inter-socket 16 GB/s. */
  t = load(src("topologies/dgx8_nvswitch.xml"));
  h = t->hosts;
  CHECK(anycclTopoGpuPath(h, 0, 5).bw == 240.0f);
  CHECK(anycclTopoNetPath(h, 0, 0).type == TOPO_PATH_PIX && anycclTopoNetPath(h, 0, 1).type == TOPO_PATH_PIX);
  CHECK(anycclTopoNetPath(h, 0, 2).type == TOPO_PATH_PHB);
  CHECK(anycclTopoNetPath(h, 0, 4).type == TOPO_PATH_SYS && anycclTopoNetPath(h, 0, 4).bw == 16.0f);
  CHECK(anycclTopoFindGpu(h, "0000:4E:00.0") == 3);
  anycclTopoFree(t);
  printf("shipped: OK\n");
  return 0;
}

/* ---- load -> write -> load gives the same tree ---------------------------------- */
static void roundtrip(const char* path, int host, const char* expectPath) {
  struct anycclTopo* a = load(path);
  char out[512];
  snprintf(out, sizeof(out), "%s/rt.xml", tmpDir);
  CHECKOK(anycclTopoWriteFile(a, host, out));
  struct anycclTopo* b = load(out);
  struct anycclTopo* c = expectPath ? load(expectPath) : a;
  char why[512];
  if (!anycclTopoEqual(c, b, why, sizeof(why))) {
    fprintf(stderr, "FAILED round trip of %s (host %d): %s\n", path, host, why);
    _exit(1);
  }
  /* and the text is stable: writing the reloaded tree gives the same bytes */
  char out2[512];
  snprintf(out2, sizeof(out2), "%s/rt2.xml", tmpDir);
  CHECKOK(anycclTopoWriteFile(b, -1, out2));
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", out, out2);
  CHECK(system(cmd) == 0);
  if (c != a) anycclTopoFree(c);
  anycclTopoFree(a);
  anycclTopoFree(b);
}

static int caseRoundtrip(void) {
  makeTmp();
  for (int i = 0; i < NSHIPPED; i++) {
    char rel[256];
    snprintf(rel, sizeof(rel), "topologies/%s", shipped[i]);
    roundtrip(src(rel), -1, NULL);
  }
  roundtrip(src("tests/topo/data/nccl_dump_dgxh100.xml"), -1, NULL);
  roundtrip(src("tests/topo/data/nccl_dump_vm.xml"), -1, NULL);
  roundtrip(src("tests/topo/data/detected_h200x2.xml"), -1, NULL);
  /* one host of the multi-host file is the per-host file */
  roundtrip(src("topologies/2node_16gpu.xml"), 0, src("topologies/2node_16gpu_node0.xml"));
  roundtrip(src("topologies/2node_16gpu.xml"), 1, src("topologies/2node_16gpu_node1.xml"));
  /* special characters survive */
  const char* esc = writeTmp("esc.xml",
                             "<system version=\"1\" name=\"a&amp;b &lt;c&gt; &quot;d&quot;\">\n"
                             "  <cpu numaid=\"0\" arch=\"arm64\"/>\n</system>\n");
  roundtrip(esc, -1, NULL);
  struct anycclTopo* t = load(esc);
  CHECK(strcmp(anycclTopoGetAttr(t->root, "name"), "a&b <c> \"d\"") == 0);
  anycclTopoFree(t);
  rmTmp();
  printf("roundtrip: OK\n");
  return 0;
}

/* ---- files as NCCL dumps them ------------------------------------------------------ */
static int caseNcclDump(void) {
  struct anycclTopo* t = load(src("tests/topo/data/nccl_dump_dgxh100.xml"));
  CHECK(t->nHosts == 1);
  const struct anycclTopoHost* h = t->hosts;
  CHECK(h->nGpus == 8 && h->nNets == 9 && h->nCpus == 2);
  CHECK(h->hostHash == 0x16fe256e956b115cULL);
  CHECK(strcmp(h->gpus[1].busId, "0000:2a:00.0") == 0 && h->gpus[1].node->gpu.dev == 1);
  CHECK(h->gpus[0].nvsBw > 370 && h->gpus[0].nvsBw < 371); /* 5+5+4+4 links */
  CHECK(strcmp(h->nets[8].node->net.name, "eno1") == 0 && h->nets[8].pci == NULL);
  for (int g = 0; g < 8; g++) {
    CHECK(anycclTopoNetPath(h, g, g).type == TOPO_PATH_PIX); /* mlx5_g shares GPU g's switch */
    CHECK(anycclTopoNetPath(h, g, g).bw == 48.0f);           /* Gen5 x16 */
    CHECK(anycclTopoNetPath(h, g, 8).type == (g < 4 ? TOPO_PATH_PHB : TOPO_PATH_SYS));
  }
  CHECK(anycclTopoNetPath(h, 0, 1).type == TOPO_PATH_PHB);
  CHECK(anycclTopoGpuPath(h, 0, 4).type == TOPO_PATH_NVL);
  /* attributes NCCL adds in newer versions are kept */
  CHECK(strcmp(anycclTopoGetAttr(h->nets[0].node, "gin"), "0") == 0);
  anycclTopoFree(t);
  t = load(src("tests/topo/data/nccl_dump_vm.xml"));
  h = t->hosts;
  CHECK(h->nGpus == 2 && h->nNets == 2 && h->cpus[0]->cpu.numaId == -1);
  CHECK(anycclTopoGpuPath(h, 0, 1).type == TOPO_PATH_NVL);   /* through the hidden NVSwitch */
  CHECK(anycclTopoNetPath(h, 0, 0).type == TOPO_PATH_PHB);
  CHECK(anycclTopoNetPath(h, 0, 0).bw == 12.0f);             /* NIC link speed unknown: counted as Gen3 x16 */
  CHECK(h->nets[1].bw == 1.25f);                             /* speed -1: 10 Gb/s */
  anycclTopoFree(t);
  /* what our detection wrote on a 2 x H200 VM (NVML, NVSwitch hidden) */
  t = load(src("tests/topo/data/detected_h200x2.xml"));
  h = t->hosts;
  CHECK(h->nGpus == 2 && h->nNets == 1 && anycclTopoGpuPath(h, 0, 1).type == TOPO_PATH_NVL);
  CHECK(h->gpus[1].nvsBw > 370 && h->gpus[1].nvsBw < 371);
  anycclTopoFree(t);
  printf("nccldump: OK\n");
  return 0;
}

/* ---- malformed files: the exact error ---------------------------------------------- */
#define CPU0 "  <cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\">\n"
#define PCIA(bus) "    <pci busid=\"0000:" bus ":00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">\n"
static const struct {
  const char* name;
  const char* text;
  const char* error; /* after "<file>:" */
} bad[] = {
    {"syntax", "<system version=\"1\">\n" CPU0 "  </pci>\n</system>\n", "3:5: XML syntax error: mismatched tag"},
    {"empty", "", "1:1: XML syntax error: no element found"},
    {"unclosed", "<system version=\"1\">\n" CPU0, "3:1: XML syntax error: no element found"},
    {"unknown_element", "<system version=\"1\">\n" CPU0 PCIA("17") "      <gpux dev=\"0\"/>\n    </pci>\n  </cpu>\n</system>\n",
     "4: unknown element <gpux> inside <pci>; expected <pci>, <pcilink>, <gpu> or <nic>"},
    {"unknown_root", "<topology/>\n", "1: unknown element <topology> at the top of the file; expected <cluster> or <system>"},
    {"misplaced", "<system version=\"1\">\n" CPU0 "    <gpu dev=\"0\" sm=\"80\"/>\n  </cpu>\n</system>\n",
     "3: <gpu> is not allowed inside <cpu>; expected <pci> or <nic>"},
    {"missing_attr", "<system version=\"1\">\n" CPU0 "    <pci busid=\"0000:17:00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\">\n    </pci>\n  </cpu>\n</system>\n",
     "3: <pci> is missing attribute \"link_width\" (the number of PCIe lanes, such as 16)"},
    {"missing_version", "<system>\n</system>\n", "1: <system> is missing attribute \"version\" (NCCL's topology format version, 1)"},
    {"bad_version", "<system version=\"2\">\n</system>\n", "1: <system> attribute \"version\": expected 1 (NCCL's topology format version), got \"2\""},
    {"bad_number", "<system version=\"1\">\n" CPU0 PCIA("17") "      <gpu dev=\"0\" sm=\"9x0\"/>\n    </pci>\n  </cpu>\n</system>\n",
     "4: <gpu> attribute \"sm\": expected an integer in 10..10000, got \"9x0\""},
    {"negative_dev", "<system version=\"1\">\n" CPU0 PCIA("17") "      <gpu dev=\"-2\" sm=\"90\"/>\n    </pci>\n  </cpu>\n</system>\n",
     "4: <gpu> attribute \"dev\": expected an integer (0 or more), got \"-2\""},
    {"bad_busid", "<system version=\"1\">\n" CPU0 PCIA("zz") "    </pci>\n  </cpu>\n</system>\n",
     "3: <pci> attribute \"busid\": expected a PCI bus id such as \"0000:17:00.0\", got \"0000:zz:00.0\""},
    {"bad_target", "<system version=\"1\">\n" CPU0 PCIA("17") "      <gpu dev=\"0\" sm=\"90\">\n        <nvlink target=\"0000:17:00\" count=\"2\" tclass=\"0x068000\"/>\n      </gpu>\n    </pci>\n  </cpu>\n</system>\n",
     "5: <nvlink> attribute \"target\": expected a PCI bus id such as \"0000:17:00.0\", got \"0000:17:00\""},
    {"bad_speed", "<system version=\"1\">\n" CPU0 "    <pci busid=\"0000:17:00.0\" class=\"0x030200\" link_speed=\"fast\" link_width=\"16\"/>\n  </cpu>\n</system>\n",
     "3: <pci> attribute \"link_speed\": expected a PCIe link speed such as \"16.0 GT/s PCIe\" or \"8 GT/s\" (empty: unknown), got \"fast\""},
    {"bad_class", "<system version=\"1\">\n" CPU0 "    <pci busid=\"0000:17:00.0\" class=\"gpu\" link_speed=\"\" link_width=\"\"/>\n  </cpu>\n</system>\n",
     "3: <pci> attribute \"class\": expected a PCI class such as \"0x060400\", got \"gpu\""},
    {"bad_arch", "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"sparc\"/>\n</system>\n",
     "2: <cpu> attribute \"arch\": expected one of x86_64, arm64, ppc64, got \"sparc\""},
    {"missing_vendor", "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"x86_64\"/>\n</system>\n",
     "2: <cpu> is missing attribute \"vendor\" (the CPU vendor id, such as GenuineIntel or AuthenticAMD; required on x86_64)"},
    {"bad_affinity", "<system version=\"1\">\n  <cpu numaid=\"0\" affinity=\"ff,,ff\" arch=\"arm64\"/>\n</system>\n",
     "2: <cpu> attribute \"affinity\": expected a CPU mask such as \"00000000,00ffffff\", got \"ff,,ff\""},
    {"bad_latency", "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"arm64\">\n    <nic>\n      <net name=\"eth0\" dev=\"0\" latency=\"soon\"/>\n    </nic>\n  </cpu>\n</system>\n",
     "4: <net> attribute \"latency\": expected a number of microseconds, such as \"0.000000\", got \"soon\""},
    {"missing_name", "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"arm64\">\n    <nic>\n      <net dev=\"0\"/>\n    </nic>\n  </cpu>\n</system>\n",
     "4: <net> is missing attribute \"name\" (the network device name, such as mlx5_0 or eth0)"},
    {"text", "<system version=\"1\">\n  hello\n</system>\n",
     "2: unexpected text \"hello\" inside <system>; topology elements hold only attributes and elements"},
    {"duplicate_busid", "<system version=\"1\">\n" CPU0 PCIA("17") "    </pci>\n" PCIA("17") "    </pci>\n  </cpu>\n</system>\n",
     "5: <pci> attribute \"busid\": expected a bus id unique on host 0, got \"0000:17:00.0\" again (first at line 3)"},
    {"duplicate_net", "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"arm64\">\n    <nic>\n      <net name=\"a\" dev=\"0\"/>\n      <net name=\"b\" dev=\"0\"/>\n    </nic>\n  </cpu>\n</system>\n",
     "5: <net> attribute \"dev\": expected a device number unique on host 0, got \"0\" again (first at line 4)"},
    {"empty_cluster", "<cluster>\n</cluster>\n", "1: <cluster> holds no <system>"},
};

static int caseMalformed(void) {
  makeTmp();
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char name[64];
    snprintf(name, sizeof(name), "%s.xml", bad[i].name);
    const char* path = writeTmp(name, bad[i].text);
    char err[ANYCCL_TOPO_ERR_LEN] = "", want[ANYCCL_TOPO_ERR_LEN];
    struct anycclTopo* t = NULL;
    ncclResult_t res = anycclTopoLoad(path, &t, err, sizeof(err));
    snprintf(want, sizeof(want), "%s:%s", path, bad[i].error);
    if (res == ncclSuccess || strcmp(err, want) != 0) {
      fprintf(stderr, "FAILED %s: result %d\n  got:  %s\n  want: %s\n", bad[i].name, res, err, want);
      _exit(1);
    }
    CHECK(t == NULL);
  }
  /* a file that is not there */
  char err[ANYCCL_TOPO_ERR_LEN] = "";
  struct anycclTopo* t = NULL;
  CHECK(anycclTopoLoad("/nonexistent/topo.xml", &t, err, sizeof(err)) != ncclSuccess);
  CHECK(strcmp(err, "/nonexistent/topo.xml: cannot open the topology file: No such file or directory") == 0);
  /* without an error buffer the error is a WARN, and the last error */
  CHECK(anycclTopoLoad(writeTmp("w.xml", "<system version=\"3\"/>"), &t, NULL, 0) == ncclInvalidUsage);
  rmTmp();
  printf("malformed: OK (%zu files)\n", sizeof(bad) / sizeof(bad[0]));
  return 0;
}

/* ---- virtual hosts: per-host files, host selection, bus id domains ------------------ */
static int caseHostfile(void) {
  char out[1024];
  const char* base = src("topologies/2node_16gpu.xml");
  anycclTopoHostFile(base, "1", out, sizeof(out));
  CHECK(strcmp(out, src("topologies/2node_16gpu_node1.xml")) == 0);
  anycclTopoHostFile(base, "01", out, sizeof(out));
  CHECK(strcmp(out, src("topologies/2node_16gpu_node1.xml")) == 0);
  anycclTopoHostFile(base, "7", out, sizeof(out));
  CHECK(strcmp(out, base) == 0);
  anycclTopoHostFile(base, NULL, out, sizeof(out));
  CHECK(strcmp(out, base) == 0);

  char err[ANYCCL_TOPO_ERR_LEN] = "";
  struct anycclTopo* t;
  /* per-host file */
  CHECKOK(anycclTopoLoadHost(base, "1", &t, err, sizeof(err)));
  CHECK(t->nHosts == 1 && strcmp(t->hosts[0].gpus[0].busId, "0001:07:00.0") == 0);
  CHECK(strcmp(t->hosts[0].name, "1") == 0 && t->hosts[0].hostHash == anycclTopoHostHash("1"));
  anycclTopoFree(t);
  /* host H of a multi-host file */
  CHECKOK(anycclTopoLoadHost(src("topologies/4node_32gpu.xml"), "2", &t, err, sizeof(err)));
  CHECK(t->nHosts == 1 && t->hosts[0].nGpus == 8 && strcmp(t->hosts[0].gpus[7].busId, "0002:8b:00.0") == 0);
  anycclTopoFree(t);
  CHECK(anycclTopoLoadHost(src("topologies/4node_32gpu.xml"), "9", &t, err, sizeof(err)) != ncclSuccess);
  char want[1200];
  snprintf(want, sizeof(want), "%s describes hosts 0..3; there is no host 9 (NCCL_HOSTID=9)", src("topologies/4node_32gpu.xml"));
  CHECK(strcmp(err, want) == 0);
  /* the multi-host file alone gives the same host as the per-host file */
  makeTmp();
  char cmd[2400];
  snprintf(cmd, sizeof(cmd), "cp '%s' '%s/alone.xml'", base, tmpDir);
  CHECK(system(cmd) == 0);
  snprintf(out, sizeof(out), "%s/alone.xml", tmpDir);
  CHECKOK(anycclTopoLoadHost(out, "1", &t, err, sizeof(err)));
  struct anycclTopo* node1 = load(src("topologies/2node_16gpu_node1.xml"));
  CHECK(anycclTopoEqual(t, node1, NULL, 0));
  anycclTopoFree(node1);
  anycclTopoFree(t);
  /* a one-host file serves every host id; bus ids move to the host's domain */
  CHECKOK(anycclTopoLoadHost(src("topologies/a3high.xml"), "3", &t, err, sizeof(err)));
  CHECK(strcmp(t->hosts[0].gpus[0].busId, "0003:04:00.0") == 0);
  CHECK(strcmp(anycclTopoGetAttr(t->hosts[0].gpus[0].pci->parent, "busid"), "0003:03:00.0") == 0);
  anycclTopoFree(t);
  CHECKOK(anycclTopoLoadHost(src("topologies/dgx8_nvswitch.xml"), "nodeA", &t, err, sizeof(err)));
  char dom[8];
  snprintf(dom, sizeof(dom), "%04x:", anycclTopoHostDomain("nodeA"));
  CHECK(strncmp(t->hosts[0].gpus[0].busId, dom, 5) == 0 && anycclTopoHostDomain("nodeA") != 0);
  CHECK(anycclTopoGpuPath(t->hosts, 0, 1).type == TOPO_PATH_NVL); /* NVSwitch targets moved too */
  anycclTopoFree(t);
  CHECKOK(anycclTopoLoadHost(src("topologies/a3high.xml"), "0", &t, err, sizeof(err)));
  CHECK(strcmp(t->hosts[0].gpus[0].busId, "0000:04:00.0") == 0);
  anycclTopoFree(t);
  /* named hosts; NCCL's fused form (one <system>, CPUs of several hosts) */
  const char* named = writeTmp("named.xml",
                               "<cluster>\n  <system version=\"1\" hostid=\"alpha\">\n    <cpu numaid=\"0\" arch=\"arm64\"/>\n  </system>\n"
                               "  <system version=\"1\" hostid=\"beta\">\n    <cpu numaid=\"0\" arch=\"ppc64\"/>\n  </system>\n</cluster>\n");
  t = load(named);
  CHECK(t->nHosts == 2 && anycclTopoSelectHost(t, "beta", NULL, 0) == 1 && anycclTopoSelectHost(t, "alpha", NULL, 0) == 0);
  CHECK(anycclTopoSelectHost(t, "1", NULL, 0) == 1);
  int g = anycclTopoSelectHost(t, "gamma", NULL, 0);
  CHECK(g == (int)(anycclTopoHostHash("gamma") % 2));
  anycclTopoFree(t);
  char fused[512];
  snprintf(fused, sizeof(fused),
           "<system version=\"1\">\n  <cpu host_hash=\"0x%llx\" numaid=\"0\" arch=\"arm64\"/>\n"
           "  <cpu host_hash=\"0x%llx\" numaid=\"0\" arch=\"arm64\"/>\n</system>\n",
           (unsigned long long)anycclTopoHostHash("x"), (unsigned long long)anycclTopoHostHash("y"));
  t = load(writeTmp("fused.xml", fused));
  CHECK(t->nHosts == 2 && t->hosts[1].nCpus == 1 && anycclTopoSelectHost(t, "y", NULL, 0) == 1);
  FILE* f = fopen(out, "w");
  CHECK(f && anycclTopoWrite(t, 1, f) == ncclSuccess && fclose(f) == 0);
  struct anycclTopo* one = load(out);
  CHECK(one->nHosts == 1 && one->hosts[0].hostHash == anycclTopoHostHash("y"));
  anycclTopoFree(one);
  anycclTopoFree(t);
  /* the list anyccl-cpu asks for */
  char ids[16][ANYCCL_TOPO_BUSID_LEN];
  int n = 0;
  CHECKOK(anycclTopoListGpus(base, "1", &n, ids, 16));
  CHECK(n == 8 && strcmp(ids[0], "0001:07:00.0") == 0 && strcmp(ids[7], "0001:bd:00.0") == 0);
  CHECKOK(anycclTopoListGpus(src("topologies/a3high.xml"), NULL, &n, NULL, 0));
  CHECK(n == 8);
  /* host hash: what init uses (FNV-1a 64 of "hostid:" + id) */
  CHECK(anycclTopoHostHash("0") != anycclTopoHostHash("1"));
  CHECK(anycclTopoHostDomain("12") == 12 && anycclTopoHostDomain(NULL) == 0);
  rmTmp();
  printf("hostfile: OK\n");
  return 0;
}

/* ---- rings ----------------------------------------------------------------------- */
struct ringSetup {
  int nHosts, nRanks;
  struct anycclTopo* topos[8];
  const struct anycclTopoHost* hosts[8];
  struct anycclTopoRank ranks[64];
};

static void setupHosts(struct ringSetup* s, const char* file, int nHosts, int gpusPerHost, int interleave) {
  memset(s, 0, sizeof(*s));
  s->nHosts = nHosts;
  s->nRanks = nHosts * gpusPerHost;
  for (int h = 0; h < nHosts; h++) {
    char id[8], err[ANYCCL_TOPO_ERR_LEN] = "";
    snprintf(id, sizeof(id), "%d", h);
    if (anycclTopoLoadHost(file, id, &s->topos[h], err, sizeof(err)) != ncclSuccess) {
      fprintf(stderr, "FAILED: %s\n", err);
      _exit(1);
    }
    s->hosts[h] = s->topos[h]->hosts;
  }
  for (int r = 0; r < s->nRanks; r++) {
    int h = interleave ? r % nHosts : r / gpusPerHost, g = interleave ? r / nHosts : r % gpusPerHost;
    s->ranks[r].host = h;
    snprintf(s->ranks[r].busId, ANYCCL_TOPO_BUSID_LEN, "%s", s->hosts[h]->gpus[g].busId);
  }
}

static void freeHosts(struct ringSetup* s) {
  for (int h = 0; h < s->nHosts; h++) anycclTopoFree(s->topos[h]);
}

/* The invariants every ring set must satisfy; returns the rings for more checks. */
static struct anycclTopoRings* checkRings(struct ringSetup* s, int nChannels) {
  struct anycclTopoRings* r;
  CHECKOK(anycclTopoBuildRings(s->hosts, s->nHosts, s->ranks, s->nRanks, nChannels, &r));
  int n = s->nRanks;
  for (int c = 0; c < nChannels; c++) {
    const int* o = r->order + c * n;
    int seen[64] = {0}, crossings = 0, hostSeen[8] = {0};
    for (int i = 0; i < n; i++) { /* a permutation */
      CHECK(o[i] >= 0 && o[i] < n && !seen[o[i]]);
      seen[o[i]] = 1;
    }
    for (int i = 0; i < n; i++) {
      int a = o[i], b = o[(i + 1) % n], ha = s->ranks[a].host, hb = s->ranks[b].host;
      if (ha != hb) {
        crossings++;
        CHECK(!hostSeen[hb]); /* each host entered once: its ranks are contiguous */
        hostSeen[hb] = 1;
        int nic = r->nic[c * s->nHosts + ha];
        CHECK(s->hosts[ha] == NULL ? nic == -1 : (nic >= 0 && nic < s->hosts[ha]->nNets));
      } else if (n > 1 && s->hosts[ha]) {
        CHECK(anycclTopoGpuPath(s->hosts[ha], r->gpu[a], r->gpu[b]).type <= TOPO_PATH_NVL || s->hosts[ha]->gpus[0].nvsBw == 0);
      }
    }
    CHECK(crossings == (s->nHosts > 1 ? s->nHosts : 0));
  }
  return r;
}

/* The NIC of channel c on host h is closest (PIX) to the GPUs where the ring enters and leaves. */
static void checkEnds(struct ringSetup* s, struct anycclTopoRings* r, int c) {
  int n = s->nRanks;
  for (int i = 0; i < n; i++) {
    int a = r->order[c * n + i], b = r->order[c * n + (i + 1) % n];
    if (s->ranks[a].host == s->ranks[b].host) continue;
    int ha = s->ranks[a].host, hb = s->ranks[b].host;
    CHECK(anycclTopoNetPath(s->hosts[ha], r->gpu[a], r->nic[c * s->nHosts + ha]).type == TOPO_PATH_PIX);
    CHECK(anycclTopoNetPath(s->hosts[hb], r->gpu[b], r->nic[c * s->nHosts + hb]).type == TOPO_PATH_PIX);
  }
}

static int distinctNics(struct anycclTopoRings* r, int h, int nChannels) {
  int used[64] = {0}, k = 0;
  for (int c = 0; c < nChannels; c++) {
    int nic = r->nic[c * r->nHosts + h];
    if (nic >= 0 && !used[nic]) used[nic] = 1, k++;
  }
  return k;
}

static const char* pcieOnly =
    "<system version=\"1\">\n"
    "  <cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"85\">\n"
    "    <pci busid=\"0000:10:00.0\" class=\"0x060400\" link_speed=\"8.0 GT/s PCIe\" link_width=\"16\">\n"
    "      <pci busid=\"0000:11:00.0\" class=\"0x030200\" link_speed=\"8.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"0\" sm=\"70\"/></pci>\n"
    "      <pci busid=\"0000:12:00.0\" class=\"0x030200\" link_speed=\"8.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"1\" sm=\"70\"/></pci>\n"
    "    </pci>\n"
    "    <pci busid=\"0000:20:00.0\" class=\"0x060400\" link_speed=\"8.0 GT/s PCIe\" link_width=\"16\">\n"
    "      <pci busid=\"0000:21:00.0\" class=\"0x030200\" link_speed=\"8.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"2\" sm=\"70\"/></pci>\n"
    "      <pci busid=\"0000:22:00.0\" class=\"0x030200\" link_speed=\"8.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"3\" sm=\"70\"/></pci>\n"
    "    </pci>\n"
    "  </cpu>\n"
    "</system>\n";

/* DGX-1-like hybrid cube mesh: two fully connected quads, and i <-> i+4. Listed so that
 * ascending order is not a ring of NVLinks. */
static const char* cubeMesh(void) {
  static char buf[8192];
  int len = snprintf(buf, sizeof(buf), "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"79\">\n");
  for (int g = 0; g < 8; g++) {
    len += snprintf(buf + len, sizeof(buf) - len,
                    "    <pci busid=\"0000:%02x:00.0\" class=\"0x030200\" link_speed=\"8.0 GT/s PCIe\" link_width=\"16\">\n"
                    "      <gpu dev=\"%d\" sm=\"70\">\n", 0x10 + g, g);
    for (int o = 0; o < 8; o++) {
      int sameQuad = (o % 2) == (g % 2) && o != g, partner = (o / 2 == g / 2) && o != g;
      if (sameQuad || partner)
        len += snprintf(buf + len, sizeof(buf) - len, "        <nvlink target=\"0000:%02x:00.0\" count=\"%d\" tclass=\"0x030200\"/>\n",
                        0x10 + o, partner ? 2 : 1);
    }
    len += snprintf(buf + len, sizeof(buf) - len, "      </gpu>\n    </pci>\n");
  }
  snprintf(buf + len, sizeof(buf) - len, "  </cpu>\n</system>\n");
  return buf;
}

static int caseRings(void) {
  struct ringSetup s;
  struct anycclTopoRings* r;
  /* one DGX-like host: a cycle of NVLinks */
  setupHosts(&s, src("topologies/dgx8_nvswitch.xml"), 1, 8, 0);
  r = checkRings(&s, 4);
  for (int c = 0; c < 4; c++) CHECK(r->nic[c] == -1);
  for (int i = 0; i < 8; i++) CHECK(r->order[i] == i); /* NVSwitch: all links equal, natural order */
  anycclTopoRingsFree(r);
  freeHosts(&s);
  /* 2 DGX-like hosts: 8 NICs, channels 1..8 use different NICs, rings enter/leave next to their NIC */
  for (int channels = 1; channels <= 16; channels *= 2) {
    setupHosts(&s, src("topologies/2node_16gpu.xml"), 2, 8, 0);
    r = checkRings(&s, channels);
    for (int h = 0; h < 2; h++) CHECK(distinctNics(r, h, channels) == (channels < 8 ? channels : 8));
    for (int c = 0; c < channels; c++) checkEnds(&s, r, c);
    anycclTopoRingsFree(r);
    freeHosts(&s);
  }
  /* 4 A3-high-like hosts: 4 NICs, 2 GPUs each */
  setupHosts(&s, src("topologies/4node_32gpu.xml"), 4, 8, 0);
  r = checkRings(&s, 4);
  for (int h = 0; h < 4; h++) CHECK(distinctNics(r, h, 4) == 4);
  for (int c = 0; c < 4; c++) checkEnds(&s, r, c);
  anycclTopoRingsFree(r);
  r = checkRings(&s, 2); /* two channels: NICs on different sockets */
  for (int h = 0; h < 4; h++) CHECK(r->nic[0 * 4 + h] == 0 && r->nic[1 * 4 + h] == 2);
  anycclTopoRingsFree(r);
  r = checkRings(&s, 8); /* more channels than NICs: each NIC twice, different entry GPUs */
  for (int h = 0; h < 4; h++) {
    int uses[4] = {0};
    for (int c = 0; c < 8; c++) uses[r->nic[c * 4 + h]]++;
    for (int n = 0; n < 4; n++) CHECK(uses[n] == 2);
  }
  CHECK(r->order[0] != r->order[4 * 32]); /* channels 0 and 4 share eth1 but start at different GPUs */
  anycclTopoRingsFree(r);
  freeHosts(&s);
  /* ranks numbered across hosts (rank r on host r % 3): still contiguous per host */
  setupHosts(&s, src("topologies/4node_32gpu.xml"), 3, 5, 1);
  r = checkRings(&s, 3);
  anycclTopoRingsFree(r);
  freeHosts(&s);
  /* 2 ranks per host on a3high NUMA 1 GPUs only -> NICs near them */
  setupHosts(&s, src("topologies/a3high.xml"), 2, 8, 0);
  s.nRanks = 4;
  for (int r2 = 0; r2 < 4; r2++) {
    s.ranks[r2].host = r2 / 2;
    snprintf(s.ranks[r2].busId, ANYCCL_TOPO_BUSID_LEN, "%s", s.hosts[r2 / 2]->gpus[4 + r2 % 2].busId);
  }
  r = checkRings(&s, 2);
  for (int h = 0; h < 2; h++) CHECK(r->nic[h] == 2 && r->nic[2 + h] == 2); /* only eth3 is PIX to GPUs 4, 5 */
  anycclTopoRingsFree(r);
  freeHosts(&s);
  /* PCIe only: switch mates next to each other (the cycle crosses the CPU twice, not four times) */
  makeTmp();
  const char* file = writeTmp("pcie.xml", pcieOnly);
  setupHosts(&s, file, 1, 4, 0);
  r = checkRings(&s, 1);
  int phb = 0;
  for (int i = 0; i < 4; i++) phb += anycclTopoGpuPath(s.hosts[0], r->gpu[r->order[i]], r->gpu[r->order[(i + 1) % 4]]).type == TOPO_PATH_PHB;
  CHECK(phb == 2);
  anycclTopoRingsFree(r);
  freeHosts(&s);
  /* hybrid cube mesh: a ring of direct NVLinks exists and is found */
  file = writeTmp("cube.xml", cubeMesh());
  setupHosts(&s, file, 1, 8, 0);
  CHECK(anycclTopoGpuPath(s.hosts[0], 1, 2).type == TOPO_PATH_NVB && anycclTopoGpuPath(s.hosts[0], 0, 1).bw == 40.0f);
  r = checkRings(&s, 2);
  for (int i = 0; i < 8; i++)
    CHECK(anycclTopoGpuPath(s.hosts[0], r->gpu[r->order[i]], r->gpu[r->order[(i + 1) % 8]]).type == TOPO_PATH_NVL);
  anycclTopoRingsFree(r);
  freeHosts(&s);
  rmTmp();
  /* a host without a topology keeps rank order; an unknown bus id is an error */
  setupHosts(&s, src("topologies/2node_16gpu.xml"), 2, 4, 0);
  s.hosts[1] = NULL;
  r = checkRings(&s, 2);
  CHECK(r->order[4] == 4 && r->order[7] == 7 && r->nic[1] == -1);
  anycclTopoRingsFree(r);
  s.hosts[1] = s.topos[1]->hosts;
  snprintf(s.ranks[5].busId, ANYCCL_TOPO_BUSID_LEN, "0001:ee:00.0");
  CHECK(anycclTopoBuildRings(s.hosts, 2, s.ranks, s.nRanks, 1, &r) == ncclInvalidArgument);
  freeHosts(&s);
  printf("rings: OK\n");
  return 0;
}

/* ---- detection of this machine ------------------------------------------------------ */
static int caseDetect(void) {
  struct anycclTopo* t;
  CHECKOK(anycclTopoDetect(&t));
  CHECK(t->nHosts == 1 && t->hosts[0].nCpus >= 1);
  makeTmp();
  char out[512];
  snprintf(out, sizeof(out), "%s/detected.xml", tmpDir);
  CHECKOK(anycclTopoWriteFile(t, -1, out));
  struct anycclTopo* b = load(out);
  char why[512];
  if (!anycclTopoEqual(t, b, why, sizeof(why))) {
    fprintf(stderr, "FAILED detected topology does not round-trip: %s\n", why);
    return 1;
  }
  printf("detect: OK (%d CPUs, %d GPUs, %d NICs)\n", t->hosts[0].nCpus, t->hosts[0].nGpus, t->hosts[0].nNets);
  anycclTopoFree(b);
  anycclTopoFree(t);
  rmTmp();
  return 0;
}

/* ---- what init calls: NCCL_TOPO_FILE, NCCL_HOSTID, NCCL_TOPO_DUMP_FILE --------------- */
static int caseGetSystem(void) {
  makeTmp();
  char dump[512];
  snprintf(dump, sizeof(dump), "%s/dump.xml", tmpDir);
  setenv("NCCL_TOPO_FILE", src("topologies/2node_16gpu.xml"), 1);
  setenv("NCCL_HOSTID", "1", 1);
  setenv("NCCL_TOPO_DUMP_FILE", dump, 1);
  struct anycclTopo* t;
  CHECKOK(anycclTopoGetSystem(1, &t)); /* not the dump rank */
  CHECK(access(dump, F_OK) != 0);
  CHECK(strcmp(t->hosts[0].gpus[0].busId, "0001:07:00.0") == 0);
  anycclTopoFree(t);
  CHECKOK(anycclTopoGetSystem(0, &t));
  struct anycclTopo* d = load(dump);
  struct anycclTopo* n1 = load(src("topologies/2node_16gpu_node1.xml"));
  CHECK(anycclTopoEqual(d, n1, NULL, 0));
  anycclTopoFree(n1);
  anycclTopoFree(d);
  anycclTopoFree(t);
  rmTmp();
  printf("getsystem: OK\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s shipped|roundtrip|nccldump|malformed|hostfile|rings|detect|getsystem\n", argv[0]);
    return 2;
  }
  const char* c = argv[1];
  if (!strcmp(c, "shipped")) return caseShipped();
  if (!strcmp(c, "roundtrip")) return caseRoundtrip();
  if (!strcmp(c, "nccldump")) return caseNcclDump();
  if (!strcmp(c, "malformed")) return caseMalformed();
  if (!strcmp(c, "hostfile")) return caseHostfile();
  if (!strcmp(c, "rings")) return caseRings();
  if (!strcmp(c, "detect")) return caseDetect();
  if (!strcmp(c, "getsystem")) return caseGetSystem();
  fprintf(stderr, "unknown case %s\n", c);
  return 2;
}
