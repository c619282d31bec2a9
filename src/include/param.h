/* Every parameter lives in one table (params.def): name, type, the backends
 * that read it, default, help.
 * Values come from the environment, read once. anyccl-info prints the table. */
#ifndef ANYCCL_PARAM_H
#define ANYCCL_PARAM_H

#include <stdint.h>

typedef enum { PARAM_INT, PARAM_STR } anycclParamType;
/* The backends that read a parameter (anyccl-info prints it). */
typedef enum { PARAM_FOR_ALL, PARAM_FOR_CPU, PARAM_FOR_CUDA } anycclParamBackend;

typedef enum {
#define ANYCCL_PARAM(id, name, type, backend, deflt, help) PARAM_##id,
#include "params.def"
#undef ANYCCL_PARAM
  PARAM_COUNT
} anycclParamId;

typedef struct {
  const char* name;
  anycclParamType type;
  anycclParamBackend backend;
  const char* deflt; /* as text; "" = unset */
  const char* help;
} anycclParamInfo;

/* Integer value (default when unset or unparsable; a bad value WARNs once). */
int64_t anycclParamInt(anycclParamId id);
/* Whether the environment gave the parameter a usable value (defaults that
 * depend on the communicator apply only when it did not). */
int anycclParamIsSet(anycclParamId id);
/* A timeout parameter in seconds: its value, or ANYCCL_OP_TIMEOUT's when it
 * is negative (one bound for every wait unless set); 0 means no bound. */
int64_t anycclTimeoutSec(anycclParamId id);
/* String value, or NULL when unset and the default is "". */
const char* anycclParamStr(anycclParamId id);
/* An integer parameter's text (strtoll base 0: decimal, 0x hex, 0 octal;
 * trailing blanks allowed): 0 and *out, or -1. */
int anycclParamParseInt(const char* s, int64_t* out);
/* Table access for anyccl-info. */
const anycclParamInfo* anycclParamTable(int* count);
/* The value as text, as in effect now ("" if unset). */
const char* anycclParamValueText(anycclParamId id, char* buf, int len);

#endif
