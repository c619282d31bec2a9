/* mpi_coll_bench: the MPI side of bench/cpu_vs_mpi.sh.
 *
 * Times MPI collectives and prints the table of anyccl's perf tools
 * (nccl-tests' format: same header, columns, size/count conventions and
 * bus-bandwidth factors), so that one parser reads both:
 *
 *   mpirun -np 4 ./mpi_coll_bench -c allreduce -b 8 -e 32M -f 4 -n 20 -w 1
 *
 * Collectives (-c NAME, a comma list, or "all": one after another, each with
 * its own table), float32, sum:
 *
 *   allreduce      MPI_Allreduce             size = count*4           busbw = algbw * 2(n-1)/n
 *   allgather      MPI_Allgather             size = count*4*n (total) busbw = algbw * (n-1)/n
 *   reducescatter  MPI_Reduce_scatter_block  size = count*4*n (sent)  busbw = algbw * (n-1)/n
 *   broadcast      MPI_Bcast                 size = count*4           busbw = algbw
 *   reduce         MPI_Reduce                size = count*4           busbw = algbw
 *   alltoall       MPI_Alltoall              size = count*4*n         busbw = algbw * (n-1)/n
 *   gather         MPI_Gather                size = count*4*n         busbw = algbw * (n-1)/n
 *   scatter        MPI_Scatter               size = count*4*n         busbw = algbw * (n-1)/n
 *   sendrecv       MPI_Sendrecv, a ring (rank+1, rank-1)               busbw = algbw
 *
 * (count per rank of the split collectives = size/4/n rounded down to a
 * multiple of 16 bytes, as nccl-tests; -c also accepts the perf tools'
 * names: all_reduce, all_gather, reduce_scatter, bcast.)
 *
 * Timing as the perf tools: per size, -w warm-up calls, a barrier, -n calls
 * back to back timed with the host clock, time per call averaged over the
 * ranks (-a: 0 rank 0, 1 average, 2 min, 3 max). The buffers move by one
 * message per iteration within -e bytes (cache effects), as nccl-tests does.
 * Then (-c 1, the default) the inputs are refilled, one more call runs and
 * every output element is compared with the exact expected value (inputs are
 * small integers, so float sums are exact); #wrong counts the mismatches.
 *
 * In-place: MPI_IN_PLACE where MPI has it (allreduce, allgather,
 * reduce_scatter_block: result at the start of the buffer, reduce and gather
 * at the root, scatter at the root, alltoall), MPI_Sendrecv_replace for
 * sendrecv. MPI_Bcast has no out-of-place form: out-of-place the root sends
 * from its send buffer and its receive buffer is left alone (no local copy,
 * which favours MPI slightly); in-place the root sends from its receive buffer.
 *
 * Flags: -b -e (K/M/G binary) -f -i -n -w -r -a -c (number: check
 * iterations 0/1; name: collective) -d float -o sum (others refused),
 * -h. Exit status 0, or 7 when data was wrong, 1 for bad flags.
 *
 * Build: mpicc.openmpi -O2 -o mpi_coll_bench_openmpi bench/mpi_coll_bench.c
 *        mpicc.mpich   -O2 -o mpi_coll_bench_mpich   bench/mpi_coll_bench.c
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BENCH_VERSION "0.1.0"
#define FORMAT_VERSION "2.19.6"

enum { AR, AG, RS, BC, RD, A2A, GA, SC, SR, NCOLL };

static const struct {
  const char* name;  /* -c name */
  const char* alias; /* the perf tool's name */
  const char* mpi;   /* the MPI call */
  int rooted, reduces;
} colls[NCOLL] = {
    [AR] = {"allreduce", "all_reduce", "MPI_Allreduce", 0, 1},
    [AG] = {"allgather", "all_gather", "MPI_Allgather", 0, 0},
    [RS] = {"reducescatter", "reduce_scatter", "MPI_Reduce_scatter_block", 0, 1},
    [BC] = {"broadcast", "bcast", "MPI_Bcast", 1, 0},
    [RD] = {"reduce", "reduce", "MPI_Reduce", 1, 1},
    [A2A] = {"alltoall", "alltoall", "MPI_Alltoall", 0, 0},
    [GA] = {"gather", "gather", "MPI_Gather", 1, 0},
    [SC] = {"scatter", "scatter", "MPI_Scatter", 1, 0},
    [SR] = {"sendrecv", "sendrecv", "MPI_Sendrecv", 0, 0},
};

static struct {
  size_t minBytes, maxBytes, stepBytes, stepFactor;
  int iters, warmup, check, root, average;
  unsigned colls; /* bit c: run collective c */
} opt = {8, 32 << 20, 1 << 20, 1, 20, 1, 1, 0, 1, 1u << AR};

static int rank, nranks;
static char host[256];

/* ---- sizes and counts (nccl-tests' conventions) -------------------------- */

struct counts {
  size_t send, recv, param; /* elements */
  size_t sendInplaceOffset, recvInplaceOffset;
};

static size_t perRank(size_t count) { return (count / (size_t)nranks) & ~(size_t)3; /* 16 bytes of float */ }

static void getCounts(int c, size_t count, struct counts* k) {
  size_t base = perRank(count);
  memset(k, 0, sizeof(*k));
  switch (c) {
    case AR: case BC: case RD: case SR: k->send = k->recv = k->param = count; break;
    case AG: case GA: k->send = base, k->recv = base * nranks, k->param = base, k->sendInplaceOffset = base; break;
    case RS: case SC: k->send = base * nranks, k->recv = base, k->param = base, k->recvInplaceOffset = base; break;
    case A2A: k->send = k->recv = base * nranks, k->param = base; break;
  }
}

static void bandwidth(int c, size_t param, double sec, double* algBw, double* busBw) {
  double n = nranks, bytes = (double)param * sizeof(float);
  switch (c) {
    case AR: *algBw = bytes / 1e9 / sec, *busBw = *algBw * 2 * (n - 1) / n; break;
    case AG: case RS: case A2A: case GA: case SC: *algBw = bytes * n / 1e9 / sec, *busBw = *algBw * (n - 1) / n; break;
    default: *algBw = bytes / 1e9 / sec, *busBw = *algBw; break;
  }
}

/* ---- one call ------------------------------------------------------------ */

/* send and recv: the buffers already shifted for this iteration. */
static void runColl(int c, char* send, char* recv, const struct counts* k, int inPlace) {
  int n = (int)k->param, root = opt.root;
  char* sp = inPlace ? recv + k->sendInplaceOffset * sizeof(float) * rank : send;
  char* rp = recv + (inPlace ? k->recvInplaceOffset * sizeof(float) * rank : 0);
  int next = (rank + 1) % nranks, prev = (rank - 1 + nranks) % nranks;
  switch (c) {
    case AR:
      MPI_Allreduce(inPlace ? MPI_IN_PLACE : send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case AG:
      if (inPlace) {
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      } else {
        MPI_Allgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      }
      break;
    case RS: /* in place: input in recv (n*nranks), result at recv[0..n) */
      MPI_Reduce_scatter_block(inPlace ? MPI_IN_PLACE : send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case BC:
      MPI_Bcast(rank == root && !inPlace ? send : recv, n, MPI_FLOAT, root, MPI_COMM_WORLD);
      break;
    case RD:
      if (inPlace) {
        /* non-root: recvbuf is not significant; keep it from aliasing sendbuf. (MPICH 4.0.2 crashes in
         * MPI_Reduce(MPI_IN_PLACE) at a root other than 0 from 32 KB on: use -r 0 there.) */
        MPI_Reduce(rank == root ? MPI_IN_PLACE : recv, rank == root ? recv : send, n, MPI_FLOAT, MPI_SUM, root,
                   MPI_COMM_WORLD);
      } else {
        MPI_Reduce(send, recv, n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
      }
      break;
    case A2A:
      if (inPlace) {
        MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      } else {
        MPI_Alltoall(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      }
      break;
    case GA:
      if (inPlace && rank == root) {
        MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, MPI_FLOAT, root, MPI_COMM_WORLD);
      } else {
        MPI_Gather(sp, n, MPI_FLOAT, recv, n, MPI_FLOAT, root, MPI_COMM_WORLD);
      }
      break;
    case SC:
      if (inPlace && rank == root) { /* the root's own block stays where it is: recv + root*n */
        MPI_Scatter(recv, n, MPI_FLOAT, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, root, MPI_COMM_WORLD);
      } else {
        MPI_Scatter(inPlace ? recv : send, n, MPI_FLOAT, rp, n, MPI_FLOAT, root, MPI_COMM_WORLD);
      }
      break;
    case SR:
      if (inPlace) {
        MPI_Sendrecv_replace(recv, n, MPI_FLOAT, next, 0, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Sendrecv(send, n, MPI_FLOAT, next, 0, recv, n, MPI_FLOAT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      break;
  }
}

/* ---- data: inputs are small integers, so every float sum is exact --------- */

static float val(int r, size_t j) {
  uint32_t h = (uint32_t)j * 2654435761u + (uint32_t)r * 40503u + 12345u;
  h ^= h >> 15;
  return (float)((int)(h & 0xffff) - 32768);
}

static float sumVal(size_t j) {
  float s = 0;
  for (int r = 0; r < nranks; r++) s += val(r, j);
  return s;
}

static void fill(float* p, size_t n, int r, size_t j0) {
  for (size_t j = 0; j < n; j++) p[j] = val(r, j0 + j);
}

/* Fills the inputs of one call (no shift), runs it, returns the wrong elements. */
static long long checkColl(int c, char* send, char* recv, const struct counts* k, int inPlace) {
  size_t b = k->param;
  int root = opt.root, prev = (rank - 1 + nranks) % nranks;
  float* in = (float*)(inPlace ? recv + k->sendInplaceOffset * sizeof(float) * rank : send);
  float* out = (float*)recv;
  const float poison = -1e30f;
  for (size_t j = 0; j < (opt.maxBytes + 64) / sizeof(float); j++) ((float*)recv)[j] = poison;
  /* inputs */
  switch (c) {
    case AR: case RD: case SR: fill(in, b, rank, 0); break;
    case BC: if (rank == root) fill(in, b, rank, 0); break;
    case AG: case GA: fill(in, b, rank, 0); break;
    case RS: case A2A: fill(in, b * nranks, rank, 0); break;
    case SC: if (rank == root) fill(in, b * nranks, rank, 0); break;
  }
  runColl(c, send, recv, k, inPlace);
  long long wrong = 0;
#define EXPECT(idx, v)                  \
  do {                                  \
    if (out[idx] != (v)) wrong++;       \
  } while (0)
  switch (c) {
    case AR: for (size_t j = 0; j < b; j++) EXPECT(j, sumVal(j)); break;
    case RD: if (rank == root) for (size_t j = 0; j < b; j++) EXPECT(j, sumVal(j)); break;
    case SR: for (size_t j = 0; j < b; j++) EXPECT(j, val(prev, j)); break;
    case BC: if (rank != root || inPlace) for (size_t j = 0; j < b; j++) EXPECT(j, val(root, j)); break;
    case AG:
      for (int s = 0; s < nranks; s++)
        for (size_t j = 0; j < b; j++) EXPECT(s * b + j, val(s, j));
      break;
    case GA:
      if (rank == root)
        for (int s = 0; s < nranks; s++)
          for (size_t j = 0; j < b; j++) EXPECT(s * b + j, val(s, j));
      break;
    case RS:
      for (size_t j = 0; j < b; j++) {
        float s = 0;
        for (int r = 0; r < nranks; r++) s += val(r, rank * b + j);
        EXPECT(j, s);
      }
      break;
    case A2A:
      for (int s = 0; s < nranks; s++)
        for (size_t j = 0; j < b; j++) EXPECT(s * b + j, val(s, rank * b + j));
      break;
    case SC: {
      size_t o = inPlace ? rank * b : 0;
      for (size_t j = 0; j < b; j++) EXPECT(o + j, val(root, rank * b + j));
      break;
    }
  }
#undef EXPECT
  return wrong;
}

/* ---- the table ------------------------------------------------------------ */

static void fmtFloat(double v, int width, char* out) { /* nccl-tests: 2, 1, 0 decimals as they fit */
  if (snprintf(out, (size_t)width + 1, "%*.2f", width, v) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.1f", width, v) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.0f", width, v) <= width) return;
  snprintf(out, (size_t)width + 1, width >= 7 ? "%*.1e" : "%*.0e", width, v);
}

static double aggregate(double sec) {
  double r = sec;
  switch (opt.average) {
    case 0: MPI_Bcast(&r, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD); break;
    case 2: MPI_Allreduce(&sec, &r, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD); break;
    case 3: MPI_Allreduce(&sec, &r, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); break;
    default: MPI_Allreduce(&sec, &r, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), r /= nranks; break;
  }
  return r;
}

static size_t nextSize(size_t s) { return opt.stepFactor > 1 ? (s ? s * opt.stepFactor : 1) : s + opt.stepBytes; }

/* One collective over the sizes: returns the measurements with wrong data;
 * adds the busbw of every row to *bwSum. */
static int sweep(int c, char* send, char* recv, double* bwSum, int* bwCount) {
  int errors = 0;
  /* warm-up every size, doubling, as the perf tools */
  for (size_t size = opt.minBytes; size <= opt.maxBytes; size = size ? size * 2 : 1) {
    struct counts k;
    getCounts(c, size / sizeof(float), &k);
    for (int w = 0; w < opt.warmup; w++) runColl(c, send, recv, &k, 0);
  }
  for (size_t size = opt.minBytes; size <= opt.maxBytes; size = nextSize(size)) {
    struct counts k;
    getCounts(c, size / sizeof(float), &k);
    size_t total = (k.send > k.recv ? k.send : k.recv) * sizeof(float);
    size_t steps = total ? opt.maxBytes / total : 1;
    if (steps == 0) steps = 1;
    char row[512];
    int len = snprintf(row, sizeof(row), "%12zu  %12zu  %8s  %6s  %6i", total, k.param, "float",
                       colls[c].reduces ? "sum" : "none", colls[c].rooted ? opt.root : -1);
    for (int inPlace = 0; inPlace <= 1; inPlace++) {
      runColl(c, send, recv, &k, inPlace); /* as the perf tools: one call, then the timed loop */
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int it = 0; it < opt.iters; it++) {
        size_t shift = total * ((size_t)it % steps);
        runColl(c, send + shift, recv + shift, &k, inPlace);
      }
      double sec = aggregate((MPI_Wtime() - t0) / (opt.iters > 0 ? opt.iters : 1));
      double algBw = 0, busBw = 0;
      if (sec > 0) bandwidth(c, k.param, sec, &algBw, &busBw);
      char t[16], a[16], bb[16];
      fmtFloat(sec * 1e6, 7, t), fmtFloat(algBw, 6, a), fmtFloat(busBw, 6, bb);
      if (opt.check) {
        long long w = checkColl(c, send, recv, &k, inPlace), all = 0;
        MPI_Allreduce(&w, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (all) errors++;
        len += snprintf(row + len, sizeof(row) - len, "  %7s  %6s  %6s  %6g", t, a, bb, (double)all);
      } else {
        len += snprintf(row + len, sizeof(row) - len, "  %7s  %6s  %6s    N/A", t, a, bb);
      }
      *bwSum += busBw, (*bwCount)++;
    }
    if (rank == 0) printf("%s\n", row);
  }
  return errors;
}

/* ---- flags ------------------------------------------------------------------ */

static double parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'G': case 'g': return v * (1 << 30);
    case 'M': case 'm': return v * (1 << 20);
    case 'K': case 'k': return v * (1 << 10);
    default: return v;
  }
}

/* "allreduce", "all", or a comma list ("allgather,alltoall"): a bit mask, 0 when a name is unknown. */
static unsigned parseColls(const char* arg) {
  unsigned mask = 0;
  char* copy = strdup(arg);
  for (char* s = strtok(copy, ","); s; s = strtok(NULL, ",")) {
    unsigned bit = 0;
    if (strcmp(s, "all") == 0) bit = (1u << NCOLL) - 1;
    for (int c = 0; c < NCOLL; c++)
      if (strcmp(s, colls[c].name) == 0 || strcmp(s, colls[c].alias) == 0) bit = 1u << c;
    if (bit == 0) {
      mask = 0;
      break;
    }
    mask |= bit;
  }
  free(copy);
  return mask;
}

static void usage(const char* prog) {
  printf("USAGE: %s [-c collective[,collective...]|all] [-b minBytes] [-e maxBytes] [-f factor | -i incBytes]\n"
         "       [-n iters] [-w warmup] [-c 0|1 (check)] [-r root] [-a 0|1|2|3] [-d float] [-o sum]\n"
         "collectives:",
         prog);
  for (int c = 0; c < NCOLL; c++) printf(" %s", colls[c].name);
  printf("\n");
}

static int parseArgs(int argc, char** argv) {
  int c;
  while ((c = getopt(argc, argv, "c:b:e:f:i:n:w:r:a:d:o:h")) != -1) {
    switch (c) {
      case 'c':
        if (isdigit((unsigned char)optarg[0])) {
          opt.check = atoi(optarg);
        } else if ((opt.colls = parseColls(optarg)) == 0) {
          if (rank == 0) fprintf(stderr, "unknown collective '%s'\n", optarg), usage(argv[0]);
          return 1;
        }
        break;
      case 'b': opt.minBytes = (size_t)parseSize(optarg); break;
      case 'e': opt.maxBytes = (size_t)parseSize(optarg); break;
      case 'f': opt.stepFactor = (size_t)strtol(optarg, NULL, 0); break;
      case 'i': opt.stepBytes = (size_t)parseSize(optarg), opt.stepFactor = 1; break;
      case 'n': opt.iters = atoi(optarg); break;
      case 'w': opt.warmup = atoi(optarg); break;
      case 'r': opt.root = atoi(optarg); break;
      case 'a': opt.average = atoi(optarg); break;
      case 'd':
        if (strcmp(optarg, "float") != 0) {
          if (rank == 0) fprintf(stderr, "only -d float is supported\n");
          return 1;
        }
        break;
      case 'o':
        if (strcmp(optarg, "sum") != 0) {
          if (rank == 0) fprintf(stderr, "only -o sum is supported\n");
          return 1;
        }
        break;
      case 'h': if (rank == 0) usage(argv[0]); return 1;
      default: if (rank == 0) usage(argv[0]); return 1;
    }
  }
  if (opt.minBytes > opt.maxBytes || (opt.stepFactor <= 1 && opt.stepBytes == 0) || opt.root < 0 ||
      opt.root >= nranks) {
    if (rank == 0) fprintf(stderr, "bad sizes or root\n"), usage(argv[0]);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  setlinebuf(stdout);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (parseArgs(argc, argv)) {
    MPI_Finalize();
    return 1;
  }
  gethostname(host, sizeof(host) - 1);
  char* dot = strchr(host, '.');
  if (dot) *dot = 0;
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int libLen = 0;
  MPI_Get_library_version(lib, &libLen);
  char* nl = strpbrk(lib, "\n,");
  if (nl) *nl = 0;

  char* send = aligned_alloc(4096, (opt.maxBytes + 64 + 4095) & ~(size_t)4095);
  char* recv = aligned_alloc(4096, (opt.maxBytes + 64 + 4095) & ~(size_t)4095);
  if (!send || !recv) {
    fprintf(stderr, "%s: cannot allocate 2 x %zu bytes\n", host, opt.maxBytes);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  memset(send, 0, opt.maxBytes + 64), memset(recv, 0, opt.maxBytes + 64); /* touch the pages */

  char line[512];
  snprintf(line, sizeof(line), "#  Rank %2d Group %2d Pid %6d on %10s device %2d [0000:00:00] MPI process (%s)\n", rank,
           0, (int)getpid(), host, rank, lib);
  char* lines = rank == 0 ? malloc(sizeof(line) * (size_t)nranks) : NULL;
  MPI_Gather(line, sizeof(line), MPI_CHAR, lines, sizeof(line), MPI_CHAR, 0, MPI_COMM_WORLD);

  int errors = 0, bwCount = 0;
  double bwSum = 0;
  for (int c = 0; c < NCOLL; c++) {
    if (!(opt.colls & (1u << c))) continue;
    if (rank == 0) {
      printf("# mpi_coll_bench %s (nccl-tests %s format) library: %s\n", BENCH_VERSION, FORMAT_VERSION, lib);
      printf("# Collective test starting: mpi_coll_bench -c %s (%s)\n", colls[c].name, colls[c].mpi);
      printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
             "validation: %d graph: 0 unalign: 0\n",
             opt.minBytes, opt.maxBytes, opt.stepFactor > 1 ? opt.stepFactor : opt.stepBytes,
             opt.stepFactor > 1 ? "factor" : "bytes", opt.warmup, opt.iters, opt.check);
      printf("#\n# Using devices\n");
      for (int r = 0; r < nranks; r++) printf("%s", lines + sizeof(line) * (size_t)r);
      printf("#\n");
      printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "",
             "", "", "");
      printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "size", "count", "type",
             "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
      printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "(B)", "(elements)", "", "", "",
             "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    }
    int e = 0, cnt = 0;
    double bw = 0;
    e = sweep(c, send, recv, &bw, &cnt);
    errors += e, bwSum += bw, bwCount += cnt;
    if (rank == 0) {
      printf("# %-20s : %d %s\n", "Out of bounds values", e, e ? "FAILED" : "OK");
      printf("# %-20s : %g \n", "Avg bus bandwidth", cnt ? bw / cnt : 0);
      printf("#\n# Collective test concluded: mpi_coll_bench -c %s\n#\n", colls[c].name);
    }
  }
  free(lines), free(send), free(recv);
  MPI_Finalize();
  return errors ? 7 : 0;
}
