#!/usr/bin/env bash
# netns_test.sh MODE ...: the ctest drivers of tests/netns. Exit 0 = pass,
# 77 = skipped (SKIP_RETURN_CODE: not root / no ip netns / no mpirun), else fail.
#
#   netns_test.sh collectives SCRIPTS_DIR NETNS_RANK
#       2 namespaces x 2 ranks, randomized trials of every collective; the log
#       must show NET between the hosts and SHM inside each.
#   netns_test.sh rate-limited SCRIPTS_DIR NETNS_RANK
#       a shaped veth: aggregate tbf RATE per direction, and each TCP flow
#       capped at FLOW_RATE (htb classes by source-port hash). Send/recv across
#       the hosts with 1 data socket per connection, then with 4: the second
#       must be >= MIN_RATIO times faster.
#   netns_test.sh link-drop SCRIPTS_DIR NETNS_RANK
#       2 namespaces x 1 rank, ANYCCL_NET_TIMEOUT=3: a few trials, then
#       all-reduces in a loop; 1 s after both ranks say READY the veth goes
#       down inside host 1 (no RST, no FIN: silence). Every rank must see
#       ncclRemoteError/ncclSystemError within DETECT_LIMIT s (15) of the drop,
#       from the call or ncclCommGetAsyncError, and ncclCommAbort must return
#       within 5 s; a hang ends in the launcher's timeout (fail).
#   netns_test.sh mpirun SCRIPTS_DIR PROGRAM
#       PROGRAM (an MPI build of an NCCL example) under mpirun, 4 ranks on 2
#       virtual hosts (NCCL_HOSTID per rank).
set -u
SKIP=77
mode=$1
scripts=$2
prog=${3:-}

# expect OUTPUT "REGEX;REGEX;...": every regex matches some line
expect() {
  local out=$1 pats p
  IFS=';' read -ra pats <<<"$2"
  for p in "${pats[@]}"; do
    if ! printf '%s\n' "$out" | grep -Eq -- "$p"; then
      echo "netns_test: FAIL: no line matches /$p/"
      return 1
    fi
  done
  echo "netns_test: all ${#pats[@]} patterns found"
}

case $mode in
collectives)
  out=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET "$scripts/netns-2host.sh" -n 2 --timeout 50 -- \
        "$prog" --trials 60 --seed "${NETNS_TEST_SEED:-$RANDOM}" 2>&1)
  rc=$?
  if [ $rc = $SKIP ]; then printf '%s\n' "$out"; exit $SKIP; fi
  # the full INFO log is long: show the verdicts, the transports and any trouble
  printf '%s\n' "$out" | grep -E "netns-2host|netns_rank|PASS|FAIL|WARN|WRONG|failed|via (NET|SHM)|SKIP|Bootstrap: using" | head -n 80
  [ $rc = 0 ] || { echo "netns_test: FAIL: netns-2host.sh exited $rc"; exit 1; }
  # between hosts over the veth; inside a host through shared memory; all trials passed
  expect "$out" "via NET/P2P;via SHM;NET/Socket : Using \[0\]anyccl0:10\.200\.;PASS: 4 ranks;, 0 in all$" || exit 1
  ;;
rate-limited)
  RATE=${NETNS_TEST_RATE:-300mbit}
  FLOW_RATE=${NETNS_TEST_FLOW_RATE:-50mbit}
  BYTES=${NETNS_TEST_BYTES:-4000000}
  MIN_RATIO=${NETNS_TEST_MIN_RATIO:-1.5}
  declare -A bw
  for socks in 1 4; do
    out=$("$scripts/netns-2host.sh" -n 2 --timeout 40 --rate "$RATE" --flow-rate "$FLOW_RATE" --stats \
          --env NCCL_SOCKET_NTHREADS=1 --env NCCL_NSOCKS_PERTHREAD=$socks -- \
          "$prog" --trials 0 --bw "$BYTES" --bw-iters 3 2>&1)
    rc=$?
    if [ $rc = $SKIP ]; then printf '%s\n' "$out"; exit $SKIP; fi
    printf '%s\n' "$out" | grep -E "netns-2host|sendrecv|flow classes|WARN|FAIL|failed"
    [ $rc = 0 ] || { echo "netns_test: FAIL: netns-2host.sh exited $rc"; exit 1; }
    bw[$socks]=$(printf '%s\n' "$out" | sed -n 's/.*algbw \([0-9.]*\) GB\/s per rank.*/\1/p' | head -n 1)
    [ -n "${bw[$socks]}" ] || { echo "netns_test: FAIL: no bandwidth line"; exit 1; }
  done
  awk -v a="${bw[1]}" -v b="${bw[4]}" -v m="$MIN_RATIO" -v r="$RATE" -v f="$FLOW_RATE" 'BEGIN {
    ratio = b / a
    printf "netns_test: link %s, each flow <= %s: 1 socket per connection %.4f GB/s per rank, 4 sockets %.4f GB/s per rank: x%.2f (need >= %s)\n", r, f, a, b, ratio, m
    if (ratio < m) { print "netns_test: FAIL: more sockets did not raise the throughput enough"; exit 1 }
    print "netns_test: PASS"
  }' || exit 1
  ;;
link-drop)
  NET_TIMEOUT=${NETNS_TEST_NET_TIMEOUT:-3}
  DETECT_LIMIT=${NETNS_TEST_DETECT_LIMIT:-15}
  out=$("$scripts/netns-2host.sh" -n 1 --timeout 60 \
        --drop-after-ready "${NETNS_TEST_DROP_AFTER:-1}" --drop-host 1 \
        --env ANYCCL_NET_TIMEOUT="$NET_TIMEOUT" -- \
        "$prog" --trials 5 --until-error 40 --detect-limit "$DETECT_LIMIT" 2>&1)
  rc=$?
  if [ $rc = $SKIP ]; then printf '%s\n' "$out"; exit $SKIP; fi
  printf '%s\n' "$out" | grep -E "netns-2host|netns_rank|READY|LINK-ERROR|WARN|FAIL|failed|rror|SKIP" | head -n 60
  [ $rc = 0 ] || { echo "netns_test: FAIL: netns-2host.sh exited $rc"; exit 1; }
  drop=$(printf '%s\n' "$out" | sed -n 's/^netns-2host: link down: .* epoch=\([0-9.]*\)$/\1/p' | head -n 1)
  [ -n "$drop" ] || { echo "netns_test: FAIL: the link was not taken down"; exit 1; }
  # each rank: an error line, ok, after the drop and within DETECT_LIMIT s of it
  printf '%s\n' "$out" | awk -v drop="$drop" -v lim="$DETECT_LIMIT" -v nt="$NET_TIMEOUT" '
    /LINK-ERROR rank [0-9]+: / {
      r = $0; sub(/.*LINK-ERROR rank /, "", r); sub(/:.*/, "", r)
      e = $0; sub(/.*epoch=/, "", e); sub(/ .*/, "", e)
      a = $0; sub(/.*abort=/, "", a); sub(/ .*/, "", a)
      err = $0; sub(/.*LINK-ERROR rank [0-9]+: [a-zA-Z]+: /, "", err); sub(/ \(.*/, "", err)
      n++; d = e - drop
      printf "netns_test: rank %s: \"%s\" %.2f s after the link went down (ANYCCL_NET_TIMEOUT=%s), ncclCommAbort %.3f s\n", r, err, d, nt, a
      if ($0 !~ /LINK-ERROR rank [0-9]+: ok:/) { print "netns_test: FAIL: rank " r " reported a failure"; bad = 1 }
      if (d < 0) { print "netns_test: FAIL: rank " r " saw the error before the link went down"; bad = 1 }
      if (d > lim) { print "netns_test: FAIL: rank " r " took longer than " lim " s"; bad = 1 }
    }
    END {
      if (n != 2) { print "netns_test: FAIL: " n " of 2 ranks reported an error line"; exit 1 }
      if (bad) exit 1
      print "netns_test: PASS"
    }' || exit 1
  ;;
mpirun)
  if [ -z "$prog" ]; then
    echo "SKIP: the MPI example is not built (CMake found no MPI: apt-get install openmpi-bin libopenmpi-dev)"
    exit $SKIP
  fi
  out=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET "$scripts/mpirun-virtual-hosts.sh" -np 4 --ranks-per-host 2 \
        --timeout 50 -- "$prog" 2>&1)
  rc=$?
  if [ $rc = $SKIP ]; then printf '%s\n' "$out"; exit $SKIP; fi
  printf '%s\n' "$out" | grep -E "mpirun-virtual-hosts|Rank|WARN|via (NET|SHM)|SKIP|rror" | head -n 60
  [ $rc = 0 ] || { echo "netns_test: FAIL: mpirun-virtual-hosts.sh exited $rc"; exit 1; }
  n=$(printf '%s\n' "$out" | grep -c "Rank [0-9]*\] Success")
  [ "$n" = 4 ] || { echo "netns_test: FAIL: $n of 4 ranks said Success"; exit 1; }
  expect "$out" "via NET/P2P;via SHM;NCCL_HOSTID=vhost1" || exit 1
  ;;
link-up)
  # both veth ends are running (operstate up) when the ranks start: software
  # that lists only running interfaces (libfabric's tcp provider) finds them
  out=$("$scripts/netns-2host.sh" -n 1 --timeout 20 -- cat /sys/class/net/anyccl0/operstate 2>&1)
  rc=$?
  if [ $rc = $SKIP ]; then printf '%s\n' "$out"; exit $SKIP; fi
  printf '%s\n' "$out"
  [ $rc = 0 ] || { echo "netns_test: FAIL: netns-2host.sh exited $rc"; exit 1; }
  expect "$out" "^\[h0 r0\] up$;^\[h1 r1\] up$" || exit 1
  ;;
*)
  echo "usage: $0 collectives|rate-limited|link-drop|mpirun|link-up SCRIPTS_DIR PROGRAM" >&2
  exit 2
  ;;
esac
exit 0
