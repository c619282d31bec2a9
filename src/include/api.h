/* Exporting an NCCL entry point and its p-prefixed profiling twin. */
#ifndef ANYCCL_API_H
#define ANYCCL_API_H

#define NCCL_API(ret, name, args)                                          \
  __attribute__((visibility("default"))) ret name args;                    \
  __attribute__((visibility("default"), alias(#name))) ret p##name args;   \
  ret name args

#endif
