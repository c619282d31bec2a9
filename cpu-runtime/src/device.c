#define _GNU_SOURCE
#include <dlfcn.h>
/* anyccl-cpu: virtual devices.
 *
 * ANYCCL_CPU_DEVICES virtual devices (default 8), each with a PCI bus id
 * that looks like a real one and is unique on its virtual host: the PCI
 * domain comes from NCCL_HOSTID, so that devices of two virtual hosts that
 * share a kernel never share a bus id (anyccl tells hosts apart by it). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>
#include "cpurt.h"

/* Bus numbers start where real servers' GPUs often do; past 229 devices the
 * PCI device (slot) number moves on, so 1024 ids stay distinct. */
#define BUS_BASE 0x1b
#define BUSES_PER_SLOT (256 - BUS_BASE)
#define PRIORITY_GREATEST (-5)

static pthread_once_t initOnce = PTHREAD_ONCE_INIT;
static int ndev;
static int pciDomain;
static struct cpurtDevice *devices;
static pthread_mutex_t peerLock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *peerBits;          /* ndev x ndev: peer access enabled */

bool cpurtSim;

static int parseDeviceCount(void) {
  const char *env = getenv("ANYCCL_CPU_DEVICES");
  int max = cpurtSim ? CPURT_SIM_MAX_DEVICES : CPURT_MAX_DEVICES;
  int def = cpurtSim ? CPURT_SIM_DEFAULT_DEVICES : CPURT_DEFAULT_DEVICES;
  if (env == NULL || env[0] == '\0') return def;
  char *end;
  errno = 0;
  long v = strtol(env, &end, 10);
  if (errno != 0 || *end != '\0' || v < 1 || v > max) {
    cpurtWarn("ANYCCL_CPU_DEVICES=\"%s\" is not a number in 1..%d; using %d devices", env, max, def);
    return def;
  }
  return (int)v;
}

/* NCCL_HOSTID names the virtual host: a decimal number up to 0xffff is used
 * as the domain itself (readable ids in tests), anything else is hashed. */
static int parseHostDomain(void) {
  const char *id = getenv("NCCL_HOSTID");
  if (id == NULL || id[0] == '\0') return 0;
  if (isdigit((unsigned char)id[0])) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(id, &end, 10);
    if (errno == 0 && *end == '\0' && v <= 0xffff) return (int)v;
  }
  uint32_t h = 2166136261u;         /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)id; *p; p++) h = (h ^ *p) * 16777619u;
  return (int)((h >> 16) ^ (h & 0xffff));
}

/* NCCL_TOPO_FILE describes the host's GPUs: then their number and bus ids
 * come from it (through libnccl's topology reader, found at run time so that
 * anyccl-cpu does not depend on libnccl). */
#define TOPO_BUSID_LEN 20 /* ANYCCL_TOPO_BUSID_LEN in src/include/topo.h */
static char (*topoBusIds)[TOPO_BUSID_LEN];

static int topologyDevices(void) {
  const char *file = getenv("NCCL_TOPO_FILE");
  if (file == NULL || file[0] == '\0') return 0;
  typedef int (*listFn)(const char *, const char *, int *, char (*)[TOPO_BUSID_LEN], int);
  listFn list;
  *(void **)&list = dlsym(RTLD_DEFAULT, "anycclTopoListGpus");
  if (list == NULL) return 0;
  const char *host = getenv("NCCL_HOSTID");
  int count = 0;
  if (list(file, host && host[0] ? host : NULL, &count, NULL, 0) != 0 || count <= 0) {
    cpurtWarn("NCCL_TOPO_FILE=%s describes no GPU for this host; using ANYCCL_CPU_DEVICES", file);
    return 0;
  }
  if (count > CPURT_MAX_DEVICES) count = CPURT_MAX_DEVICES;
  topoBusIds = calloc(count, sizeof(*topoBusIds));
  if (topoBusIds == NULL || list(file, host && host[0] ? host : NULL, &count, topoBusIds, count) != 0) {
    free(topoBusIds);
    topoBusIds = NULL;
    return 0;
  }
  return count;
}

static void initDevices(void) {
  const char *backend = getenv("ANYCCL_BACKEND");
  cpurtSim = backend != NULL && strcmp(backend, "sim") == 0;
  ndev = cpurtSim ? 0 : topologyDevices(); /* sim: hosts come from the fabric, devices are ranks */
  if (ndev == 0) ndev = parseDeviceCount();
  pciDomain = parseHostDomain();
  devices = calloc(ndev, sizeof(*devices));
  peerBits = calloc(((size_t)ndev * ndev + 63) / 64, sizeof(uint64_t));
  if (devices == NULL || peerBits == NULL) {
    cpurtWarn("out of memory while creating %d devices", ndev);
    abort();
  }
  for (int d = 0; d < ndev; d++) pthread_mutex_init(&devices[d].lock, NULL);
  for (int d = 0; d < ndev; d++) {
    devices[d].legacy = cpurtStreamNew(d, cudaStreamDefault, 0, CPURT_STREAM_LEGACY);
    if (devices[d].legacy == NULL) {
      cpurtWarn("out of memory while creating the default stream of device %d", d);
      abort();
    }
  }
  cpurtStreamForkSetup();
}

void cpurtInit(void) { pthread_once(&initOnce, initDevices); }
int cpurtDeviceCount(void) { return ndev; }
bool cpurtValidDevice(int dev) { return dev >= 0 && dev < ndev; }
struct cpurtDevice *cpurtDevice(int dev) { return &devices[dev]; }

static void busIdParts(int dev, int *bus, int *slot) {
  *bus = BUS_BASE + dev % BUSES_PER_SLOT;
  *slot = dev / BUSES_PER_SLOT;
}

static size_t totalRam(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  return pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)16 << 30;
}

static int cpuCount(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static void fillProps(struct cudaDeviceProp *p, int dev) {
  memset(p, 0, sizeof(*p));
  snprintf(p->name, sizeof(p->name), "anyccl-cpu virtual device");
  /* A stable uuid per (host, device): "ACPU" + domain + device. */
  memcpy(p->uuid.bytes, "ACPU", 4);
  p->uuid.bytes[4] = (char)(pciDomain >> 8);
  p->uuid.bytes[5] = (char)pciDomain;
  p->uuid.bytes[6] = (char)(dev >> 8);
  p->uuid.bytes[7] = (char)dev;
  p->totalGlobalMem = cpurtSim ? CPURT_SIM_DEVICE_MEMORY : totalRam();
  p->sharedMemPerBlock = 48 << 10;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = (size_t)1 << 31;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->totalConstMem = 64 << 10;
  p->major = 8, p->minor = 0;
  p->textureAlignment = 512, p->texturePitchAlignment = 32;
  p->multiProcessorCount = cpuCount();
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  busIdParts(dev, &p->pciBusID, &p->pciDeviceID);
  if (topoBusIds) {
    unsigned d, b, sl, f;
    if (sscanf(topoBusIds[dev], "%x:%x:%x.%x", &d, &b, &sl, &f) == 4) {
      p->pciDomainID = (int)d;
      p->pciBusID = (int)b;
      p->pciDeviceID = (int)sl;
    }
  }
  if (!topoBusIds) p->pciDomainID = pciDomain;
  p->asyncEngineCount = 2;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = 64;
  p->l2CacheSize = 4 << 20;
  p->maxThreadsPerMultiProcessor = 2048;
  p->streamPrioritiesSupported = 1;
  p->sharedMemPerMultiprocessor = 164 << 10;
  p->regsPerMultiprocessor = 65536;
  p->managedMemory = 1;
  p->hostNativeAtomicSupported = 1;
  p->pageableMemoryAccess = 1;
  p->concurrentManagedAccess = 1;
  p->canUseHostPointerForRegisteredMem = 1;
  p->sharedMemPerBlockOptin = 163 << 10;
  p->directManagedMemAccessFromHost = 1;
  p->maxBlocksPerMultiProcessor = 32;
  p->hostRegisterSupported = 1;
  p->memoryPoolsSupported = 1;
  p->deviceNumaId = -1;
  p->hostNumaId = -1;
}

CPURT_API cudaError_t cudaGetDeviceCount(int *count) {
  cpurtInit();
  if (count == NULL) return cpurtRet(cudaErrorInvalidValue);
  *count = ndev;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaSetDevice(int device) {
  cpurtInit();
  if (!cpurtValidDevice(device)) {
    if (topoBusIds != NULL)
      cpurtWarn("cudaSetDevice(%d): NCCL_TOPO_FILE gives this host %d devices (0 to %d)", device, ndev, ndev - 1);
    else
      cpurtWarn("cudaSetDevice(%d): this host has %d virtual devices (0 to %d); set ANYCCL_CPU_DEVICES for more "
                "(up to %d)", device, ndev, ndev - 1, CPURT_MAX_DEVICES);
    return cpurtRet(cudaErrorInvalidDevice);
  }
  cpurtSelf()->device = device;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaGetDevice(int *device) {
  cpurtInit();
  if (device == NULL) return cpurtRet(cudaErrorInvalidValue);
  *device = cpurtSelf()->device;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  cpurtInit();
  if (prop == NULL) return cpurtRet(cudaErrorInvalidValue);
  if (!cpurtValidDevice(device)) return cpurtRet(cudaErrorInvalidDevice);
  fillProps(prop, device);
  return cudaSuccess;
}

/* The name that programs built against CUDA 12's headers call. */
CPURT_API cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *prop, int device) {
  return cudaGetDeviceProperties(prop, device);
}

static bool attrValue(const struct cudaDeviceProp *p, enum cudaDeviceAttr attr, int *v) {
  switch (attr) {
  case cudaDevAttrMaxThreadsPerBlock: *v = p->maxThreadsPerBlock; break;
  case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: case cudaDevAttrMaxBlockDimZ:
    *v = p->maxThreadsDim[attr - cudaDevAttrMaxBlockDimX]; break;
  case cudaDevAttrMaxGridDimX: case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ:
    *v = p->maxGridSize[attr - cudaDevAttrMaxGridDimX]; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p->sharedMemPerBlock; break;
  case cudaDevAttrTotalConstantMemory: *v = (int)p->totalConstMem; break;
  case cudaDevAttrWarpSize: *v = p->warpSize; break;
  case cudaDevAttrMaxRegistersPerBlock: *v = p->regsPerBlock; break;
  case cudaDevAttrClockRate: case cudaDevAttrMemoryClockRate: *v = 1000000; break;
  case cudaDevAttrMultiProcessorCount: *v = p->multiProcessorCount; break;
  case cudaDevAttrIntegrated: *v = 0; break;
  case cudaDevAttrComputeMode: *v = 0; break;       /* cudaComputeModeDefault */
  case cudaDevAttrEccEnabled: *v = 0; break;
  case cudaDevAttrPciBusId: *v = p->pciBusID; break;
  case cudaDevAttrPciDeviceId: *v = p->pciDeviceID; break;
  case cudaDevAttrPciDomainId: *v = p->pciDomainID; break;
  case cudaDevAttrGlobalMemoryBusWidth: *v = p->memoryBusWidth; break;
  case cudaDevAttrL2CacheSize: *v = p->l2CacheSize; break;
  case cudaDevAttrMaxThreadsPerMultiProcessor: *v = p->maxThreadsPerMultiProcessor; break;
  case cudaDevAttrAsyncEngineCount: *v = p->asyncEngineCount; break;
  case cudaDevAttrComputeCapabilityMajor: *v = p->major; break;
  case cudaDevAttrComputeCapabilityMinor: *v = p->minor; break;
  case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = (int)p->sharedMemPerMultiprocessor; break;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p->sharedMemPerBlockOptin; break;
  case cudaDevAttrMaxBlocksPerMultiprocessor: *v = p->maxBlocksPerMultiProcessor; break;
  case cudaDevAttrNumaConfig: *v = 0; break;
  case cudaDevAttrNumaId: case cudaDevAttrHostNumaId: *v = -1; break;
  case cudaDevAttrGPUDirectRDMASupported: case cudaDevAttrClusterLaunch:
  case cudaDevAttrIpcEventSupport: case cudaDevAttrMpsEnabled: *v = 0; break;
  case cudaDevAttrCanMapHostMemory: case cudaDevAttrConcurrentKernels:
  case cudaDevAttrUnifiedAddressing: case cudaDevAttrStreamPrioritiesSupported:
  case cudaDevAttrManagedMemory: case cudaDevAttrHostNativeAtomicSupported:
  case cudaDevAttrPageableMemoryAccess: case cudaDevAttrConcurrentManagedAccess:
  case cudaDevAttrCanUseHostPointerForRegisteredMem: case cudaDevAttrCooperativeLaunch:
  case cudaDevAttrHostRegisterSupported: case cudaDevAttrDirectManagedMemAccessFromHost:
  case cudaDevAttrMemoryPoolsSupported: *v = 1; break;
  default: return false;
  }
  return true;
}

CPURT_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  cpurtInit();
  if (value == NULL) return cpurtRet(cudaErrorInvalidValue);
  if (!cpurtValidDevice(device)) return cpurtRet(cudaErrorInvalidDevice);
  struct cudaDeviceProp p;
  fillProps(&p, device);
  return attrValue(&p, attr, value) ? cudaSuccess : cpurtRet(cudaErrorInvalidValue);
}

CPURT_API cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  cpurtInit();
  if (pciBusId == NULL || len <= 0) return cpurtRet(cudaErrorInvalidValue);
  if (!cpurtValidDevice(device)) return cpurtRet(cudaErrorInvalidDevice);
  if (topoBusIds) {
    snprintf(pciBusId, (size_t)len, "%s", topoBusIds[device]);
    return cudaSuccess;
  }
  int bus, slot;
  busIdParts(device, &bus, &slot);
  snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", pciDomain, bus, slot);
  return cudaSuccess;
}

/* Accepts "domain:bus:device.function" (any domain width, as nvidia-smi's
 * eight digits) and "bus:device.function" (domain 0), in any case. */
CPURT_API cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId) {
  cpurtInit();
  if (device == NULL || pciBusId == NULL) return cpurtRet(cudaErrorInvalidValue);
  unsigned dom = 0, bus, slot, fn;
  int used = 0;
  if (sscanf(pciBusId, "%x:%x:%x.%x%n", &dom, &bus, &slot, &fn, &used) != 4 ||
      pciBusId[used] != '\0') {
    dom = 0, used = 0;
    if (sscanf(pciBusId, "%x:%x.%x%n", &bus, &slot, &fn, &used) != 3 || pciBusId[used] != '\0')
      return cpurtRet(cudaErrorInvalidValue);
  }
  if (topoBusIds) {
    for (int d = 0; d < ndev; d++) {
      unsigned td, tb, ts, tf;
      if (sscanf(topoBusIds[d], "%x:%x:%x.%x", &td, &tb, &ts, &tf) == 4 && td == dom && tb == bus && ts == slot &&
          tf == fn) {
        *device = d;
        return cudaSuccess;
      }
    }
    return cpurtRet(cudaErrorInvalidDevice);
  }
  if (dom == (unsigned)pciDomain && fn == 0 && bus >= BUS_BASE && bus <= 0xff) {
    unsigned d = slot * BUSES_PER_SLOT + (bus - BUS_BASE);
    if (d < (unsigned)ndev) {
      *device = (int)d;
      return cudaSuccess;
    }
  }
  return cpurtRet(cudaErrorInvalidDevice);
}

CPURT_API cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) {
  cpurtInit();
  if (canAccessPeer == NULL) return cpurtRet(cudaErrorInvalidValue);
  if (!cpurtValidDevice(device) || !cpurtValidDevice(peerDevice))
    return cpurtRet(cudaErrorInvalidDevice);
  *canAccessPeer = device != peerDevice;   /* all "device" memory is host memory */
  return cudaSuccess;
}

/* Sets or clears the current device's access to peer; fails with `already`
 * when the bit is already in the requested state. */
static cudaError_t setPeer(int peer, bool enable, cudaError_t already) {
  int dev = cpurtSelf()->device;
  if (!cpurtValidDevice(peer) || peer == dev) return cpurtRet(cudaErrorInvalidDevice);
  size_t bit = (size_t)dev * ndev + peer;
  uint64_t mask = (uint64_t)1 << (bit % 64);
  cudaError_t err = cudaSuccess;
  pthread_mutex_lock(&peerLock);
  if (((peerBits[bit / 64] & mask) != 0) == enable) err = already;
  else peerBits[bit / 64] ^= mask;
  pthread_mutex_unlock(&peerLock);
  return cpurtRet(err);
}

CPURT_API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  cpurtInit();
  if (flags != 0) return cpurtRet(cudaErrorInvalidValue);
  return setPeer(peerDevice, true, cudaErrorPeerAccessAlreadyEnabled);
}

CPURT_API cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  cpurtInit();
  return setPeer(peerDevice, false, cudaErrorPeerAccessNotEnabled);
}

static void clearPeers(int dev) {
  pthread_mutex_lock(&peerLock);
  for (int p = 0; p < ndev; p++) {
    size_t bit = (size_t)dev * ndev + p;
    peerBits[bit / 64] &= ~((uint64_t)1 << (bit % 64));
  }
  pthread_mutex_unlock(&peerLock);
}

void cpurtPeerForkLock(void) { pthread_mutex_lock(&peerLock); }
void cpurtPeerForkUnlock(void) { pthread_mutex_unlock(&peerLock); }

static cudaError_t setFlags(int dev, unsigned flags) {
  if (flags & ~(unsigned)cudaDeviceMask) return cpurtRet(cudaErrorInvalidValue);
  struct cpurtDevice *d = cpurtDevice(dev);
  pthread_mutex_lock(&d->lock);
  d->flags = flags;
  pthread_mutex_unlock(&d->lock);
  return cudaSuccess;
}

CPURT_API cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  cpurtInit();
  return setFlags(cpurtSelf()->device, flags);
}

CPURT_API cudaError_t cudaGetDeviceFlags(unsigned int *flags) {
  cpurtInit();
  if (flags == NULL) return cpurtRet(cudaErrorInvalidValue);
  struct cpurtDevice *d = cpurtDevice(cpurtSelf()->device);
  pthread_mutex_lock(&d->lock);
  *flags = d->flags;
  pthread_mutex_unlock(&d->lock);
  return cudaSuccess;
}

CPURT_API cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  cpurtInit();
  if (!cpurtValidDevice(device)) return cpurtRet(cudaErrorInvalidDevice);
  if (flags != 0) return cpurtRet(cudaErrorInvalidValue);
  return setFlags(device, deviceFlags);
}

CPURT_API cudaError_t cudaDeviceReset(void) {
  cpurtInit();
  int dev = cpurtSelf()->device;
  cudaError_t err = cpurtSyncDevice(dev);
  if (err != cudaSuccess) return cpurtRet(err);
  cpurtFreeDeviceAllocs(dev);
  clearPeers(dev);
  return setFlags(dev, 0);
}

CPURT_API cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority,
                                                       int *greatestPriority) {
  cpurtInit();
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = PRIORITY_GREATEST;
  return cudaSuccess;
}

/* Free memory is what the kernel says is available to new allocations. */
static size_t availableRam(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (f != NULL) {
    char line[128];
    unsigned long long kb;
    while (fgets(line, sizeof(line), f))
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        fclose(f);
        return (size_t)kb << 10;
      }
    fclose(f);
  }
  struct sysinfo si;
  if (cpurtSim) return CPURT_SIM_DEVICE_MEMORY;
  return sysinfo(&si) == 0 ? (size_t)si.freeram * si.mem_unit : totalRam() / 2;
}

CPURT_API cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
  cpurtInit();
  if (free == NULL || total == NULL) return cpurtRet(cudaErrorInvalidValue);
  *total = totalRam();
  *free = availableRam();
  if (*free > *total) *free = *total;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaDriverGetVersion(int *driverVersion) {
  if (driverVersion == NULL) return cpurtRet(cudaErrorInvalidValue);
  *driverVersion = CUDART_VERSION;
  return cudaSuccess;
}

CPURT_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
  if (runtimeVersion == NULL) return cpurtRet(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}
