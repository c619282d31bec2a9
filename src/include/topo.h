/* The topology model: NCCL's XML topology format, read and written; the
 * machine we run on, detected; virtual hosts; paths between GPUs and NICs;
 * rings that follow the topology.
 *
 * The model is the XML tree itself (every element, every attribute in file
 * order, so that a dump is faithful), plus a typed view of each element that
 * the loader fills after checking it, plus per-host indexes (GPUs, NICs,
 * paths). Elements and attributes are NCCL's:
 *
 *   <system version="1">                        one host
 *     <cpu numaid host_hash affinity arch vendor familyid modelid>
 *       <pci busid class vendor device subsystem_vendor subsystem_device
 *            link_speed link_width>             a PCIe switch or a device
 *         <pci ...> ...                         nested switches
 *         <gpu dev sm rank gdr>
 *           <nvlink target count tclass/>       tclass 0x068000: an NVSwitch
 *           <c2c bw count/>
 *         </gpu>
 *         <nic><net name dev speed port latency guid maxconn gdr/></nic>
 *         <pcilink target/>
 *       </pci>
 *       <nic>...</nic>                          a NIC without PCI (sockets)
 *     </cpu>
 *   </system>
 *
 * Several hosts: an outer <cluster> holding one <system> per host (host H is
 * the H-th <system>; an optional hostid="name" attribute names it), or one
 * <system> whose <cpu> elements carry different host_hash values (NCCL's
 * fused multi-node form), or one file per host: NCCL_TOPO_FILE=dir/x.xml and
 * NCCL_HOSTID=H load dir/x_node<H>.xml when it exists (NCCL-GP's rule).
 *
 * Unknown attributes are kept (and written back); unknown elements are errors.
 * Errors name the file, line, element and attribute, and what was expected:
 *   bad.xml:12: <gpu> attribute "sm": expected an integer, got "9x"
 */
#ifndef ANYCCL_TOPO_H
#define ANYCCL_TOPO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "nccl.h"

#define ANYCCL_TOPO_BUSID_LEN 20 /* "0000:17:00.0" and longer domains, NUL included */
#define ANYCCL_TOPO_ERR_LEN 512  /* room for one error message */

/* ---- the tree ------------------------------------------------------------ */
typedef enum {
  TOPO_CLUSTER = 0, /* anyccl's outer element for several hosts in one file */
  TOPO_SYSTEM,
  TOPO_CPU,
  TOPO_PCI,
  TOPO_PCILINK,
  TOPO_GPU,
  TOPO_NVLINK,
  TOPO_C2C,
  TOPO_NIC,
  TOPO_NET,
  TOPO_KINDS
} anycclTopoKind;

enum { TOPO_ARCH_X86 = 0, TOPO_ARCH_ARM, TOPO_ARCH_POWER };
enum { TOPO_VENDOR_OTHER = 0, TOPO_VENDOR_INTEL, TOPO_VENDOR_AMD, TOPO_VENDOR_ZHAOXIN };

/* PCI classes that matter (the "class" attribute, 24 bits). */
#define TOPO_CLASS_NVSWITCH 0x068000
#define TOPO_CLASS_CPU 0x068001 /* NVLink to a CPU (POWER) */

struct anycclTopoAttr {
  char* key;
  char* value;
};

struct anycclTopoNode {
  anycclTopoKind kind;
  int line; /* line in the file it was read from; 0 when built in memory */
  struct anycclTopoNode* parent;
  struct anycclTopoNode** subs;
  int nSubs, capSubs;
  struct anycclTopoAttr* attrs; /* in file order */
  int nAttrs, capAttrs;
  /* Typed view of the attributes, valid after anycclTopoCheckNode(). */
  union {
    struct { int version; } system;
    struct {
      int numaId, arch, vendor, familyId, modelId;
      int hasHostHash;
      uint64_t hostHash;
    } cpu;
    struct {
      char busId[ANYCCL_TOPO_BUSID_LEN]; /* normalised: lower case */
      int64_t id;                        /* numeric bus id */
      int cls;                           /* PCI class, 24 bits */
      int width;                         /* lanes (0: unknown, counted as 16) */
      float laneGbps;                    /* usable Gb/s per lane for link_speed */
      float bw;                          /* GB/s of the link to the parent */
    } pci;
    struct { int dev, sm, rank, gdr; } gpu;
    struct {
      char target[ANYCCL_TOPO_BUSID_LEN];
      int count, tclass;
    } nvlink;
    struct { int bw, count; } c2c;
    struct { char target[ANYCCL_TOPO_BUSID_LEN]; } pcilink;
    struct {
      const char* name; /* points into the attribute */
      int dev, speed, port, maxconn, gdr;
      float latency;
      uint64_t guid;
    } net;
  };
};

/* ---- paths --------------------------------------------------------------- */
/* Path types, best first, as NCCL's (LOC < NVL < NVB < PIX < PXB < PHB < SYS < NET). */
typedef enum {
  TOPO_PATH_LOC = 0, /* the same device */
  TOPO_PATH_NVL,     /* NVLink, direct or through NVSwitch */
  TOPO_PATH_NVB,     /* NVLink through one intermediate GPU */
  TOPO_PATH_PIX,     /* PCIe through at most one PCIe switch */
  TOPO_PATH_PXB,     /* PCIe through several switches, not through the CPU */
  TOPO_PATH_PHB,     /* PCIe through the CPU's host bridge */
  TOPO_PATH_SYS,     /* across CPU sockets / NUMA nodes */
  TOPO_PATH_NET,     /* across hosts, through NICs */
  TOPO_PATH_DIS      /* no path */
} anycclTopoPathType;

/* How two ranks on such a path talk: peer copies, shared memory, network. */
typedef enum { TOPO_TRANSPORT_P2P = 0, TOPO_TRANSPORT_SHM, TOPO_TRANSPORT_NET } anycclTopoTransport;

struct anycclTopoPath {
  int type;  /* anycclTopoPathType */
  float bw;  /* GB/s: the narrowest link on the way */
};

/* ---- hosts --------------------------------------------------------------- */
struct anycclTopoGpu {
  struct anycclTopoNode* node; /* <gpu> */
  struct anycclTopoNode* pci;  /* its <pci> */
  const char* busId;           /* pci->pci.busId */
  int cpu;                     /* index in the host's cpus */
  float nvsBw;                 /* GB/s of its NVLinks to NVSwitches */
};

struct anycclTopoNet {
  struct anycclTopoNode* node; /* <net> */
  struct anycclTopoNode* pci;  /* the <pci> that holds its <nic>, NULL if under a <cpu> */
  int cpu;                     /* index in the host's cpus */
  float bw;                    /* GB/s (speed, Mb/s, / 8000; 10 Gb/s when unknown) */
};

struct anycclTopoHost {
  int index;
  char name[64];               /* hostid attribute, else the index */
  uint64_t hostHash;           /* anycclTopoHostHash(name) */
  struct anycclTopoNode* system;
  int nCpus;
  struct anycclTopoNode** cpus;
  int nGpus;                   /* sorted by dev, then bus id */
  struct anycclTopoGpu* gpus;
  int nNets;                   /* sorted by dev */
  struct anycclTopoNet* nets;
  struct anycclTopoPath* gpuPaths; /* [a * nGpus + b] */
  struct anycclTopoPath* netPaths; /* [g * nNets + n]: GPU g to NIC n */
};

struct anycclTopo {
  char* file;                  /* the file it came from; NULL when detected */
  struct anycclTopoNode* root; /* <system> or <cluster> */
  int nHosts;
  struct anycclTopoHost* hosts;
};

/* ---- loading, writing, detecting ------------------------------------------
 * err/errLen: where the first error goes (file:line: element attribute: what
 * was expected). With err == NULL the error is logged as a WARN instead. */
ncclResult_t anycclTopoLoad(const char* path, struct anycclTopo** topo, char* err, size_t errLen);
/* The same from memory; name is used in error messages. */
ncclResult_t anycclTopoParse(const char* text, size_t len, const char* name, struct anycclTopo** topo, char* err,
                             size_t errLen);
/* The machine we run on: NUMA nodes and CPUs, NICs (/sys/class/net) with
 * their PCIe paths, GPUs and NVLinks through NVML when libnvidia-ml.so.1 is
 * there. host_hash follows NCCL_HOSTID. */
ncclResult_t anycclTopoDetect(struct anycclTopo** topo);
/* NCCL's XML: one host (host >= 0, as a <system>), or all (host < 0: the file
 * as loaded; a <cluster> when there are several hosts). */
ncclResult_t anycclTopoWrite(const struct anycclTopo* topo, int host, FILE* f);
ncclResult_t anycclTopoWriteFile(const struct anycclTopo* topo, int host, const char* path);
/* Graphviz DOT of one host (host >= 0) or all. */
ncclResult_t anycclTopoWriteDot(const struct anycclTopo* topo, int host, FILE* f);
void anycclTopoFree(struct anycclTopo* topo);
/* Same elements, same attributes (in order), same values: 1, else 0 and a
 * description of the first difference in why. */
int anycclTopoEqual(const struct anycclTopo* a, const struct anycclTopo* b, char* why, size_t whyLen);

/* ---- virtual hosts --------------------------------------------------------
 * hostId is NCCL_HOSTID's value (NULL: not set). */
/* The host hash: the one init uses (FNV-1a 64 of "hostid:" + id; without a
 * host id, of the host name and the boot id). */
uint64_t anycclTopoHostHash(const char* hostId);
/* The PCI domain of a virtual host's devices, as anyccl-cpu makes it: a
 * decimal id up to 0xffff is the domain itself, any other id is hashed. */
int anycclTopoHostDomain(const char* hostId);
/* Which host of a topology is hostId: a number H is host H; a name matches a
 * hostid attribute or a host hash; otherwise hash(hostId) % nHosts. A topology
 * of one host serves every host id. -1 (with err set) when H is out of range. */
int anycclTopoSelectHost(const struct anycclTopo* topo, const char* hostId, char* err, size_t errLen);
/* The file that describes host hostId: "<base>_node<H>.xml" (H as given, or
 * the number of the host id) when it exists, else base itself. */
void anycclTopoHostFile(const char* base, const char* hostId, char* out, size_t outLen);
/* Load the topology of host hostId from base (per-host file, or the host's
 * <system> of a multi-host file). *topo holds that host only (host index 0).
 * A one-host file that is not a per-host file is shared by all hosts: its bus
 * ids are moved to the host's PCI domain (anycclTopoHostDomain) so that they
 * stay unique across virtual hosts. */
ncclResult_t anycclTopoLoadHost(const char* base, const char* hostId, struct anycclTopo** topo, char* err,
                                size_t errLen);
/* The second half of anycclTopoLoadHost, on a topology already read (from a
 * file or from memory): narrow it to host hostId; perHost: it came from a
 * per-host file (then it is that host, whatever it holds). */
ncclResult_t anycclTopoKeepHost(struct anycclTopo* topo, const char* hostId, int perHost, char* err, size_t errLen);
/* For anyccl-cpu: the GPUs of host hostId described by the topology file
 * path (resolved as anycclTopoLoadHost does), in dev order. Writes at most
 * max bus ids to busIds (may be NULL) and the number of GPUs to *count.
 * Exported from libnccl (dlsym-able). */
ncclResult_t anycclTopoListGpus(const char* path, const char* hostId, int* count,
                                char (*busIds)[ANYCCL_TOPO_BUSID_LEN], int max);
/* For communicator init: the topology of this process's host, from
 * NCCL_TOPO_FILE (and NCCL_HOSTID) or detected; written to
 * NCCL_TOPO_DUMP_FILE when rank == NCCL_TOPO_DUMP_FILE_RANK. */
ncclResult_t anycclTopoGetSystem(int rank, struct anycclTopo** topo);

/* ---- paths --------------------------------------------------------------- */
const char* anycclTopoPathName(int type);           /* "NVL", "PIX", ... */
const char* anycclTopoTransportName(int transport); /* "P2P", "SHM", "NET" */
anycclTopoTransport anycclTopoPathTransport(int type);
/* Index of the GPU with this bus id in the host (case-insensitive), or -1. */
int anycclTopoFindGpu(const struct anycclTopoHost* host, const char* busId);
/* Path between GPUs a and b of one host, and from GPU g to NIC n. */
struct anycclTopoPath anycclTopoGpuPath(const struct anycclTopoHost* host, int a, int b);
struct anycclTopoPath anycclTopoNetPath(const struct anycclTopoHost* host, int g, int n);
/* Between GPU a of host ha and GPU b of host hb (through NICs na/nb when the
 * hosts differ; -1: the best NIC of each GPU). */
struct anycclTopoPath anycclTopoPathBetween(const struct anycclTopoHost* ha, int a, int na,
                                            const struct anycclTopoHost* hb, int b, int nb);

/* ---- rings ----------------------------------------------------------------
 * Each rank says which host it is on (an index into hosts[]) and its bus id.
 * The rings: within a host, consecutive ranks use the fastest links (the order
 * maximises the narrowest link, then the sum); each host is one contiguous
 * segment of every ring, so a ring crosses every host boundary exactly once;
 * channel c enters and leaves host h through NIC nic[c][h], and channels use
 * different NICs while there are NICs close to the host's GPUs left (several
 * channels share one only when there are more channels than such NICs).
 * hosts[h] may be NULL (topology unknown): that host's ranks keep rank order
 * and no NIC is named. */
struct anycclTopoRank {
  int host;
  char busId[ANYCCL_TOPO_BUSID_LEN];
};

struct anycclTopoRings {
  int nRanks, nHosts, nChannels;
  int* order;       /* [c * nRanks + i]: the rank at position i of ring c */
  int* nic;         /* [c * nHosts + h]: index in hosts[h]->nets, -1 if none */
  int* gpu;         /* [r]: index of rank r's GPU in its host, -1 if unknown */
};

ncclResult_t anycclTopoBuildRings(const struct anycclTopoHost* const* hosts, int nHosts,
                                  const struct anycclTopoRank* ranks, int nRanks, int nChannels,
                                  struct anycclTopoRings** rings);
void anycclTopoRingsFree(struct anycclTopoRings* rings);

/* ---- building blocks (detection, tests, the tool) -------------------------- */
const char* anycclTopoKindName(anycclTopoKind kind);
struct anycclTopoNode* anycclTopoNodeNew(anycclTopoKind kind, struct anycclTopoNode* parent);
void anycclTopoNodeFree(struct anycclTopoNode* node);
const char* anycclTopoGetAttr(const struct anycclTopoNode* node, const char* key);
ncclResult_t anycclTopoSetAttr(struct anycclTopoNode* node, const char* key, const char* value);
/* Check the attributes of one element and fill its typed view. file is for
 * the message. */
ncclResult_t anycclTopoCheckNode(struct anycclTopoNode* node, const char* file, char* err, size_t errLen);
/* Build the host indexes and paths of a checked tree (topo->root set). */
ncclResult_t anycclTopoFinish(struct anycclTopo* topo, char* err, size_t errLen);
/* Parse a PCI bus id ("0000:17:00.0"; the domain may have 1..8 hex digits):
 * 0 and the normalised text / numeric id, or -1. */
int anycclTopoParseBusId(const char* s, char out[ANYCCL_TOPO_BUSID_LEN], int64_t* id);
/* Format an error into err (or WARN it when err is NULL); returns ncclInvalidUsage. */
ncclResult_t anycclTopoError(char* err, size_t errLen, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
/* Compute host->gpuPaths and host->netPaths (anycclTopoFinish calls it). */
ncclResult_t anycclTopoComputePaths(struct anycclTopoHost* host);

#endif
