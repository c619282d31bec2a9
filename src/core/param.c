/* The parameter table: values read from the environment once, on first use. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "debug.h"
#include "param.h"

static const anycclParamInfo paramTable[PARAM_COUNT] = {
#define ANYCCL_PARAM(id, name, type, backend, deflt, help) {name, type, backend, deflt, help},
#include "params.def"
#undef ANYCCL_PARAM
};

typedef struct {
  int set;          /* the environment had a usable value */
  int64_t ival;
  const char* sval; /* points into the environment, or NULL */
} paramValue;

static paramValue paramValues[PARAM_COUNT];
static pthread_once_t paramOnce = PTHREAD_ONCE_INIT;

int anycclParamParseInt(const char* s, int64_t* out) {
  char* end;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (errno || end == s) return -1;
  while (*end == ' ' || *end == '\t') end++;
  if (*end) return -1;
  *out = v;
  return 0;
}

static void paramLoad(void) {
  for (int i = 0; i < PARAM_COUNT; i++) {
    const anycclParamInfo* p = &paramTable[i];
    paramValue* v = &paramValues[i];
    if (p->type == PARAM_INT) anycclParamParseInt(p->deflt, &v->ival);
    const char* env = getenv(p->name);
    if (env == NULL || env[0] == '\0') continue;
    if (p->type == PARAM_STR) {
      v->sval = env;
      v->set = 1;
    } else if (anycclParamParseInt(env, &v->ival) == 0) {
      v->set = 1;
    } else {
      anycclParamParseInt(p->deflt, &v->ival);
      /* Can't use WARN here: logging itself reads parameters. */
      fprintf(stderr, "anyccl WARN %s=\"%s\" is not an integer; using the default %s\n", p->name, env, p->deflt);
    }
  }
}

int64_t anycclParamInt(anycclParamId id) {
  pthread_once(&paramOnce, paramLoad);
  return paramValues[id].ival;
}

int anycclParamIsSet(anycclParamId id) {
  pthread_once(&paramOnce, paramLoad);
  return paramValues[id].set;
}

int64_t anycclTimeoutSec(anycclParamId id) {
  int64_t s = anycclParamInt(id);
  if (s < 0) s = anycclParamInt(PARAM_OP_TIMEOUT);
  return s > 0 ? s : 0;
}

const char* anycclParamStr(anycclParamId id) {
  pthread_once(&paramOnce, paramLoad);
  if (paramValues[id].set) return paramValues[id].sval;
  return paramTable[id].deflt[0] ? paramTable[id].deflt : NULL;
}

__attribute__((visibility("default"))) const anycclParamInfo* anycclParamTable(int* count) {
  *count = PARAM_COUNT;
  return paramTable;
}

__attribute__((visibility("default"))) const char* anycclParamValueText(anycclParamId id, char* buf, int len) {
  pthread_once(&paramOnce, paramLoad);
  if (paramTable[id].type == PARAM_INT) {
    snprintf(buf, len, "%lld", (long long)paramValues[id].ival);
  } else {
    const char* s = anycclParamStr(id);
    snprintf(buf, len, "%s", s ? s : "");
  }
  return buf;
}
