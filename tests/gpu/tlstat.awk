# median span (first block start to last block end) of each launch in an ANYCCL_CUDA_TIMELINE file,
# and median gap from one launch's end to the next one's start: awk -f tlstat.awk <file>.<rank>
!/^#/ { s = $1; if (!(s in a) || $5 < a[s]) a[s] = $5; if (!(s in b) || $5 > b[s]) b[s] = $5 }
function med(x, n,   i, j, t) { for (i = 2; i <= n; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t } return n ? x[int((n + 1) / 2)] : 0 }
END { n = 0; m = 0
  for (s in a) { sp[++n] = (b[s] - a[s]) / 1e3; if ((s + 1) in a) g[++m] = (a[s + 1] - b[s]) / 1e3 }
  printf "%s: %d launches, median span %.1f us, median gap to the next %.1f us\n", FILENAME, n, med(sp, n), med(g, m) }
