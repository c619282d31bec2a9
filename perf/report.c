/* Output: the nccl-tests table rows on stdout, the JSON file of -J (same
 * layout as nccl-tests' JSON version 3), and the progress line.
 *
 * Only the main thread of process 0 calls these (common.c decides).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "perf.h"

/* ---- JSON ---------------------------------------------------------------- */

#define JSON_MAX_DEPTH 32
static FILE* jf;
static int jDepth;
static int jItems[JSON_MAX_DEPTH]; /* values written at each open level */
static int jAfterKey;              /* a key was written; its value comes next */

int perfJsonActive(void) { return jf != NULL; }

static void jsonEscaped(const char* s) {
  fputc('"', jf);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\' || c == '/') {
      fputc('\\', jf), fputc(c, jf);
    } else if (c == '\n') {
      fputs("\\n", jf);
    } else if (c == '\t') {
      fputs("\\t", jf);
    } else if (c < 0x20) {
      fprintf(jf, "\\u%04x", c);
    } else {
      fputc(c, jf);
    }
  }
  fputc('"', jf);
}

/* The separator before a value: none after a key, a comma between items. */
static void jsonSep(void) {
  if (jAfterKey) {
    jAfterKey = 0;
    return;
  }
  if (jDepth > 0 && jItems[jDepth - 1]++ > 0) fputc(',', jf);
}

void perfJsonKey(const char* k) {
  if (!jf) return;
  if (jDepth > 0 && jItems[jDepth - 1]++ > 0) fputc(',', jf);
  jsonEscaped(k);
  fputc(':', jf);
  jAfterKey = 1;
}
void perfJsonStr(const char* s) {
  if (!jf) return;
  if (s == NULL) {
    perfJsonNull();
    return;
  }
  jsonSep();
  jsonEscaped(s);
}
void perfJsonInt(long long v) {
  if (!jf) return;
  jsonSep();
  fprintf(jf, "%lld", v);
}
void perfJsonDouble(double v) {
  if (!jf) return;
  jsonSep();
  if (v != v) {
    fputs("\"nan\"", jf);
  } else {
    fprintf(jf, "%f", v);
  }
}
void perfJsonNull(void) {
  if (!jf) return;
  jsonSep();
  fputs("null", jf);
}
/* nccl-tests writes booleans as the strings "true" / "false". */
void perfJsonBool(int v) { perfJsonStr(v ? "true" : "false"); }

static void jsonOpen(char c) {
  jsonSep();
  fputc(c, jf);
  if (jDepth < JSON_MAX_DEPTH) jItems[jDepth] = 0;
  jDepth++;
}
void perfJsonBeginObject(void) {
  if (jf) jsonOpen('{');
}
void perfJsonBeginList(void) {
  if (jf) jsonOpen('[');
}
void perfJsonEndObject(void) {
  if (!jf || jDepth == 0) return;
  if (jAfterKey) perfJsonNull();
  fputc('}', jf);
  jDepth--;
}
void perfJsonEndList(void) {
  if (!jf || jDepth == 0) return;
  fputc(']', jf);
  jDepth--;
}

static void nowString(char* buf, size_t len) {
  time_t now = time(NULL);
  struct tm tmv;
  localtime_r(&now, &tmv);
  strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tmv);
}

/* Never overwrites: path, then path.0, path.1, ... as nccl-tests does. */
void perfJsonOpen(const char* path, int argc, char** argv, char** envp, int ncclVersion) {
  if (path == NULL) return;
  char* tryPath = strdup(path);
  for (int n = 0; tryPath != NULL; n++) {
    jf = fopen(tryPath, "wx");
    if (jf != NULL || errno != EEXIST) break;
    free(tryPath);
    tryPath = NULL;
    if (asprintf(&tryPath, "%s.%d", path, n) < 0) tryPath = NULL;
  }
  if (jf == NULL) {
    printf("# skipping json output; %s not accessible\n", tryPath ? tryPath : path);
    free(tryPath);
    return;
  }
  printf("# Writing JSON output to %s\n", tryPath);
  free(tryPath);
  char t[64];
  nowString(t, sizeof(t));
  perfJsonBeginObject(); /* closed by perfJsonClose */
  perfJsonKey("version"), perfJsonInt(3);
  perfJsonKey("start_time"), perfJsonStr(t);
  perfJsonKey("args"), perfJsonBeginList();
  for (int i = 0; i < argc; i++) perfJsonStr(argv[i]);
  perfJsonEndList();
  perfJsonKey("env"), perfJsonBeginList();
  for (char** e = envp; e && *e; e++) perfJsonStr(*e);
  perfJsonEndList();
  perfJsonKey("nccl_version"), perfJsonInt(ncclVersion);
}

void perfJsonClose(void) {
  if (!jf) return;
  if (jDepth == 1) {
    char t[64];
    nowString(t, sizeof(t));
    perfJsonKey("end_time"), perfJsonStr(t);
  }
  while (jDepth > 0) {
    if (jAfterKey) perfJsonNull();
    perfJsonEndObject(); /* lists are closed by their writers */
  }
  fputc('\n', jf);
  fclose(jf);
  jf = NULL;
}

/* One "#  Rank ..." line, parsed back into an object like nccl-tests does. */
void perfJsonDeviceLine(const char* line) {
  if (!jf) return;
  int rank = 0, group = 0, pid = 0, dev = 0;
  char host[1024] = "", hex[128] = "", info[1024] = "";
  sscanf(line, "#  Rank %d Group %d Pid %d on %1023s device %d [%127[^]]] %1023[^\n]", &rank, &group, &pid, host,
         &dev, hex, info);
  perfJsonBeginObject();
  perfJsonKey("rank"), perfJsonInt(rank);
  perfJsonKey("group"), perfJsonInt(group);
  perfJsonKey("pid"), perfJsonInt(pid);
  perfJsonKey("hostname"), perfJsonStr(host);
  perfJsonKey("device"), perfJsonInt(dev);
  perfJsonKey("device_hex"), perfJsonStr(hex);
  perfJsonKey("device_info"), perfJsonStr(info);
  perfJsonEndObject();
}

/* ---- table rows ---------------------------------------------------------- */

static char row[1024];
static size_t rowLen;

static void rowAppend(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void rowAppend(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (rowLen < sizeof(row)) {
    int n = vsnprintf(row + rowLen, sizeof(row) - rowLen, fmt, ap);
    if (n > 0) rowLen += (size_t)n;
  }
  va_end(ap);
}

/* nccl-tests' number format: as many decimals (2, 1, 0) as fit in width. */
void perfFormatFloat(double v, int width, char* out) {
  if (snprintf(out, (size_t)width + 1, "%*.2f", width, v) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.1f", width, v) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.0f", width, v) <= width) return;
  snprintf(out, (size_t)width + 1, width >= 7 ? "%*.1e" : "%*.0e", width, v);
}

void perfRowStart(size_t bytes, size_t count, const char* type, const char* op, int root) {
  char rootStr[32];
  snprintf(rootStr, sizeof(rootStr), "%6i", root);
  rowLen = 0;
  rowAppend("%12zu  %12zu  %8s  %6s  %6s", bytes, count, type, op, rootStr);
  perfJsonBeginObject();
  perfJsonKey("size"), perfJsonInt((long long)bytes);
  perfJsonKey("count"), perfJsonInt((long long)count);
  perfJsonKey("type"), perfJsonStr(type);
  perfJsonKey("redop"), perfJsonStr(op);
  perfJsonKey("root"), perfJsonStr(rootStr);
}

void perfRowBody(double timeUs, double algBw, double busBw, int reportErrors, int64_t wrong, int outOfPlace,
                 int cputime, int timestamps) {
  char t[16], a[16], b[16];
  perfFormatFloat(timeUs, 7, t);
  perfFormatFloat(algBw, 6, a);
  perfFormatFloat(busBw, 6, b);
  if (reportErrors) {
    rowAppend("  %7s  %6s  %6s  %6g", t, a, b, (double)wrong);
  } else {
    rowAppend("  %7s  %6s  %6s    N/A", t, a, b);
  }
  if (!outOfPlace && timestamps) {
    char ts[64];
    nowString(ts, sizeof(ts));
    rowAppend("%21s", ts);
  }
  perfJsonKey(outOfPlace ? "out_of_place" : "in_place");
  perfJsonBeginObject();
  perfJsonKey(cputime ? "cpu_time" : "time"), perfJsonDouble(timeUs);
  perfJsonKey("alg_bw"), perfJsonDouble(algBw);
  perfJsonKey("bus_bw"), perfJsonDouble(busBw);
  perfJsonKey("nwrong");
  if (reportErrors) {
    perfJsonDouble((double)wrong);
  } else {
    perfJsonNull();
  }
  perfJsonEndObject();
}

void perfRowEnd(int iters) {
  perfProgressClear();
  fwrite(row, 1, rowLen, stdout);
  fputc('\n', stdout);
  fflush(stdout);
  perfJsonKey("actual_iterations"), perfJsonInt(iters);
  perfJsonKey("experiment_name"), perfJsonStr("");
  perfJsonEndObject();
}

/* ---- progress line --------------------------------------------------------- */

static int progEnabled, progShown;

void perfProgressInit(int enabled) { progEnabled = enabled; }

void perfProgress(const char* fmt, ...) {
  if (!progEnabled) return;
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  fflush(stdout);
  fprintf(stderr, "\r%s\033[K", buf);
  progShown = 1;
}

void perfProgressClear(void) {
  if (!progShown) return;
  fputs("\r\033[K", stderr);
  progShown = 0;
}
