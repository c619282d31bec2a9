/* Element-wise data movement and reduction for every type and op: the only
 * place that knows how to add two bfloat16s. Executors (cpu now, others later)
 * call anycclReduce() on contiguous ranges. */
#ifndef ANYCCL_REDUCE_H
#define ANYCCL_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include "nccl.h"

/* The device-level op an ncclRedOp_t turns into (as in NCCL). */
typedef enum {
  anycclDevSum = 0,
  anycclDevProd,
  anycclDevMax,
  anycclDevMin,
  anycclDevPreMulSum, /* sum of (scalar * x); float avg is this with 1/n */
  anycclDevSumPostDiv /* integer avg: sum, then divide by divisor at the end */
} anycclDevRedOp;

typedef struct {
  ncclDataType_t type;
  anycclDevRedOp op;
  /* PreMulSum: the scalar, as the value of `type` stored in the low bytes. */
  uint64_t scalar;
  /* SumPostDiv: the divisor (number of ranks). */
  uint64_t divisor;
} anycclRedOp;

/* Flags for anycclReduce. */
#define ANYCCL_RED_PREMUL_IN0 0x1  /* multiply in0 by the PreMulSum scalar first */
#define ANYCCL_RED_PREMUL_IN1 0x2  /* multiply in1 by the PreMulSum scalar first */
#define ANYCCL_RED_POSTDIV_OUT0 0x4 /* out0 gets the result divided by divisor (SumPostDiv) */

/* v = in1 ? (in0 OP in1) : in0, with the premul flags applied to the inputs;
 * out0[i] = v (post-divided if flagged); out1[i] = v if out1 != NULL.
 * n is a count of elements. Outputs may alias inputs exactly (same pointer);
 * partial overlaps are not allowed. Results are correctly rounded for the
 * narrow float types (fp16, bf16, fp8 e4m3/e5m2: round to nearest even,
 * fp8 saturating to the largest finite value, as CUDA's __NV_SATFINITE). */
void anycclReduce(const anycclRedOp* op, size_t n, const void* in0, const void* in1, void* out0, void* out1,
                  unsigned flags);

size_t anycclTypeSize(ncclDataType_t type);
const char* anycclTypeName(ncclDataType_t type);   /* "float", "bfloat16", ... */
const char* anycclOpName(ncclRedOp_t op);          /* "sum", "prod", ..., "premulsum" for user ops */

/* Scalar conversions, exported for the tests and for PreMulSum scalars. */
float anycclHalfToFloat(uint16_t h);
uint16_t anycclFloatToHalf(float f);
float anycclBf16ToFloat(uint16_t b);
uint16_t anycclFloatToBf16(float f);
float anycclFp8e4m3ToFloat(uint8_t v);
uint8_t anycclFloatToFp8e4m3(float f);
float anycclFp8e5m2ToFloat(uint8_t v);
uint8_t anycclFloatToFp8e5m2(float f);
/* Correctly rounded from double (used when a wider intermediate is exact). */
uint16_t anycclDoubleToHalf(double d);
uint16_t anycclDoubleToBf16(double d);
uint8_t anycclDoubleToFp8e4m3(double d);
uint8_t anycclDoubleToFp8e5m2(double d);

#endif
