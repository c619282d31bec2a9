/* anyccl-cpu: the few CUDA vector types that host code names.
 *
 * Only what host code passes around (launch geometry, a few packed values);
 * no arithmetic operators. dim3 has no constructor in C: initialise it with
 * braces, e.g. dim3 grid = {4, 1, 1}. */
#ifndef ANYCCL_CPU_VECTOR_TYPES_H
#define ANYCCL_CPU_VECTOR_TYPES_H

#include "host_defines.h"

struct char2 { signed char x, y; };
struct uchar2 { unsigned char x, y; };
struct int2 { int x, y; };
struct uint2 { unsigned int x, y; };
struct int4 { int x, y, z, w; };
struct uint3 { unsigned int x, y, z; };
struct uint4 { unsigned int x, y, z, w; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct double2 { double x, y; };
struct longlong2 { long long x, y; };
struct ulonglong2 { unsigned long long x, y; };

typedef struct char2 char2;
typedef struct uchar2 uchar2;
typedef struct int2 int2;
typedef struct uint2 uint2;
typedef struct int4 int4;
typedef struct uint3 uint3;
typedef struct uint4 uint4;
typedef struct float2 float2;
typedef struct float4 float4;
typedef struct double2 double2;
typedef struct longlong2 longlong2;
typedef struct ulonglong2 ulonglong2;

struct dim3 {
  unsigned int x, y, z;
#ifdef __cplusplus
  dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
#endif
};
typedef struct dim3 dim3;

#endif /* ANYCCL_CPU_VECTOR_TYPES_H */
