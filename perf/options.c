/* Command-line flags: nccl-tests' names, meanings and defaults. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "perf.h"

struct perfOptions perfOpt = {
    .nThreads = 1, .nGpus = 1, .minBytes = 32 << 20, .maxBytes = 32 << 20, .stepBytes = 1 << 20,
    .stepFactor = 1, .datacheck = 1, .warmup = 1, .iters = 20, .aggIters = 1, .runCycles = 1,
    .op = ncclSum, .type = ncclFloat, .root = 0, .average = 1, .ctaPolicy = -1,
};

/* Sizes as nccl-tests reads them: a number with an optional K, M or G (binary). */
static double parseSize(const char* s) {
  double v;
  char unit[2] = {0};
  int n = sscanf(s, "%lf %1s", &v, unit);
  if (n == 1) return v;
  if (n != 2) return -1;
  switch (unit[0]) {
    case 'G': case 'g': return v * (1 << 30);
    case 'M': case 'm': return v * (1 << 20);
    case 'K': case 'k': return v * (1 << 10);
    default: return -1;
  }
}

static int parseType(const char* s) {
  for (int t = 0; t < PERF_NUM_TYPES; t++)
    if (strcmp(s, perfTypeNames[t]) == 0) return t;
  if (strcmp(s, "all") == 0) return -1;
  printf("invalid type %s, defaulting to %s .. \n", s, perfTypeNames[ncclFloat]);
  return ncclFloat;
}

static int parseOp(const char* s) {
  for (int o = 0; o < PERF_NUM_OPS; o++)
    if (strcmp(s, perfOpNames[o]) == 0) return o;
  if (strcmp(s, "all") == 0) return -1;
  printf("invalid op %s, defaulting to %s .. \n", s, perfOpNames[ncclSum]);
  return ncclSum;
}

static void usage(const char* prog) {
  printf("USAGE: %s \n\t"
         "[-t,--nthreads <num threads>] \n\t"
         "[-g,--ngpus <gpus per thread>] \n\t"
         "[-b,--minbytes <min size in bytes>] \n\t"
         "[-e,--maxbytes <max size in bytes>] \n\t"
         "[-i,--stepbytes <increment size>] \n\t"
         "[-f,--stepfactor <increment factor>] \n\t"
         "[-n,--iters <iteration count>] \n\t"
         "[-m,--agg_iters <aggregated iteration count>] \n\t"
         "[-w,--warmup_iters <warmup iteration count>] \n\t"
         "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n\t"
         "[-p,--parallel_init <0/1>] \n\t"
         "[-c,--check <check iteration count>] \n\t"
         "[-o,--op <sum/prod/min/max/avg/mulsum/all>] \n\t"
         "[-d,--datatype <nccltype/all>] \n\t"
         "[-r,--root <root>] \n\t"
         "[-z,--blocking <0/1/2/3> 1=barrier after each inner iter (-m), 2=no barrier, 3=wait and barrier after "
         "each outer iter (-n)] \n\t"
         "[-y,--stream_null <0/1>] \n\t"
         "[-T,--timeout <time in seconds>] \n\t"
         "[-C,--report_cputime <0/1>] \n\t"
         "[-S,--report_timestamps <0/1> report timestamps (default 0)] \n\t"
         "[-J,--output_file <file> write output to filepath, if accessible. Infer type from suffix (only json "
         "supported presently.)] \n\t"
         "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n\t"
         "[-R,--local_register <0/1/2> enable local (1) or symmetric (2) buffer registration on send/recv buffers "
         "(default: disable (0))] \n\t"
         "[-x,--cta_policy <0/1/2> set CTA policy (default: do not set)] \n\t"
         "[-u,--unalign <index of first element> Misalign source and destination buffers (default: 0)] \n\t"
         "[-h,--help]\n"
         "Not supported (accepted and ignored): -G (CUDA graphs), -I/-K (per-iteration timing), -M (memory report).\n"
         "Environment: ANYCCL_PERF_POLL=1 waits by polling streams like nccl-tests; ANYCCL_PERF_NO_PROGRESS=1 hides\n"
         "the progress line; ANYCCL_PERF_CORRUPT=N spoils N output elements of rank 0 (tests the check).\n",
         prog);
}

/* Returns -1 to go on, or the exit status. */
int perfParseArgs(int argc, char** argv, const char* prog) {
  static const struct option longopts[] = {
      {"nthreads", required_argument, 0, 't'},     {"ngpus", required_argument, 0, 'g'},
      {"minbytes", required_argument, 0, 'b'},     {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'},    {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'},        {"agg_iters", required_argument, 0, 'm'},
      {"warmup_iters", required_argument, 0, 'w'}, {"run_cycles", required_argument, 0, 'N'},
      {"parallel_init", required_argument, 0, 'p'}, {"check", required_argument, 0, 'c'},
      {"op", required_argument, 0, 'o'},           {"datatype", required_argument, 0, 'd'},
      {"root", required_argument, 0, 'r'},         {"blocking", required_argument, 0, 'z'},
      {"stream_null", required_argument, 0, 'y'},  {"timeout", required_argument, 0, 'T'},
      {"cudagraph", required_argument, 0, 'G'},    {"report_cputime", required_argument, 0, 'C'},
      {"report_timestamps", required_argument, 0, 'S'}, {"output_file", required_argument, 0, 'J'},
      {"average", required_argument, 0, 'a'},      {"local_register", required_argument, 0, 'R'},
      {"cta_policy", required_argument, 0, 'x'},   {"device_implementation", required_argument, 0, 'D'},
      {"device_cta_count", required_argument, 0, 'V'}, {"memory", required_argument, 0, 'M'},
      {"unalign", required_argument, 0, 'u'},      {"per_iter_timing", required_argument, 0, 'I'},
      {"per_iter_skip", required_argument, 0, 'K'}, {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  double d;
  for (;;) {
    int c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:", longopts, NULL);
    if (c == -1) break;
    switch (c) {
      case 't': perfOpt.nThreads = (int)strtol(optarg, NULL, 0); break;
      case 'g': perfOpt.nGpus = (int)strtol(optarg, NULL, 0); break;
      case 'b':
      case 'e':
      case 'i':
        d = parseSize(optarg);
        if (d < 0) {
          fprintf(stderr, "invalid size specified for '%s'\n",
                  c == 'b' ? "minbytes" : c == 'e' ? "maxbytes" : "stepBytes");
          return 1;
        }
        *(c == 'b' ? &perfOpt.minBytes : c == 'e' ? &perfOpt.maxBytes : &perfOpt.stepBytes) = (size_t)d;
        break;
      case 'f': perfOpt.stepFactor = (size_t)strtol(optarg, NULL, 0); break;
      case 'n': perfOpt.iters = (int)strtol(optarg, NULL, 0); break;
      case 'm': perfOpt.aggIters = (int)strtol(optarg, NULL, 0); break;
      case 'w': perfOpt.warmup = (int)strtol(optarg, NULL, 0); break;
      case 'N': perfOpt.runCycles = (int)strtol(optarg, NULL, 0); break;
      case 'p': perfOpt.parallelInit = (int)strtol(optarg, NULL, 0); break;
      case 'c': perfOpt.datacheck = (int)strtol(optarg, NULL, 0); break;
      case 'o': perfOpt.op = parseOp(optarg); break;
      case 'd': perfOpt.type = parseType(optarg); break;
      case 'r': perfOpt.root = (int)strtol(optarg, NULL, 0); break;
      case 'z': perfOpt.blocking = (int)strtol(optarg, NULL, 0); break;
      case 'y': perfOpt.streamNull = (int)strtol(optarg, NULL, 0); break;
      case 'T': perfOpt.timeout = (int)strtol(optarg, NULL, 0); break;
      case 'C': perfOpt.cputime = (int)strtol(optarg, NULL, 0); break;
      case 'S': perfOpt.timestamps = (int)strtol(optarg, NULL, 0); break;
      case 'J': free(perfOpt.jsonPath), perfOpt.jsonPath = strdup(optarg); break;
      case 'a': perfOpt.average = (int)strtol(optarg, NULL, 0); break;
      case 'R': perfOpt.localRegister = (int)strtol(optarg, NULL, 0); break;
      case 'x': perfOpt.ctaPolicy = (int)strtol(optarg, NULL, 0); break;
      case 'u': perfOpt.unalign = (int)strtol(optarg, NULL, 0); break;
      case 'G': printf("Option -G (CUDA graph) is not supported by these tools. Ignoring\n"); break;
      case 'I':
      case 'K': printf("Option -%c (per-iteration timing) is not supported by these tools. Ignoring\n", c); break;
      case 'M': printf("Option -M (memory report) is not supported by these tools. Ignoring\n"); break;
      case 'D':
      case 'V': fprintf(stderr, "Option -%c (device implementation) is not supported by these tools\n", c); return 1;
      case 'h': usage(prog); return 0;
      default:
        printf("invalid option '%c'\n", c);
        usage(prog);
        return 1;
    }
  }
  if (optind < argc) {
    printf("invalid argument '%s'\n", argv[optind]);
    usage(prog);
    return 1;
  }
  if (perfOpt.minBytes > perfOpt.maxBytes) {
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", perfOpt.minBytes, perfOpt.maxBytes);
    return 1;
  }
  const struct perfOptions* o = &perfOpt;
  if (o->nThreads < 1 || o->nGpus < 1 || o->nGpus > PERF_MAX_GPUS || o->iters < 1 || o->aggIters < 1 ||
      o->warmup < 0 || o->datacheck < 0 || o->unalign < 0 || o->average < 0 || o->average > 3 || o->blocking < 0 ||
      o->blocking > 3 || (o->stepFactor <= 1 && o->stepBytes == 0)) {
    fprintf(stderr, "invalid arguments: need -t, -n, -m >= 1, -g in 1..%d, -w, -c, -u >= 0, -a in 0..3, "
                    "-z in 0..3, and -f > 1 or -i > 0\n", PERF_MAX_GPUS);
    return 1;
  }
  return -1;
}

