/* Back-to-back collectives of mixed kinds, sizes and roots on the GPUs of
 * one process, with no synchronisation inside a batch: on anyccl the small
 * and mid sizes take the one-host LL kernels (one-shot, two-shot, rooted),
 * which reuse the same line areas launch after launch, so a rank that runs
 * ahead must not overwrite lines a slower peer has yet to read. Every
 * result is checked against the exact value (small integers in float).
 *
 *   llmix [ngpus] [batches] [ops per batch] [seed]
 *
 * LLMIX_SHIFT=1: each rank's buffers of each op start 0 or 1 element (4
 * bytes) past their allocation, at random: ranks of one collective then
 * differ in alignment (the one-host kernels that read their peers' own
 * buffers let a misaligned rank offer its staging area instead).
 * LLMIX_LARGE=1: sizes up to 16 MB a rank too (the staged range).
 *
 * Prints "llmix: N ops, 0 wrong" and exits 0 when all match; a wrong
 * element prints the op and exits 1. Builds against any nccl.h (anyccl's
 * or NVIDIA's): tests/gpu/mismatch.sh's build line, or
 *   cc -O2 -I include -I $CUDA/include tests/gpu/llmix.c -L <lib> -lnccl -L $CUDA/lib64 -lcudart */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXG 8
#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      fprintf(stderr, "llmix: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      exit(2);                                                                        \
    }                                                                                 \
  } while (0)
#define NK(x)                                                                         \
  do {                                                                                \
    ncclResult_t r_ = (x);                                                            \
    if (r_ != ncclSuccess) {                                                          \
      fprintf(stderr, "llmix: %s: %s (line %d)\n", #x, ncclGetErrorString(r_), __LINE__); \
      exit(2);                                                                        \
    }                                                                                 \
  } while (0)

enum { AR, BC, RED, AG, RS, NKINDS };
static const char* kname[] = {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter"};
/* per-rank element counts around the LL limits on 2-8 GPUs (8 B - 3 MB of floats, some odd) */
static const size_t counts[] = {2,      1023,   16384,  50001,   65536,   87381,   131072,
                                180000, 262144, 349525, 524288, 786433, 1048576, 2500001, 4194304};
#define NSMALL 12 /* up to 3 MB; LLMIX_LARGE adds the rest */
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

struct op {
  int kind, root, inplace;
  size_t count; /* AR, BC, RED: the vector; AG, RS: a rank's block */
  float *in[MAXG], *out[MAXG];
  int shift[MAXG]; /* elements past the allocation's start (LLMIX_SHIFT) */
};

static uint64_t rng;
static uint32_t rnd(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng >> 33);
}
/* rank r's input element i (of the whole input buffer) */
static float val(int r, size_t i, int salt) { return (float)((int)((i * 7 + (size_t)salt * 13) % 61) + r * 3 - 20); }

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 0;
  const int batches = argc > 2 ? atoi(argv[2]) : 40, per = argc > 3 ? atoi(argv[3]) : 8;
  rng = argc > 4 ? strtoull(argv[4], NULL, 0) : 1;
  int avail = 0;
  CK(cudaGetDeviceCount(&avail));
  if (n <= 0) n = avail;
  if (n < 2 || n > MAXG || n > avail || batches < 1 || per < 1 || per > 64) {
    fprintf(stderr, "llmix: need 2-%d GPUs (have %d), batches >= 1, 1-64 ops a batch\n", MAXG, avail);
    return 2;
  }
  int devs[MAXG];
  ncclComm_t comms[MAXG];
  cudaStream_t st[MAXG];
  for (int g = 0; g < n; g++) devs[g] = g;
  NK(ncclCommInitAll(comms, n, devs));
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(g));
    CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
  }
  const int large = getenv("LLMIX_LARGE") && atoi(getenv("LLMIX_LARGE"));
  const int shifted = getenv("LLMIX_SHIFT") && atoi(getenv("LLMIX_SHIFT"));
  const size_t ncounts = large ? NCOUNTS : NSMALL;
  const size_t maxc = counts[ncounts - 1] + 1;
  const size_t inMax = maxc * n, outMax = maxc * n; /* RS input, AG output */
  struct op* ops = calloc((size_t)per, sizeof(*ops));
  float* host = malloc(outMax * sizeof(float));
  float* want = malloc(outMax * sizeof(float));
  for (int k = 0; k < per; k++)
    for (int g = 0; g < n; g++) {
      CK(cudaSetDevice(g));
      CK(cudaMalloc((void**)&ops[k].in[g], inMax * sizeof(float)));
      CK(cudaMalloc((void**)&ops[k].out[g], outMax * sizeof(float)));
    }
  float* fill = malloc(inMax * sizeof(float));
  long total = 0, wrong = 0;
  for (int b = 0; b < batches; b++) {
    for (int k = 0; k < per; k++) {
      struct op* o = &ops[k];
      o->kind = (int)(rnd() % NKINDS);
      o->count = counts[rnd() % ncounts];
      if (o->kind == AG || o->kind == RS) o->count = (o->count + n - 1) / n;
      o->root = (int)(rnd() % (unsigned)n);
      o->inplace = rnd() % 4 == 0 && o->kind != AG && o->kind != RS;
      const size_t inCount = o->kind == RS ? o->count * n : o->count;
      for (int g = 0; g < n; g++) {
        o->shift[g] = shifted ? (int)(rnd() % 2) : 0;
        for (size_t i = 0; i < inCount; i++) fill[i] = val(g, i, b * per + k);
        CK(cudaSetDevice(g));
        CK(cudaMemcpy(o->in[g] + o->shift[g], fill, inCount * sizeof(float), cudaMemcpyHostToDevice));
        CK(cudaMemset(o->out[g], 0xff, outMax * sizeof(float)));
      }
    }
    for (int g = 0; g < n; g++) {
      CK(cudaSetDevice(g));
      CK(cudaDeviceSynchronize());
    }
    for (int k = 0; k < per; k++) {
      struct op* o = &ops[k];
      NK(ncclGroupStart());
      for (int g = 0; g < n; g++) {
        float* in = o->in[g] + o->shift[g];
        float* out = o->inplace ? in : o->out[g] + o->shift[g];
        switch (o->kind) {
          case AR: NK(ncclAllReduce(in, out, o->count, ncclFloat32, ncclSum, comms[g], st[g])); break;
          case BC: NK(ncclBroadcast(in, out, o->count, ncclFloat32, o->root, comms[g], st[g])); break;
          case RED: NK(ncclReduce(in, out, o->count, ncclFloat32, ncclSum, o->root, comms[g], st[g])); break;
          case AG: NK(ncclAllGather(in, out, o->count, ncclFloat32, comms[g], st[g])); break;
          default: NK(ncclReduceScatter(in, out, o->count, ncclFloat32, ncclSum, comms[g], st[g])); break;
        }
      }
      NK(ncclGroupEnd());
    }
    for (int g = 0; g < n; g++) {
      CK(cudaSetDevice(g));
      CK(cudaStreamSynchronize(st[g]));
    }
    for (int k = 0; k < per; k++) {
      struct op* o = &ops[k];
      const int salt = b * per + k;
      const size_t outCount = o->kind == AG ? o->count * n : o->count;
      for (int g = 0; g < n; g++) {
        if (o->kind == RED && g != o->root) continue;
        for (size_t i = 0; i < outCount; i++) {
          double s = 0;
          switch (o->kind) {
            case AR:
            case RED:
              for (int q = 0; q < n; q++) s += val(q, i, salt);
              break;
            case BC: s = val(o->root, i, salt); break;
            case AG: s = val((int)(i / o->count), i % o->count, salt); break;
            default:
              for (int q = 0; q < n; q++) s += val(q, (size_t)g * o->count + i, salt);
              break;
          }
          want[i] = (float)s;
        }
        CK(cudaSetDevice(g));
        CK(cudaMemcpy(host, (o->inplace ? o->in[g] : o->out[g]) + o->shift[g], outCount * sizeof(float),
                      cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < outCount; i++)
          if (host[i] != want[i]) {
            fprintf(stderr, "llmix: batch %d op %d %s count %zu root %d%s rank %d (shift %d): element %zu is %g, want %g\n",
                    b, k, kname[o->kind], o->count, o->root, o->inplace ? " in place" : "", g, o->shift[g], i, host[i],
                    want[i]);
            wrong++;
            break;
          }
      }
      total++;
    }
    if (wrong) break;
  }
  printf("llmix: %ld ops on %d GPUs, %ld wrong\n", total, n, wrong);
  for (int g = 0; g < n; g++) ncclCommDestroy(comms[g]);
  return wrong ? 1 : 0;
}
