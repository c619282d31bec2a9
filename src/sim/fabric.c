/* The sim backend's fabric and calibration files (docs/simulation.md).
 *
 * Both are lines of "key value" ('#' starts a comment). A fabric says how
 * many hosts of how many GPUs, how many NICs each, and the two-tier network
 * between them (rail-optimized or fat-tree leaves, one spine layer, link
 * speed, oversubscription, per-hop latency); a calibration file says what a
 * device kind does (a lane's rate, NVLink, launch and step latencies).
 *
 * Links (ids): per GPU g: 4g NVLink out, 4g+1 NVLink in, 4g+2 PCIe to the
 * NIC, 4g+3 PCIe from it; per NIC k (after the GPUs): out, in; per leaf
 * (after the NICs): up to the spine, down from it. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "checks.h"
#include "sim.h"

void simCalibDefaults(struct simCalib* c) {
  /* measured on H200 (anyccl cuda backend, tests/gpu): one block pushes
   * 42-46 GB/s; NVLink saturates near 360 GB/s per direction with ~16
   * blocks; a launch ~5 us; an LL step ~1 us, a simple step ~2 us */
  c->blockGBps = 44;
  c->nvlinkGBps = 360;
  c->pcieGBps = 50;
  c->copyGBps = 1500;
  c->recvCopyGBps = 0; /* no H200 data: not modelled */
  c->launchUs = 5;
  c->graphLaunchUs = 2.5;
  c->idleLaunchUs = c->graphIdleLaunchUs = 0; /* not modelled */
  c->llStepUs = 1;
  c->simpleStepUs = 2;
  c->llEfficiency = 0.5;
  c->nvlinkLatUs = 0.5;
  /* the cuda backend's one-host kernels: fitted to 2-H100 runs
   * (topologies/sim_h100.calib; no H200 runs of them yet) */
  c->symmLaunchUs = 6.4;
  c->symmGraphLaunchUs = 2.7;
  c->symmLLBlockGBps = 384;
  c->symmBlockGBps = 4.4;
  c->symmBarrierUs = 3.1;
  c->symmCopyGBps = 1530;
  c->netChannels = 1;
  c->model = SIM_MODEL_LOCKSTEP;
}

/* "lockstep" or "dataflow" -> SIM_MODEL_*, or -1. */
static int modelOf(const char* name) {
  if (strcmp(name, "lockstep") == 0) return SIM_MODEL_LOCKSTEP;
  if (strcmp(name, "dataflow") == 0) return SIM_MODEL_DATAFLOW;
  return -1;
}

/* ---- "key value" files ------------------------------------------------------- */
enum { F_DOUBLE, F_INT, F_WORD, F_LIST }; /* F_LIST: words, one per line of the key, '\n'-separated */
struct field {
  const char* key;
  int type;
  void* dst;
  double min;  /* doubles and ints: smallest allowed */
  size_t size; /* words: the buffer's size */
};
#define SIM_MAX_INT (1 << 24) /* an integer field's largest value */
#define SIM_MAX_DOUBLE 1e12   /* a number's (GB/s, us): rates in bytes/s stay finite */
#define SIM_MAX_LINKS (1 << 22)

#define SIM_MAX_FIELDS 24
/* The line that set a field (lines[i]: field i's; 0: not set). */
static int lineOf(const struct field* fields, const int* lines, int n, const char* key) {
  for (int i = 0; i < n; i++)
    if (strcmp(fields[i].key, key) == 0) return lines[i];
  return 0;
}

static int fail(char* err, size_t len, const char* file, int line, const char* key, const char* what) {
  snprintf(err, len, "%s:%d: %s: %s", file, line, key, what);
  return -1;
}

/* Reads the text of `file` (from f) into the fields; unknown keys, bad
 * values, lines over 1023 bytes and NUL bytes are errors. F_LIST entries
 * are "line:value". */
static int parseStream(const char* file, FILE* f, struct field* fields, int nfields, int* lines, char* err,
                       size_t len) {
  char buf[1024];
  int line = 0, rc = 0;
  while (rc == 0 && fgets(buf, sizeof(buf), f)) {
    line++;
    if (strchr(buf, '\n') == NULL && !feof(f)) { /* also a NUL byte: strchr stops there */
      rc = fail(err, len, file, line, "line", "longer than 1023 bytes or holds a NUL byte (not a text file?)");
      break;
    }
    char* hash = strchr(buf, '#');
    if (hash) *hash = '\0';
    char key[128], val[512], extra[8];
    int k = sscanf(buf, " %127[^= \t\r\n] %*[=]%511s %7s", key, val, extra);
    if (k < 2) k = sscanf(buf, " %127s %511s %7s", key, val, extra);
    if (k <= 0) continue; /* blank */
    if (k == 1) {
      rc = fail(err, len, file, line, key, "no value (write 'key value')");
      break;
    }
    if (k == 3) {
      rc = fail(err, len, file, line, key, "more than one value");
      break;
    }
    int i = 0;
    while (i < nfields && strcasecmp(fields[i].key, key) != 0) i++;
    if (i == nfields) {
      char what[640];
      int off = snprintf(what, sizeof(what), "unknown field; known:");
      for (int j = 0; j < nfields && off < (int)sizeof(what) - 40; j++)
        off += snprintf(what + off, sizeof(what) - off, " %s", fields[j].key);
      rc = fail(err, len, file, line, key, what);
      break;
    }
    lines[i] = line;
    if (fields[i].type == F_WORD || fields[i].type == F_LIST) {
      char* dst = fields[i].dst;
      size_t at = fields[i].type == F_LIST ? strlen(dst) : 0;
      if (at + strlen(val) + 2 >= fields[i].size) {
        rc = fail(err, len, file, line, key, "value too long (or too many of them)");
        break;
      }
      if (fields[i].type == F_WORD) {
        memcpy(dst, val, strlen(val) + 1);
      } else {
        if (at) dst[at++] = '\n';
        int w = snprintf(dst + at, fields[i].size - at, "%d:%s", line, val);
        if (w < 0 || (size_t)w >= fields[i].size - at) {
          dst[at ? at - 1 : 0] = '\0';
          rc = fail(err, len, file, line, key, "too many of them");
          break;
        }
      }
      continue;
    }
    char* end;
    errno = 0;
    double v = strtod(val, &end);
    if (fields[i].type == F_DOUBLE && *end == ':' && end[1] == '1' && end[2] == '\0') end += 2; /* "2:1" */
    int isInt = fields[i].type == F_INT;
    if (errno || *end || !isfinite(v) || v < fields[i].min || v > (isInt ? SIM_MAX_INT : SIM_MAX_DOUBLE) ||
        (isInt && v != floor(v))) {
      char what[160];
      snprintf(what, sizeof(what), "'%.64s' is not %s >= %g and <= %.15g", val, isInt ? "an integer" : "a number",
               fields[i].min, isInt ? (double)SIM_MAX_INT : SIM_MAX_DOUBLE);
      rc = fail(err, len, file, line, key, what);
      break;
    }
    if (fields[i].type == F_INT) *(int*)fields[i].dst = (int)v;
    else *(double*)fields[i].dst = v;
  }
  return rc;
}

static FILE* openText(const char* file, char* err, size_t len) {
  FILE* f = fopen(file, "r");
  if (f == NULL) snprintf(err, len, "%s: cannot open: %s", file, strerror(errno));
  return f;
}

ncclResult_t simCalibLoad(const char* path, struct simCalib* c, char* err, size_t len) {
  FILE* in = openText(path, err, len);
  if (in == NULL) return ncclInvalidUsage;
  ncclResult_t res = simCalibRead(path, in, c, err, len);
  fclose(in);
  return res;
}

ncclResult_t simCalibRead(const char* path, FILE* in, struct simCalib* c, char* err, size_t len) {
  char model[32] = "";
  struct field fields[] = {
      {"block_GBps", F_DOUBLE, &c->blockGBps, 1e-3, 0},      {"nvlink_GBps", F_DOUBLE, &c->nvlinkGBps, 1e-3, 0},
      {"pcie_GBps", F_DOUBLE, &c->pcieGBps, 1e-3, 0},        {"copy_GBps", F_DOUBLE, &c->copyGBps, 1e-3, 0},
      {"launch_us", F_DOUBLE, &c->launchUs, 0, 0},           {"ll_step_us", F_DOUBLE, &c->llStepUs, 0, 0},
      {"simple_step_us", F_DOUBLE, &c->simpleStepUs, 0, 0},  {"ll_efficiency", F_DOUBLE, &c->llEfficiency, 1e-3, 0},
      {"nvlink_latency_us", F_DOUBLE, &c->nvlinkLatUs, 0, 0}, {"graph_launch_us", F_DOUBLE, &c->graphLaunchUs, 0, 0},
      {"recv_copy_GBps", F_DOUBLE, &c->recvCopyGBps, 0, 0},
      {"idle_launch_us", F_DOUBLE, &c->idleLaunchUs, 0, 0},
      {"graph_idle_launch_us", F_DOUBLE, &c->graphIdleLaunchUs, 0, 0},
      {"net_channels", F_INT, &c->netChannels, 1, 0},
      {"symm_launch_us", F_DOUBLE, &c->symmLaunchUs, 0, 0},
      {"symm_graph_launch_us", F_DOUBLE, &c->symmGraphLaunchUs, 0, 0},
      {"symm_ll_block_GBps", F_DOUBLE, &c->symmLLBlockGBps, 1e-3, 0},
      {"symm_block_GBps", F_DOUBLE, &c->symmBlockGBps, 1e-3, 0},
      {"symm_barrier_us", F_DOUBLE, &c->symmBarrierUs, 0, 0},
      {"symm_copy_GBps", F_DOUBLE, &c->symmCopyGBps, 1e-3, 0},
      {"model", F_WORD, model, 0, sizeof(model)},
  };
  int nf = sizeof(fields) / sizeof(fields[0]), lines[SIM_MAX_FIELDS] = {0};
  if (parseStream(path, in, fields, nf, lines, err, len) != 0) return ncclInvalidUsage;
  if (c->llEfficiency > 1) {
    char what[96];
    snprintf(what, sizeof(what), "%g is more than 1 (payload bytes per wire byte)", c->llEfficiency);
    fail(err, len, path, lineOf(fields, lines, nf, "ll_efficiency"), "ll_efficiency", what);
    return ncclInvalidUsage;
  }
  if (model[0]) {
    c->model = modelOf(model);
    if (c->model < 0) {
      fail(err, len, path, lineOf(fields, lines, nf, "model"), "model", "not lockstep or dataflow");
      return ncclInvalidUsage;
    }
  }
  return ncclSuccess;
}

/* A file named in another one: relative to that one's folder. */
static void relativeTo(const char* base, const char* name, char* out, size_t len) {
  const char* slash = strrchr(base, '/');
  if (name[0] == '/' || slash == NULL) snprintf(out, len, "%s", name);
  else snprintf(out, len, "%.*s/%s", (int)(slash - base), base, name);
}

static ncclResult_t setupLinks(struct simFabric* f, char* err, size_t len);
static ncclResult_t applyDegrade(struct simFabric* f, const char* list, char* err, size_t len);

ncclResult_t simFabricLoad(const char* path, int nranks, struct simFabric* f, char* err, size_t len) {
  if (path == NULL) return simFabricRead(NULL, NULL, 1, nranks, f, err, len);
  FILE* in = openText(path, err, len);
  if (in == NULL) {
    memset(f, 0, sizeof(*f));
    return ncclInvalidUsage;
  }
  ncclResult_t res = simFabricRead(path, in, 1, nranks, f, err, len);
  fclose(in);
  return res;
}

static ncclResult_t fabricRead(const char* path, FILE* in, int openFiles, int nranks, const struct simShape* shape,
                               struct simFabric* f, char* err, size_t len);

ncclResult_t simFabricRead(const char* path, FILE* in, int openFiles, int nranks, struct simFabric* f, char* err,
                           size_t len) {
  return fabricRead(path, in, openFiles, nranks, NULL, f, err, len);
}

ncclResult_t simFabricShape(int nranks, const struct simShape* shape, struct simFabric* f, char* err, size_t len) {
  return fabricRead(NULL, NULL, 1, nranks, shape, f, err, len);
}

static int gcd(int a, int b) { return b == 0 ? a : gcd(b, a % b); }

static ncclResult_t fabricRead(const char* path, FILE* in, int openFiles, int nranks, const struct simShape* shape,
                               struct simFabric* f, char* err, size_t len) {
  memset(f, 0, sizeof(*f));
  f->hosts = 0;
  f->gpusPerHost = 8;
  f->nicsPerHost = 8;
  if (shape && shape->gpusPerHost > 0) {
    f->gpusPerHost = shape->gpusPerHost;
    f->nicsPerHost = gcd(shape->gpusPerHost, 8);
  }
  f->nicGbps = 400;
  f->hostsPerLeaf = 32;
  f->oversub = 1;
  f->hopLatUs = 1;
  f->kind = SIM_RAIL;
  snprintf(f->device, sizeof(f->device), "h200");
  snprintf(f->name, sizeof(f->name), "%s", path ? path : "default");
  simCalibDefaults(&f->calib);
  const char* envCalib = getenv("ANYCCL_SIM_CALIB");
  if (shape && shape->calibText && !(envCalib && envCalib[0])) { /* the device kind's built-in calibration */
    snprintf(f->device, sizeof(f->device), "%s", shape->calibName);
    FILE* c = fmemopen((void*)shape->calibText, strlen(shape->calibText), "r");
    ncclResult_t res = c ? simCalibRead(shape->calibName, c, &f->calib, err, len) : ncclSystemError;
    if (c) fclose(c);
    if (res != ncclSuccess) return res;
  }
  char fabricWord[256] = "rail", calibFile[256] = "", hostXml[256] = "", degrade[4096] = "";
  int hostsLine = 0;
  if (path) {
    struct field fields[] = {
        {"hosts", F_INT, &f->hosts, 1, 0},
        {"gpus_per_host", F_INT, &f->gpusPerHost, 1, 0},
        {"nics_per_host", F_INT, &f->nicsPerHost, 1, 0},
        {"nic_gbps", F_DOUBLE, &f->nicGbps, 1e-3, 0},
        {"fabric", F_WORD, fabricWord, 0, sizeof(fabricWord)},
        {"hosts_per_leaf", F_INT, &f->hostsPerLeaf, 1, 0},
        {"oversubscription", F_DOUBLE, &f->oversub, 1, 0},
        {"link_latency_us", F_DOUBLE, &f->hopLatUs, 0, 0},
        {"device", F_WORD, f->device, 0, sizeof(f->device)},
        {"calibration", F_WORD, calibFile, 0, sizeof(calibFile)},
        {"host_xml", F_WORD, hostXml, 0, sizeof(hostXml)},
        {"degrade", F_LIST, degrade, 0, sizeof(degrade)},
    };
    int nf = sizeof(fields) / sizeof(fields[0]), lines[SIM_MAX_FIELDS] = {0};
    if (parseStream(path, in, fields, nf, lines, err, len) != 0) return ncclInvalidUsage;
#define LINE(key) lineOf(fields, lines, nf, key)
    if (strcasecmp(fabricWord, "rail") == 0 || strcasecmp(fabricWord, "rail-optimized") == 0) f->kind = SIM_RAIL;
    else if (strcasecmp(fabricWord, "fattree") == 0 || strcasecmp(fabricWord, "fat-tree") == 0) f->kind = SIM_FATTREE;
    else {
      char what[320];
      snprintf(what, sizeof(what), "'%.256s' is neither rail nor fattree", fabricWord);
      fail(err, len, path, LINE("fabric"), "fabric", what);
      return ncclInvalidUsage;
    }
    if (strcasecmp(f->device, "h200") == 0) {
    } else if (strcasecmp(f->device, "h100") == 0) {
      f->calib.blockGBps = 40; /* H100: slower SMs and HBM3; NVLink 4 as on H200 */
      f->calib.nvlinkGBps = 350;
    } else {
      char what[160];
      snprintf(what, sizeof(what), "'%.60s' is not a built-in kind (h200, h100); name a calibration file", f->device);
      fail(err, len, path, LINE("device"), "device", what);
      return ncclInvalidUsage;
    }
    if (calibFile[0] && openFiles) {
      char p[512];
      relativeTo(path, calibFile, p, sizeof(p));
      if (simCalibLoad(p, &f->calib, err, len) != ncclSuccess) return ncclInvalidUsage;
    }
    if (hostXml[0]) {
      relativeTo(path, hostXml, f->hostXml, sizeof(f->hostXml));
      if (openFiles && access(f->hostXml, R_OK) != 0) {
        char what[320];
        snprintf(what, sizeof(what), "cannot read %.256s", f->hostXml);
        fail(err, len, path, LINE("host_xml"), "host_xml", what);
        return ncclInvalidUsage;
      }
    }
    if (f->nicsPerHost > f->gpusPerHost || f->gpusPerHost % f->nicsPerHost) {
      char what[160];
      snprintf(what, sizeof(what), "%d%s does not divide gpus_per_host (%d%s)", f->nicsPerHost,
               LINE("nics_per_host") ? "" : ", the default", f->gpusPerHost, LINE("gpus_per_host") ? "" : ", the default");
      /* blame the line that made them disagree: the later of the two */
      int l = LINE("nics_per_host") > LINE("gpus_per_host") ? LINE("nics_per_host") : LINE("gpus_per_host");
      fail(err, len, path, l, "nics_per_host", what);
      return ncclInvalidUsage;
    }
    hostsLine = LINE("hosts");
#undef LINE
  }
  if (f->hosts == 0) f->hosts = (nranks + f->gpusPerHost - 1) / f->gpusPerHost;
  char at[16] = "";
  if (hostsLine) snprintf(at, sizeof(at), ":%d", hostsLine);
  if ((long long)f->hosts * f->gpusPerHost < nranks) {
    snprintf(err, len, "%s%s: hosts: %d hosts x %d GPUs is fewer than the communicator's %d ranks", f->name, at,
             f->hosts, f->gpusPerHost, nranks);
    return ncclInvalidUsage;
  }
  int kind = f->kind;
  long long groups = ((long long)f->hosts + f->hostsPerLeaf - 1) / f->hostsPerLeaf;
  long long links = 4LL * f->hosts * f->gpusPerHost + 2LL * f->hosts * f->nicsPerHost +
                    2 * (kind == SIM_FATTREE ? groups : f->nicsPerHost * groups);
  if (links > SIM_MAX_LINKS) {
    snprintf(err, len, "%s%s: hosts: %d hosts x %d GPUs, %d NICs make %lld links (at most %d)", f->name, at, f->hosts,
             f->gpusPerHost, f->nicsPerHost, links, SIM_MAX_LINKS);
    return ncclInvalidUsage;
  }
  const char* calibEnv = openFiles ? getenv("ANYCCL_SIM_CALIB") : NULL;
  if (calibEnv && calibEnv[0] && simCalibLoad(calibEnv, &f->calib, err, len) != ncclSuccess) return ncclInvalidUsage;
  const char* graph = getenv("ANYCCL_SIM_GRAPH"); /* kernels launched from a CUDA graph (nccl-tests -G) */
  if (graph && atoi(graph) == 1) {
    f->calib.launchUs = f->calib.graphLaunchUs;
    f->calib.idleLaunchUs = f->calib.graphIdleLaunchUs;
    f->calib.symmLaunchUs = f->calib.symmGraphLaunchUs;
  }
  const char* model = openFiles ? getenv("ANYCCL_SIM_MODEL") : NULL; /* overrides the calibration's */
  if (model && model[0]) {
    if (modelOf(model) < 0) {
      snprintf(err, len, "ANYCCL_SIM_MODEL=%.32s: not lockstep or dataflow", model);
      simFabricFree(f);
      return ncclInvalidUsage;
    }
    f->calib.model = modelOf(model);
  }
  ncclResult_t res = setupLinks(f, err, len);
  if (res == ncclSuccess) res = applyDegrade(f, degrade, err, len);
  if (res != ncclSuccess) simFabricFree(f);
  return res;
}

/* ---- links and routes ----------------------------------------------------------- */
static int leafGroups(const struct simFabric* f) { return (f->hosts + f->hostsPerLeaf - 1) / f->hostsPerLeaf; }
static int nicOf(const struct simFabric* f, int gpu) {
  int host = gpu / f->gpusPerHost, local = gpu % f->gpusPerHost;
  return host * f->nicsPerHost + local * f->nicsPerHost / f->gpusPerHost;
}
static int leafOf(const struct simFabric* f, int nic) {
  int host = nic / f->nicsPerHost, rail = nic % f->nicsPerHost;
  if (f->kind == SIM_FATTREE) return host / f->hostsPerLeaf;
  return rail * leafGroups(f) + host / f->hostsPerLeaf;
}
static int nicBase(const struct simFabric* f) { return 4 * f->nGpus; }
static int leafBase(const struct simFabric* f) { return nicBase(f) + 2 * f->nNics; }

static ncclResult_t setupLinks(struct simFabric* f, char* err, size_t len) {
  f->nGpus = f->hosts * f->gpusPerHost;
  f->nNics = f->hosts * f->nicsPerHost;
  f->nLeaves = f->kind == SIM_FATTREE ? leafGroups(f) : f->nicsPerHost * leafGroups(f);
  f->nLinks = leafBase(f) + 2 * f->nLeaves;
  f->linkBps = malloc(sizeof(double) * f->nLinks);
  f->linkLat = malloc(sizeof(double) * f->nLinks);
  if (f->linkBps == NULL || f->linkLat == NULL) {
    snprintf(err, len, "%s: out of memory for %d links", f->name, f->nLinks);
    return ncclSystemError;
  }
  const struct simCalib* c = &f->calib;
  for (int g = 0; g < f->nGpus; g++) {
    f->linkBps[4 * g] = f->linkBps[4 * g + 1] = c->nvlinkGBps * 1e9;
    f->linkBps[4 * g + 2] = f->linkBps[4 * g + 3] = c->pcieGBps * 1e9;
    f->linkLat[4 * g] = f->linkLat[4 * g + 1] = c->nvlinkLatUs * 0.5e-6;
    f->linkLat[4 * g + 2] = f->linkLat[4 * g + 3] = 0;
  }
  double nic = f->nicGbps / 8 * 1e9;
  for (int k = 0; k < 2 * f->nNics; k++) {
    f->linkBps[nicBase(f) + k] = nic;
    f->linkLat[nicBase(f) + k] = f->hopLatUs * 1e-6; /* NIC -> leaf, leaf -> NIC */
  }
  int ports = f->kind == SIM_FATTREE ? f->hostsPerLeaf * f->nicsPerHost : f->hostsPerLeaf;
  for (int k = 0; k < 2 * f->nLeaves; k++) {
    f->linkBps[leafBase(f) + k] = ports * nic / f->oversub;
    f->linkLat[leafBase(f) + k] = f->hopLatUs * 1e-6; /* leaf -> spine, spine -> leaf */
  }
  return ncclSuccess;
}

/* The id of a link name as simLinkName writes it; -1 if none. */
static int linkId(const struct simFabric* f, const char* name) {
  int a = -1, b = -1, n = 0, id = -1;
  char what[32] = "";
  if (sscanf(name, "host%d/gpu%d/%31[a-z-]%n", &a, &b, what, &n) == 3 && name[n] == '\0') {
    static const char* gpuLinks[4] = {"nvlink-out", "nvlink-in", "pcie-to-nic", "pcie-from-nic"};
    int k = 0;
    while (k < 4 && strcmp(what, gpuLinks[k]) != 0) k++;
    if (a >= 0 && a < f->hosts && b >= 0 && b < f->gpusPerHost && k < 4) id = 4 * (a * f->gpusPerHost + b) + k;
  } else if (sscanf(name, "host%d/nic%d/%31[a-z]%n", &a, &b, what, &n) == 3 && name[n] == '\0') {
    if (a >= 0 && a < f->hosts && b >= 0 && b < f->nicsPerHost && (!strcmp(what, "out") || !strcmp(what, "in")))
      id = nicBase(f) + 2 * (a * f->nicsPerHost + b) + (what[0] == 'i');
  } else if (sscanf(name, "leaf%d/%31[a-z-]%n", &a, what, &n) == 2 && name[n] == '\0') {
    if (a >= 0 && a < f->nLeaves && (!strcmp(what, "up-to-spine") || !strcmp(what, "down-from-spine")))
      id = leafBase(f) + 2 * a + (what[0] == 'd');
  }
  if (id < 0 || id >= f->nLinks) return -1;
  char back[128]; /* the name it gives is the one asked for ("host01" is not "host1") */
  simLinkName(f, id, back, sizeof(back));
  return strcmp(back, name) == 0 ? id : -1;
}

/* "degrade <link name>=<GB/s>" lines (a slow or failing link, for what-if
 * studies): the list holds "line:value" entries of the file f->name. */
static ncclResult_t applyDegrade(struct simFabric* f, const char* list, char* err, size_t len) {
  while (list && *list) {
    const char* nl = strchr(list, '\n');
    char item[600];
    snprintf(item, sizeof(item), "%.*s", (int)(nl ? nl - list : (long)strlen(list)), list);
    list = nl ? nl + 1 : NULL;
    char* c1 = strchr(item, ':');
    if (c1 == NULL) continue;
    *c1 = '\0';
    int line = atoi(item);
    char* val = c1 + 1;
    char* eq = strrchr(val, '=');
    char* end = NULL;
    double gbps = eq ? strtod(eq + 1, &end) : 0;
    if (eq == NULL || end == eq + 1 || *end || !(gbps > 0 && gbps <= SIM_MAX_DOUBLE)) {
      fail(err, len, f->name, line, "degrade", "write 'degrade <link name>=<GB/s>' with a rate > 0 and <= 1e12");
      return ncclInvalidUsage;
    }
    *eq = '\0';
    int id = linkId(f, val);
    if (id < 0) {
      char what[400];
      snprintf(what, sizeof(what), "no link named '%.200s' (names as in the link summary: host0/gpu3/nvlink-out, "
               "host1/nic0/in, leaf2/up-to-spine)", val);
      fail(err, len, f->name, line, "degrade", what);
      return ncclInvalidUsage;
    }
    f->linkBps[id] = gbps * 1e9;
  }
  return ncclSuccess;
}

void simFabricFree(struct simFabric* f) {
  free(f->linkBps);
  free(f->linkLat);
  f->linkBps = f->linkLat = NULL;
}

int simCrossHost(const struct simFabric* f, int src, int dst) {
  if (f->gpuOf) src = f->gpuOf[src], dst = f->gpuOf[dst];
  return src / f->gpusPerHost != dst / f->gpusPerHost;
}

int simRoute(const struct simFabric* f, int src, int dst, int* links, double* lat) {
  int n = 0;
  if (f->gpuOf) src = f->gpuOf[src], dst = f->gpuOf[dst];
  if (src == dst) {
    *lat = 0;
    return 0;
  }
  if (src / f->gpusPerHost == dst / f->gpusPerHost) {
    links[n++] = 4 * src;
    links[n++] = 4 * dst + 1;
  } else {
    int ns = nicOf(f, src), nd = nicOf(f, dst);
    int ls = leafOf(f, ns), ld = leafOf(f, nd);
    links[n++] = 4 * src + 2;
    links[n++] = nicBase(f) + 2 * ns;
    if (ls != ld) {
      links[n++] = leafBase(f) + 2 * ls;
      links[n++] = leafBase(f) + 2 * ld + 1;
    }
    links[n++] = nicBase(f) + 2 * nd + 1;
    links[n++] = 4 * dst + 3;
  }
  double l = 0;
  for (int i = 0; i < n; i++) l += f->linkLat[links[i]];
  *lat = l;
  return n;
}

void simLinkName(const struct simFabric* f, int id, char* buf, size_t len) {
  static const char* gpuLinks[4] = {"nvlink-out", "nvlink-in", "pcie-to-nic", "pcie-from-nic"};
  if (id < nicBase(f)) {
    snprintf(buf, len, "host%d/gpu%d/%s", id / 4 / f->gpusPerHost, id / 4 % f->gpusPerHost, gpuLinks[id % 4]);
  } else if (id < leafBase(f)) {
    int k = (id - nicBase(f)) / 2;
    snprintf(buf, len, "host%d/nic%d/%s", k / f->nicsPerHost, k % f->nicsPerHost, (id - nicBase(f)) % 2 ? "in" : "out");
  } else {
    int k = (id - leafBase(f)) / 2;
    snprintf(buf, len, "leaf%d/%s", k, (id - leafBase(f)) % 2 ? "down-from-spine" : "up-to-spine");
  }
}
