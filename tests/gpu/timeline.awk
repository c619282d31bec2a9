# tests/gpu/timeline.awk -- one line per launch from an ANYCCL_CUDA_TIMELINE file
# (records "seq lane step what t_ns"; what: 0 lane start, 1 a step's wait done,
# 2 a step posted, 3 lane end):
#   awk -f tests/gpu/timeline.awk timeline.0
# span: first start to last end of the launch; per lane, summed over its steps:
# wait (from the lane's previous mark to the step's wait done) and move (wait done
# to posted). LL slices record only their post (step 254): their wait counts as move.
$1 ~ /^#/ { print; next }
{
  seq = $1; k = $1 " " $2; what = $4; t = $5
  if (!(seq in t0) || t < t0[seq]) t0[seq] = t
  if (!(seq in t1) || t > t1[seq]) t1[seq] = t
  if (what == 0) { last[k] = t; lanes[seq]++ }
  else if (what == 1) { wait[seq] += t - last[k]; last[k] = t; steps[seq]++ }
  else if (what == 2) { move[seq] += t - last[k]; last[k] = t }
}
END {
  printf "%6s %5s %6s %9s %11s %11s\n", "seq", "lanes", "steps", "span_us", "wait_us/ln", "move_us/ln"
  for (s in t0)
    printf "%6d %5d %6d %9.1f %11.1f %11.1f\n", s, lanes[s], steps[s], (t1[s] - t0[s]) / 1e3,
           wait[s] / 1e3 / (lanes[s] ? lanes[s] : 1), move[s] / 1e3 / (lanes[s] ? lanes[s] : 1) | "sort -n"
}
