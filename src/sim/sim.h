/* The sim backend (docs/simulation.md): every rank of a communicator lives
 * in one process; a collective moves no data, its time comes from a model
 * of the plans every rank built, on a fabric read from a small text file.
 *
 *   fabric.c  the fabric file and the calibration file: links and routes
 *   flows.c   max-min fair sharing of links by flows (progressive filling)
 *   model.c   a collective's plans -> rounds of flows -> modelled time;
 *             flow file, link summary
 *   world.c   worlds (one per unique id), init, the executor table */
#ifndef ANYCCL_SIM_H
#define ANYCCL_SIM_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include "nccl.h"

/* ---- calibration (per device kind) -------------------------------------- */
struct simCalib {
  double blockGBps;       /* one lane (GPU block) pushing, GB/s */
  double nvlinkGBps;      /* one GPU's NVLink, per direction, GB/s */
  double pcieGBps;        /* GPU <-> NIC through the PCIe switch, per direction */
  double copyGBps;        /* a local copy (device memory) */
  double recvCopyGBps;    /* one block copying a p2p message out of its FIFO slot (0: not modelled) */
  double launchUs;        /* a kernel launch (one per phase) */
  double graphLaunchUs;   /* the same inside a CUDA graph (ANYCCL_SIM_GRAPH=1 uses it) */
  double idleLaunchUs;    /* a launch onto an idle stream: its latency, on the host that launches (0: none) */
  double graphIdleLaunchUs; /* the same for a CUDA graph's launch (ANYCCL_SIM_GRAPH=1 uses it) */
  double llStepUs;        /* an LL-protocol step */
  double simpleStepUs;    /* a simple-protocol step */
  double llEfficiency;    /* LL payload per wire byte */
  double nvlinkLatUs;     /* GPU -> NVSwitch -> GPU */
  /* the cuda backend's one-host kernels (symm.c) */
  double symmLaunchUs;    /* an LL or staged kernel's launch and start */
  double symmGraphLaunchUs; /* the same inside a CUDA graph (ANYCCL_SIM_GRAPH=1) */
  double symmLLBlockGBps; /* one block of an LL kernel storing lines (wire bytes) */
  double symmBlockGBps;   /* one block of a staged kernel reading or writing a peer */
  double symmBarrierUs;   /* one barrier of a staged kernel */
  double symmCopyGBps;    /* a staged kernel's copy in or out (device memory) */
  int netChannels;        /* network channels a connection across hosts deals its messages over (dataflow) */
  int model;              /* SIM_MODEL_*: `model` in the file, ANYCCL_SIM_MODEL overrides */
};
/* The time model's form (docs/simulation.md, "The time model"): lock-step
 * rounds (every round waits for its slowest flow), or dataflow (a lane's step
 * waits for its own input and a free FIFO slot at its receiver; ranks end
 * when their own lanes do). */
enum { SIM_MODEL_LOCKSTEP = 0, SIM_MODEL_DATAFLOW = 1 };

/* ---- fabric --------------------------------------------------------------- */
enum { SIM_RAIL = 0, SIM_FATTREE = 1 };
struct simFabric {
  char name[256];         /* the file, or "default" */
  int hosts, gpusPerHost, nicsPerHost;
  int kind;               /* SIM_RAIL or SIM_FATTREE */
  int hostsPerLeaf;
  double nicGbps, oversub, hopLatUs;
  char device[64];        /* calibration kind */
  char hostXml[256];
  struct simCalib calib;
  /* links: per GPU nvl tx, nvl rx, pcie tx, pcie rx; per NIC tx, rx; per
   * leaf up, down */
  int nGpus, nNics, nLeaves, nLinks;
  double* linkBps;        /* capacity in bytes/s, per link id */
  double* linkLat;        /* seconds */
  const int* gpuOf;       /* ranks -> GPUs for simRoute (not owned); NULL: rank r is GPU r */
};
/* Rank r's GPU in the fabric. */
static inline int simGpuOf(const struct simFabric* f, int r) { return f->gpuOf ? f->gpuOf[r] : r; }
/* Where a world's ranks sit when it is not rank r on GPU r (ncclCommSplit,
 * ncclCommShrink): the fabric made for fabricRanks ranks, rank r on GPU
 * gpu[r] as device dev[r]. */
struct simCluster;
struct anycclSimPlace {
  int n, fabricRanks;
  int *gpu, *dev;
  struct simCluster* cluster; /* the parent's (a reference) */
  int index;                  /* the world's number (flow file, trace), taken at the split's meeting; -1: none */
};
/* Parse a fabric file (path NULL: the default, 8 GPUs per host, enough hosts
 * for nranks); *err gets "file:line: field: what" on failure. */
ncclResult_t simFabricLoad(const char* path, int nranks, struct simFabric* f, char* err, size_t errLen);
/* The default fabric shaped for a communicator (ncclGroupSimulateEnd on
 * the cpu and cuda backends): gpusPerHost GPUs per host (0: 8) and as many
 * NICs as divide both it and 8; calibText (NULL: the built-in H200 values)
 * is a calibration file's text named calibName. ANYCCL_SIM_CALIB and
 * ANYCCL_SIM_MODEL override as for any fabric. */
struct simShape {
  int gpusPerHost;
  const char* calibName;
  const char* calibText;
};
ncclResult_t simFabricShape(int nranks, const struct simShape* shape, struct simFabric* f, char* err, size_t errLen);
ncclResult_t simCalibLoad(const char* path, struct simCalib* c, char* err, size_t errLen);
/* The same from an open stream (fuzz/fuzz_fabric.c reads them from memory);
 * path names the file in errors and is where files named in it are found.
 * openFiles 0: the calibration file a fabric names, ANYCCL_SIM_CALIB and
 * host_xml are not opened (only the fabric's own text is read). */
ncclResult_t simFabricRead(const char* path, FILE* in, int openFiles, int nranks, struct simFabric* f, char* err,
                           size_t errLen);
ncclResult_t simCalibRead(const char* path, FILE* in, struct simCalib* c, char* err, size_t errLen);
void simCalibDefaults(struct simCalib* c);
void simFabricFree(struct simFabric* f);
/* The route of src -> dst (GPU indices, or ranks mapped by gpuOf): link ids in *links (at most 8);
 * returns their count and the route's latency in *lat. */
/* 1 when ranks src and dst are on different hosts of the fabric. */
int simCrossHost(const struct simFabric* f, int src, int dst);
int simRoute(const struct simFabric* f, int src, int dst, int* links, double* lat);
void simLinkName(const struct simFabric* f, int id, char* buf, size_t len);
/* anyccl-topo (draw.c): a one-paragraph summary; a Graphviz drawing. */
void simFabricDescribe(const struct simFabric* f, FILE* out);
ncclResult_t simFabricWriteDot(const struct simFabric* f, FILE* out);

/* ---- flows: max-min fair sharing ----------------------------------------- */
struct simFlow {
  double bytes;           /* to move */
  double cap;             /* the flow's own rate cap, bytes/s (lane) */
  int nlinks;
  int links[8];
  double end;             /* out: seconds after the common start until done */
};
/* All flows start at time 0; rates are max-min fair (progressive filling),
 * recomputed whenever a flow ends. Fills flows[i].end. linkBps: capacities. */
ncclResult_t simFlowsRun(struct simFlow* flows, int nflows, const double* linkBps, int nLinks);
/* One progressive filling: the max-min fair rates of flows act[0..nact)
 * into rate[] (by flow index); cap and cnt: scratch, one per link. */
void simFlowsFill(const struct simFlow* flows, const int* act, int nact, const double* linkBps, double* cap, int* cnt,
                  double* rate);

/* ---- worlds ----------------------------------------------------------------- */
struct anycclPlan;
struct simSlot {
  uint64_t seq;
  int arrived, done;
  int queued;                /* every rank posted; modelled when its time is needed (cluster.c) */
  ncclResult_t res;
  double end;
  struct anycclPlan** plans; /* [n] */
  double* start;             /* [n]: virtual start of each rank's plan */
  void** ends;               /* [n]: each rank's deferred stream-op end (anyccl-cpu) */
  double* endAt;             /* [n]: scratch for resolving them */
};

struct anycclSimWorld {
  unsigned char key[NCCL_UNIQUE_ID_BYTES];
  int n, refs, index;
  struct anycclSimWorld* next;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct simFabric fabric;
  struct simCluster* cluster;       /* the worlds split from one root world (cluster.c); NULL: none */
  int inCluster;                    /* counted in the cluster's worlds */
  struct anycclPeerInfo* peerInfo;  /* [n], shared by the world's comms */
  int* gpu;                         /* [n] rank -> fabric GPU (fabric.gpuOf), or NULL: rank r is GPU r */
  int nHosts;                       /* hosts the ranks are on */
  int *hostOf, *localRank, *localRanks; /* [n]: dense host index, rank within it, ranks on it */
  /* ncclCommSplit's meeting of the world's ranks (anycclSimSplit) */
  uint64_t gatherGen;
  int gatherArrived, gatherReaders;
  int* gatherBuf;                   /* [2n]: color, key */
  int* gatherColors;                /* [n]: the meeting's colors, sorted, each once */
  int gatherNColors, gatherIndex;   /* their count; the number of the first one's world */
  int nch;                          /* ring channels (0 until the first comm built the rings) */
  int* ringOrder;                   /* [nch * n] */
  int* ringPos;                     /* [nch * n]: position of rank r in ring c */
  struct anycclConn* p2pConns;      /* [2n], never written: a conn's index names the peer */
  char* scratch;                    /* reserved, never touched */
  size_t scratchBytes;
  struct ncclComm** comms;          /* [n] */
  struct simSlot slots[2];
  /* outputs */
  FILE* flowFile;
  uint64_t nextFlowId;
  double* linkBytes;                /* per link */
  double* linkBusy;                 /* per link: seconds carrying traffic */
  double lastEnd;                   /* the end of the latest collective */
  struct simMemo* memo;             /* memo.c */
  uint64_t modelled, reused;        /* collectives modelled, and taken from the memo */
  /* ANYCCL_TRACE (simtrace.c) */
  int tracing, traceNamed, traceMaxLane;
  int tracePid;                     /* pid of rank 0 */
  int noSymm;                       /* the cpu backend's estimate: no one-host kernels */
};

/* The modelled end (seconds) of one collective given every rank's plan and
 * start, and each rank's own end in rankEnd[n] (NULL: not wanted; the
 * lock-step model ends every rank at *end); writes flows when the world has
 * a flow file. simModelCollective
 * (memo.c) reuses the result of an earlier launch whose plans were the same
 * (no flow file; ANYCCL_SIM_MEMO=0 turns that off); simModelRun (model.c)
 * always models. */
int simConnPeer(const struct anycclSimWorld* w, const struct ncclComm* comm, const struct anycclConn* c);
ncclResult_t simModelRun(struct anycclSimWorld* w, struct anycclPlan** plans, const double* start, double* end,
                         double* rankEnd);
void simMemoFree(struct anycclSimWorld* w);
ncclResult_t simModelCollective(struct anycclSimWorld* w, struct anycclPlan** plans, const double* start,
                                double* end, double* rankEnd);
void simLinkSummary(struct anycclSimWorld* w, FILE* out, int top);

/* ---- clusters (cluster.c) and their joint model (joint.c) ---------------------
 * A root world and every world split or shrunk from it (and from those)
 * are one cluster: one fabric, one virtual clock. While a cluster has more
 * than one world, a collective every rank launched waits in the cluster's
 * queue (lock-step model) until a stream needs the end of one (anyccl-cpu
 * calls simNeed before it waits); then the queue is modelled: alone when it
 * holds one world's collectives, else together (simJointRun). */
struct simJob {
  struct anycclSimWorld* w;
  struct simSlot* s;
  double end;
};
struct simCluster* simClusterNew(void);
void simClusterRef(struct simCluster* c);
void simClusterUnref(struct simCluster* c);
void simClusterWorlds(struct simCluster* c, int delta); /* a world joined (+1) or left (-1) */
/* 1: queue the world's complete collectives instead of modelling them now */
int simClusterDefers(const struct anycclSimWorld* w);
void simClusterQueue(struct anycclSimWorld* w, struct simSlot* s);
/* Model every queued collective of the cluster (serialized per cluster). */
void simClusterFlush(struct simCluster* c);
/* The last rank's work on a complete slot (sim_exec.c): resolve every
 * rank's end (e, or the starts after an error), free the plans, mark it done. */
void simSlotFinish(struct anycclSimWorld* w, struct simSlot* s, ncclResult_t res, double e);
ncclResult_t simJointRun(struct simJob* jobs, int njobs);

/* ---- ANYCCL_TRACE (simtrace.c) ----------------------------------------------- */
/* A flow of a round, with who sends it on which lane. */
struct simRoundFlow {
  int src, dst, lane, recvFrom;
};
struct simTrace {
  FILE* f;                /* NULL: not tracing */
  struct anycclSimWorld* w;
  uint64_t seq;
  double phaseStart;
  double *sendEnd, *recvEnd, *laneEnd; /* per lane of the phase (laneBase) */
  int *sends, *recvs;     /* per lane: sends and receives so far (the events' step numbers) */
  char* linkUsed;         /* per link: carried traffic in the last round */
};
/* 1 when this collective is traced (the trace file is locked until simTraceEnd). */
int simTraceBegin(struct anycclSimWorld* w, struct simTrace* st, uint64_t seq);
/* The same in a trace file the caller locked (several communicators'
 * collectives modelled together, joint.c); the caller sets st->f to NULL
 * before simTraceEnd and unlocks it once. */
int simTraceOpen(struct anycclSimWorld* w, struct simTrace* st, uint64_t seq, FILE* f);
ncclResult_t simTracePhase(struct simTrace* st, const int* laneBase, int n, double tPhase, double tLanes);
void simTraceRound(struct simTrace* st, const struct simFlow* flows, const struct simRoundFlow* info,
                   const double* lat, int nflows, const int* laneBase, double t, double stepLat,
                   double roundLen);
/* The dataflow model's steps, one at a time: a flow of `bytes` from src to
 * dst on `lane` from t0 to t1 (dst < 0: a step that sends nothing). */
void simTraceStep(struct simTrace* st, const int* laneBase, int src, int dst, int lane, double bytes, double t0,
                  double t1);
void simTracePhaseEnd(struct simTrace* st, struct anycclPlan** plans, int p, const int* laneBase, int n, double t);
void simTraceEnd(struct simTrace* st);

#endif
