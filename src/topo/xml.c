/* NCCL's topology XML: read with expat (every element checked as it opens,
 * errors with file:line), written the way NCCL dumps it. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <expat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "debug.h"
#include "topo.h"

#define BIT(k) (1u << (k))
/* Which elements may appear inside which. */
static const unsigned allowedSubs[TOPO_KINDS] = {
    [TOPO_CLUSTER] = BIT(TOPO_SYSTEM),
    [TOPO_SYSTEM] = BIT(TOPO_CPU),
    [TOPO_CPU] = BIT(TOPO_PCI) | BIT(TOPO_NIC),
    [TOPO_PCI] = BIT(TOPO_PCI) | BIT(TOPO_GPU) | BIT(TOPO_NIC) | BIT(TOPO_PCILINK),
    [TOPO_GPU] = BIT(TOPO_NVLINK) | BIT(TOPO_C2C),
    [TOPO_NIC] = BIT(TOPO_NET),
};
static const unsigned allowedRoots = BIT(TOPO_SYSTEM) | BIT(TOPO_CLUSTER);

static int kindOf(const char* name) {
  for (int k = 0; k < TOPO_KINDS; k++)
    if (strcmp(name, anycclTopoKindName((anycclTopoKind)k)) == 0) return k;
  return -1;
}

/* "<pci>, <gpu>, <nic> or <pcilink>" */
static void listKinds(unsigned mask, char* buf, size_t len) {
  int n = 0, total = __builtin_popcount(mask), used = 0;
  buf[0] = '\0';
  for (int k = 0; k < TOPO_KINDS; k++) {
    if (!(mask & BIT(k))) continue;
    const char* sep = n == 0 ? "" : (n == total - 1 ? " or " : ", ");
    used += snprintf(buf + used, len > (size_t)used ? len - used : 0, "%s<%s>", sep, anycclTopoKindName(k));
    n++;
  }
  if (total == 0) snprintf(buf, len, "no elements");
}

struct parseState {
  XML_Parser parser;
  struct anycclTopo* topo;
  struct anycclTopoNode* cur;
  const char* file;
  char* err;
  size_t errLen;
  ncclResult_t res;
};

static void fail(struct parseState* st, ncclResult_t res) {
  if (st->res == ncclSuccess) st->res = res;
  XML_StopParser(st->parser, XML_FALSE);
}

static void XMLCALL onStart(void* ud, const XML_Char* name, const XML_Char** atts) {
  struct parseState* st = ud;
  if (st->res != ncclSuccess) return;
  int line = (int)XML_GetCurrentLineNumber(st->parser);
  int kind = kindOf(name);
  unsigned mask = st->cur ? allowedSubs[st->cur->kind] : allowedRoots;
  if (kind < 0 || !(mask & BIT(kind))) {
    char expected[160], inside[64];
    listKinds(mask, expected, sizeof(expected));
    if (st->cur) snprintf(inside, sizeof(inside), "inside <%s>", anycclTopoKindName(st->cur->kind));
    else snprintf(inside, sizeof(inside), "at the top of the file");
    if (kind < 0)
      anycclTopoError(st->err, st->errLen, "%s:%d: unknown element <%s> %s; expected %s", st->file, line, name,
                      inside, expected);
    else
      anycclTopoError(st->err, st->errLen, "%s:%d: <%s> is not allowed %s; expected %s", st->file, line, name,
                      inside, expected);
    return fail(st, ncclInvalidUsage);
  }
  struct anycclTopoNode* node = anycclTopoNodeNew((anycclTopoKind)kind, st->cur);
  if (node == NULL) {
    anycclTopoError(st->err, st->errLen, "%s:%d: out of memory", st->file, line);
    return fail(st, ncclSystemError);
  }
  node->line = line;
  if (st->cur == NULL) st->topo->root = node;
  st->cur = node;
  for (int a = 0; atts[a]; a += 2) {
    if (anycclTopoSetAttr(node, atts[a], atts[a + 1]) != ncclSuccess) return fail(st, ncclSystemError);
  }
  ncclResult_t res = anycclTopoCheckNode(node, st->file, st->err, st->errLen);
  if (res != ncclSuccess) fail(st, res);
}

static void XMLCALL onEnd(void* ud, const XML_Char* name) {
  struct parseState* st = ud;
  if (st->res != ncclSuccess || st->cur == NULL) return;
  st->cur = st->cur->parent;
}

static void XMLCALL onText(void* ud, const XML_Char* s, int len) {
  struct parseState* st = ud;
  if (st->res != ncclSuccess) return;
  for (int i = 0; i < len; i++) {
    if (!isspace((unsigned char)s[i])) {
      int line = (int)XML_GetCurrentLineNumber(st->parser);
      anycclTopoError(st->err, st->errLen, "%s:%d: unexpected text \"%.*s\" inside <%s>; topology elements hold only attributes and elements",
                      st->file, line, len - i > 24 ? 24 : len - i, s + i,
                      st->cur ? anycclTopoKindName(st->cur->kind) : "the document");
      return fail(st, ncclInvalidUsage);
    }
  }
}

/* Feed chunks; reader returns bytes read, 0 at the end, -1 on error. */
typedef long (*chunkReader)(void* src, char* buf, size_t len);

static ncclResult_t parse(const char* name, chunkReader rd, void* src, struct anycclTopo** out, char* err,
                          size_t errLen) {
  ncclResult_t res = ncclSuccess;
  struct anycclTopo* topo = calloc(1, sizeof(*topo));
  if (topo == NULL) return ncclSystemError;
  topo->file = strdup(name);
  XML_Parser p = XML_ParserCreate(NULL);
  if (p == NULL || topo->file == NULL) {
    res = anycclTopoError(err, errLen, "%s: out of memory creating the XML parser", name);
    goto fail;
  }
  struct parseState st = {p, topo, NULL, name, err, errLen, ncclSuccess};
  XML_SetUserData(p, &st);
  XML_SetElementHandler(p, onStart, onEnd);
  XML_SetCharacterDataHandler(p, onText);
  char buf[65536];
  for (;;) {
    long n = rd(src, buf, sizeof(buf));
    if (n < 0) {
      res = anycclTopoError(err, errLen, "%s: read error: %s", name, strerror(errno));
      goto fail;
    }
    if (XML_Parse(p, buf, (int)n, n == 0) == XML_STATUS_ERROR) {
      if (st.res != ncclSuccess) {
        res = st.res;
      } else {
        res = anycclTopoError(err, errLen, "%s:%lu:%lu: XML syntax error: %s", name,
                              (unsigned long)XML_GetCurrentLineNumber(p),
                              (unsigned long)XML_GetCurrentColumnNumber(p) + 1,
                              XML_ErrorString(XML_GetErrorCode(p)));
      }
      goto fail;
    }
    if (n == 0) break;
  }
  XML_ParserFree(p);
  p = NULL;
  NCCLCHECKGOTO(anycclTopoFinish(topo, err, errLen), res, fail);
  INFO(NCCL_GRAPH, "Topology %s: %d host(s), %d GPU(s) and %d NIC(s) on the first", name, topo->nHosts,
       topo->hosts[0].nGpus, topo->hosts[0].nNets);
  *out = topo;
  return ncclSuccess;
fail:
  if (p) XML_ParserFree(p);
  anycclTopoFree(topo);
  return res == ncclSuccess ? ncclInvalidUsage : res;
}

static long readFile(void* src, char* buf, size_t len) {
  size_t n = fread(buf, 1, len, (FILE*)src);
  if (n == 0 && ferror((FILE*)src)) return -1;
  return (long)n;
}

struct memSrc {
  const char* p;
  size_t left;
};
static long readMem(void* src, char* buf, size_t len) {
  struct memSrc* m = src;
  size_t n = m->left < len ? m->left : len;
  memcpy(buf, m->p, n);
  m->p += n;
  m->left -= n;
  return (long)n;
}

ncclResult_t anycclTopoLoad(const char* path, struct anycclTopo** topo, char* err, size_t errLen) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return anycclTopoError(err, errLen, "%s: cannot open the topology file: %s", path, strerror(errno));
  INFO(NCCL_GRAPH | NCCL_ENV, "Loading topology file %s", path);
  ncclResult_t res = parse(path, readFile, f, topo, err, errLen);
  fclose(f);
  return res;
}

ncclResult_t anycclTopoParse(const char* text, size_t len, const char* name, struct anycclTopo** topo, char* err,
                             size_t errLen) {
  struct memSrc m = {text, len};
  return parse(name ? name : "(memory)", readMem, &m, topo, err, errLen);
}

/* ---- writer ------------------------------------------------------------------ */
static void putEscaped(FILE* f, const char* s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    /* a parser turns these into spaces in an attribute (XML's attribute
     * value normalization): as references they come back as they were
     * (fuzz/corpus/topo/crash-attr-newline) */
    case '\n': fputs("&#10;", f); break;
    case '\r': fputs("&#13;", f); break;
    case '\t': fputs("&#9;", f); break;
    default: fputc(*s, f);
    }
  }
}

static void openTag(FILE* f, int indent, const struct anycclTopoNode* n, int empty) {
  fprintf(f, "%*s<%s", indent, "", anycclTopoKindName(n->kind));
  for (int a = 0; a < n->nAttrs; a++) {
    fprintf(f, " %s=\"", n->attrs[a].key);
    putEscaped(f, n->attrs[a].value);
    fputc('"', f);
  }
  fputs(empty ? "/>\n" : ">\n", f);
}

static void writeNode(FILE* f, int indent, const struct anycclTopoNode* n) {
  openTag(f, indent, n, n->nSubs == 0);
  if (n->nSubs == 0) return;
  for (int s = 0; s < n->nSubs; s++) writeNode(f, indent + 2, n->subs[s]);
  fprintf(f, "%*s</%s>\n", indent, "", anycclTopoKindName(n->kind));
}

ncclResult_t anycclTopoWrite(const struct anycclTopo* topo, int host, FILE* f) {
  if (topo->root == NULL) return ncclInvalidArgument;
  if (host < 0) {
    writeNode(f, 0, topo->root);
  } else {
    if (host >= topo->nHosts) return ncclInvalidArgument;
    const struct anycclTopoHost* h = topo->hosts + host;
    if (h->nCpus == h->system->nSubs) {
      writeNode(f, 0, h->system);
    } else { /* a host of a fused multi-host <system>: only its CPUs */
      openTag(f, 0, h->system, 0);
      for (int c = 0; c < h->nCpus; c++) writeNode(f, 2, h->cpus[c]);
      fputs("</system>\n", f);
    }
  }
  return ferror(f) ? ncclSystemError : ncclSuccess;
}

ncclResult_t anycclTopoWriteFile(const struct anycclTopo* topo, int host, const char* path) {
  FILE* f = fopen(path, "w");
  if (f == NULL) {
    WARN("Cannot write the topology to %s: %s", path, strerror(errno));
    return ncclSystemError;
  }
  ncclResult_t res = anycclTopoWrite(topo, host, f);
  if (fclose(f) != 0 && res == ncclSuccess) res = ncclSystemError;
  if (res != ncclSuccess) WARN("Writing the topology to %s failed: %s", path, strerror(errno));
  return res;
}
