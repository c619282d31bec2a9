#!/usr/bin/env bash
# netns-2host.sh: run the ranks of an NCCL-API program on two real (network)
# hosts: two network namespaces joined by a veth pair, optionally shaped.
#
#   scripts/netns-2host.sh [options] [--] PROGRAM [ARGS...]
#
# Rank r (0 .. 2*N-1) runs on host h = r / N as
#   ip netns exec <ns of h> PROGRAM ARGS     with, in its environment,
#   ANYCCL_TEST_RANK=r ANYCCL_TEST_NRANKS=2N ANYCCL_TEST_LOCAL_RANK=r%N
#   ANYCCL_TEST_HOST=h ANYCCL_TEST_RANKS_PER_HOST=N LOCAL_RANK=r%N
#   NCCL_HOSTID=h NCCL_SOCKET_IFNAME==anyccl0 NCCL_COMM_ID=<h0 address>:<port>
# ({rank} {nranks} {local} {host} in ARGS are replaced by those values too).
# With NCCL_COMM_ID set every rank computes the same unique id and rank 0
# starts the bootstrap root in ncclCommInitRank, so no id has to travel.
#
# The script waits for every rank (with a timeout), prints each rank's output
# prefixed by [hH rR], and exits 0 only when every rank exited 0 (1 when a
# rank failed: the others are stopped 5 s later; 124 on timeout; 77, with a
# line "SKIP: ...", when it cannot run here: not root, no `ip netns`, or a
# kernel without the qdiscs asked for). The namespaces, and with them the
# veth pair and its qdiscs, are ALWAYS removed (trap on exit, Ctrl-C, TERM,
# HUP). Nothing outside the two namespaces is
# touched: no interface, address or route of the calling host. Runs may
# overlap: names carry this shell's pid; addresses live inside the private
# namespaces, so concurrent runs may use the same ones.
#
# Options:
#   -n, --ranks-per-host N  ranks on each of the two hosts (default 2)
#   --rate RATE             tbf on both veth ends: the link's aggregate rate
#                           per direction (tc units: 500mbit, 1gbit, ...)
#   --flow-rate RATE        also cap each TCP flow (socket) at RATE: htb
#                           with 256 classes, one per hash bucket of the TCP
#                           source port (u32 filter), under the tbf. Models
#                           the per-flow limits of real fabrics (one ECMP
#                           path per flow, per-flow caps of cloud networks):
#                           then more sockets per connection mean more
#                           throughput, up to RATE of --rate. (Two flows in
#                           one bucket share its RATE; ports of one
#                           connection's sockets are a few apart, so they
#                           rarely do.)
#   --delay TIME            netem delay on both ends (RTT = 2 x TIME); needs
#                           sch_netem in the kernel
#   --burst SIZE            tbf burst (default 256kb)
#   --timeout SECS          kill the ranks after SECS (default 60)
#   --drop-after-ready SECS a link that drops: once every rank has printed a
#                           line starting with READY (stdout, flushed), wait
#                           SECS (may be fractional) and take the veth end of
#                           host --drop-host down (`ip link set anyccl0 down`
#                           inside its namespace: no RST, no FIN, the peers
#                           just go silent); prints "netns-2host: link down
#                           ... epoch=<wall-clock seconds>". Not done when a
#                           rank exits first.
#   --drop-host H           the host whose end goes down (0 or 1, default 1)
#   --port PORT             bootstrap port of rank 0 (default 29500)
#   --subnet A.B.C          the veth addresses are A.B.C.1 and A.B.C.2 (default 10.200.0)
#   --env NAME=VALUE        extra environment for every rank (repeatable)
#   --stats                 print the qdisc counters and the flows seen after the run
#   --keep-going            do not stop the other ranks when one fails
#   -q, --quiet             print rank output only for failed ranks
#   -h, --help
set -u

SKIP_RC=77
RPH=2
RATE=""
FLOW_RATE=""
DELAY=""
BURST=256kb
TIMEOUT=60
DROP_AFTER=""
DROP_HOST=1
PORT=29500
SUBNET=10.200.0
STATS=0
KEEP_GOING=0
QUIET=0
EXTRA_ENV=()
IFNAME=anyccl0

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
die() { echo "netns-2host: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    -n|--ranks-per-host) RPH=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --flow-rate) FLOW_RATE=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --burst) BURST=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --drop-after-ready) DROP_AFTER=$2; shift 2 ;;
    --drop-host) DROP_HOST=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --subnet) SUBNET=$2; shift 2 ;;
    --env) EXTRA_ENV+=("$2"); shift 2 ;;
    --stats) STATS=1; shift ;;
    --keep-going) KEEP_GOING=1; shift ;;
    -q|--quiet) QUIET=1; shift ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage 2
case $RPH in ''|*[!0-9]*|0) die "--ranks-per-host wants a positive number" ;; esac
case $TIMEOUT in ''|*[!0-9]*|0) die "--timeout wants a positive number of seconds" ;; esac
if [ -n "$DROP_AFTER" ]; then
  [[ $DROP_AFTER =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--drop-after-ready wants seconds (e.g. 1 or 0.5)"
fi
case $DROP_HOST in 0|1) ;; *) die "--drop-host wants 0 or 1" ;; esac
for kv in ${EXTRA_ENV[@]+"${EXTRA_ENV[@]}"}; do
  case $kv in *=*) ;; *) die "--env wants NAME=VALUE, got '$kv'" ;; esac
done
PROG=$1
shift
ARGS=("$@")
if [[ $PROG != */* ]]; then
  p=$(command -v -- "$PROG") || die "$PROG: not found"
  PROG=$p
fi
[ -x "$PROG" ] || die "$PROG: not an executable file"

skip() {
  echo "SKIP: needs root and ip netns ($*)"
  exit $SKIP_RC
}
[ "$(id -u)" = 0 ] || skip "running as uid $(id -u)"
command -v ip >/dev/null 2>&1 || skip "no ip command: apt-get install iproute2"
ip netns list >/dev/null 2>&1 || skip "'ip netns list' fails"
if [ -n "$RATE$FLOW_RATE$DELAY" ]; then
  command -v tc >/dev/null 2>&1 || skip "no tc command: apt-get install iproute2"
fi

# ---- names, cleanup ---------------------------------------------------------
TAG=$$
if [ -e /run/netns/anyccl-h0-$TAG ] || [ -e /run/netns/anyccl-h1-$TAG ]; then
  TAG=$$-$RANDOM # a namespace left by a killed run whose pid was ours
fi
NS=("anyccl-h0-$TAG" "anyccl-h1-$TAG")
ADDR=("$SUBNET.1" "$SUBNET.2")
CREATED=()
PIDS=()
TMP=""
CLEANED=0

kill_ranks() { # SIGNAL: to each rank's own process group (its pid is the
  # group id; while any member lives the id cannot be reused)
  local pid
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do
    kill "-$1" -- "-$pid" 2>/dev/null
  done
}

cleanup() {
  [ $CLEANED = 1 ] && return
  CLEANED=1
  if [ ${#PIDS[@]} -gt 0 ]; then
    kill_ranks TERM
    local i
    for i in 1 2 3 4 5 6 7 8 9 10; do
      local alive=0 pid
      for pid in "${PIDS[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
      [ $alive = 0 ] && break
      sleep 0.2
    done
    kill_ranks KILL
    wait 2>/dev/null
  fi
  local ns
  for ns in ${CREATED[@]+"${CREATED[@]}"}; do
    ip netns del "$ns" 2>/dev/null || echo "netns-2host: could not delete namespace $ns" >&2
  done
  [ -n "$TMP" ] && rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "netns-2host: interrupted" >&2; exit 130' INT
trap 'echo "netns-2host: terminated" >&2; exit 143' TERM HUP

# ---- the two hosts ------------------------------------------------------------
for h in 0 1; do
  if ! err=$(ip netns add "${NS[h]}" 2>&1); then
    skip "ip netns add ${NS[h]}: $err"
  fi
  CREATED+=("${NS[h]}")
done
# Created directly inside the namespaces: the calling host never sees the pair.
ip link add "$IFNAME" netns "${NS[0]}" type veth peer name "$IFNAME" netns "${NS[1]}" ||
  die "cannot create the veth pair (is CONFIG_VETH enabled?)"
for h in 0 1; do
  ip -n "${NS[h]}" link set lo up || die "lo up in ${NS[h]}"
  ip -n "${NS[h]}" addr add "${ADDR[h]}/24" dev "$IFNAME" || die "address ${ADDR[h]} in ${NS[h]}"
  ip -n "${NS[h]}" link set "$IFNAME" up || die "$IFNAME up in ${NS[h]}"
done
# The kernel reports the second end's carrier (operstate UP, IFF_RUNNING) up
# to a second later (linkwatch); software that lists only running interfaces
# (libfabric's tcp provider, under aws-ofi-nccl) would find none on that host.
for h in 0 1; do
  for _ in $(seq 50); do
    [ "$(ip netns exec "${NS[h]}" cat /sys/class/net/$IFNAME/operstate 2>/dev/null)" = up ] && break
    sleep 0.1
  done
  [ "$(ip netns exec "${NS[h]}" cat /sys/class/net/$IFNAME/operstate 2>/dev/null)" = up ] ||
    die "$IFNAME in ${NS[h]} is not up after 5 s"
done

# ---- shaping (egress of each end: both directions) ---------------------------
# root [netem delay] -> [tbf aggregate rate] -> [htb: 256 flow classes]
shape() { # NS
  local ns=$1 parent=root next=1 batch
  batch=$(mktemp) || die "mktemp"
  if [ -n "$DELAY" ]; then
    echo "qdisc add dev $IFNAME $parent handle $next: netem delay $DELAY limit 100000" >>"$batch"
    parent="parent $next:1"; next=$((next + 1))
  fi
  if [ -n "$RATE" ]; then
    echo "qdisc add dev $IFNAME $parent handle $next: tbf rate $RATE burst $BURST latency 100ms" >>"$batch"
    parent="parent $next:1"; next=$((next + 1))
  fi
  if [ -n "$FLOW_RATE" ]; then
    local h=$next b
    # Unclassified packets (ARP) go through htb's direct queue, unshaped.
    echo "qdisc add dev $IFNAME $parent handle $h: htb" >>"$batch"
    for b in $(seq 0 255); do
      printf 'class add dev %s parent %d: classid %d:%x htb rate %s ceil %s burst 64k cburst 64k quantum 60000\n' \
        "$IFNAME" "$h" "$h" $((0x100 + b)) "$FLOW_RATE" "$FLOW_RATE" >>"$batch"
    done
    # TCP: hash on bits 1..8 of the source port (word at IP offset 20 = sport:dport;
    # IP options never occur here). Linux gives consecutive connect()s to one
    # listener ports a few even steps apart, so the data sockets of one
    # connection land in distinct buckets.
    echo "filter add dev $IFNAME parent $h: prio 1 handle 10: protocol ip u32 divisor 256" >>"$batch"
    echo "filter add dev $IFNAME parent $h: prio 1 protocol ip u32 ht 800:: match ip protocol 6 0xff hashkey mask 0x01fe0000 at 20 link 10:" >>"$batch"
    for b in $(seq 0 255); do
      printf 'filter add dev %s parent %d: prio 1 protocol ip u32 ht 10:%x: match u32 0 0 flowid %d:%x\n' \
        "$IFNAME" "$h" "$b" "$h" $((0x100 + b)) >>"$batch"
    done
  fi
  local err
  if ! err=$(tc -n "$ns" -batch "$batch" 2>&1); then
    rm -f "$batch"
    case $err in
      *"kind is unknown"*|*"Unknown qdisc"*|*"Unknown filter"*|*"not supported"*)
        # the kernel lacks a qdisc or classifier: an environment limit, like not being root
        echo "SKIP: this kernel cannot shape the link: $(printf '%s' "$err" | head -n 1)" \
          "(--delay needs sch_netem, --rate sch_tbf, --flow-rate sch_htb and cls_u32)"
        exit $SKIP_RC ;;
      *) die "tc failed in $ns: $err" ;;
    esac
  fi
  rm -f "$batch"
}
if [ -n "$RATE$FLOW_RATE$DELAY" ]; then
  for h in 0 1; do shape "${NS[h]}"; done
fi

# ---- the ranks ------------------------------------------------------------------
TMP=$(mktemp -d /tmp/anyccl-netns.XXXXXX) || die "mktemp"
NRANKS=$((2 * RPH))
echo "netns-2host: hosts ${NS[0]} (${ADDR[0]}) and ${NS[1]} (${ADDR[1]}) on $IFNAME," \
  "${RATE:+rate $RATE, }${FLOW_RATE:+per-flow $FLOW_RATE, }${DELAY:+delay $DELAY, }$NRANKS ranks, $RPH per host"
START=$(date +%s.%N)
for ((r = 0; r < NRANKS; r++)); do
  h=$((r / RPH)); l=$((r % RPH))
  a=()
  for x in ${ARGS[@]+"${ARGS[@]}"}; do
    x=${x//\{rank\}/$r}; x=${x//\{nranks\}/$NRANKS}; x=${x//\{local\}/$l}; x=${x//\{host\}/$h}
    a+=("$x")
  done
  # setsid: each rank leads its own process group, so that it and anything
  # it starts can be stopped together (by this pid, nothing broader).
  setsid ip netns exec "${NS[h]}" env ${EXTRA_ENV[@]+"${EXTRA_ENV[@]}"} \
    ANYCCL_TEST_RANK=$r ANYCCL_TEST_NRANKS=$NRANKS ANYCCL_TEST_LOCAL_RANK=$l ANYCCL_TEST_HOST=$h \
    ANYCCL_TEST_RANKS_PER_HOST=$RPH LOCAL_RANK=$l \
    NCCL_HOSTID=$h NCCL_SOCKET_IFNAME="=$IFNAME" NCCL_COMM_ID="${ADDR[0]}:$PORT" \
    "$PROG" ${a[@]+"${a[@]}"} >"$TMP/rank$r.log" 2>&1 </dev/null &
  PIDS+=($!)
done

# ---- wait ---------------------------------------------------------------------
declare -A RC
TIMED_OUT=0
FAILED_AT=""
# --drop-after-ready: pending -> ready (every rank said READY at READY_AT) -> down
DROP_STATE=${DROP_AFTER:+pending}
READY_AT=""
all_ready() {
  local r
  for ((r = 0; r < NRANKS; r++)); do
    grep -q '^READY' "$TMP/rank$r.log" 2>/dev/null || return 1
  done
}
none_exited() {
  local r
  for ((r = 0; r < NRANKS; r++)); do
    [ -n "${RC[$r]+x}" ] && return 1
  done
  return 0
}
while :; do
  if [ "$DROP_STATE" = pending ] && none_exited && all_ready; then
    READY_AT=${EPOCHREALTIME/,/.}
    DROP_STATE=ready
    echo "netns-2host: all $NRANKS ranks READY; link down in ${DROP_AFTER} s"
  fi
  if [ "$DROP_STATE" = ready ] &&
     awk -v a="$READY_AT" -v b="${EPOCHREALTIME/,/.}" -v d="$DROP_AFTER" 'BEGIN { exit !(b - a >= d) }'; then
    if ! none_exited; then
      DROP_STATE=skipped
      echo "netns-2host: a rank exited before the link drop: link left up"
    elif DROP_EPOCH=${EPOCHREALTIME/,/.} && err=$(ip -n "${NS[DROP_HOST]}" link set "$IFNAME" down 2>&1); then
      DROP_STATE=down
      echo "netns-2host: link down: $IFNAME in ${NS[DROP_HOST]} (host $DROP_HOST) epoch=$DROP_EPOCH"
    else
      DROP_STATE=failed
      echo "netns-2host: FAIL: could not take $IFNAME down in ${NS[DROP_HOST]}: $err"
    fi
  fi
  alive=0
  for ((r = 0; r < NRANKS; r++)); do
    [ -n "${RC[$r]+x}" ] && continue
    if kill -0 "${PIDS[r]}" 2>/dev/null; then
      alive=$((alive + 1))
    else
      wait "${PIDS[r]}"
      RC[$r]=$?
      [ "${RC[$r]}" != 0 ] && [ -z "$FAILED_AT" ] && FAILED_AT=$SECONDS
    fi
  done
  [ $alive = 0 ] && break
  if [ $SECONDS -ge "$TIMEOUT" ]; then
    TIMED_OUT=1
    echo "netns-2host: timeout after ${TIMEOUT} s: stopping $alive rank(s)"
    break
  fi
  if [ -n "$FAILED_AT" ] && [ $KEEP_GOING = 0 ] && [ $((SECONDS - FAILED_AT)) -ge 5 ]; then
    echo "netns-2host: a rank failed; stopping the $alive still running after 5 s"
    break
  fi
  sleep 0.1
done
STOPPED=()
if [ $alive -gt 0 ]; then
  for ((r = 0; r < NRANKS; r++)); do [ -z "${RC[$r]+x}" ] && STOPPED+=($r); done
  kill_ranks TERM
  sleep 1
  kill_ranks KILL
  for ((r = 0; r < NRANKS; r++)); do
    if [ -z "${RC[$r]+x}" ]; then
      wait "${PIDS[r]}"
      RC[$r]=$?
    fi
  done
fi
ELAPSED=$(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

# ---- report -------------------------------------------------------------------
bad=0
for ((r = 0; r < NRANKS; r++)); do
  [ "${RC[$r]}" != 0 ] && bad=$((bad + 1))
  if [ $QUIET = 0 ] || [ "${RC[$r]}" != 0 ]; then
    sed "s/^/[h$((r / RPH)) r$r] /" "$TMP/rank$r.log"
  fi
done
for ((r = 0; r < NRANKS; r++)); do
  if [[ " ${STOPPED[*]} " == *" $r "* ]]; then
    echo "netns-2host: rank $r (host $((r / RPH))) was stopped (exit ${RC[$r]})"
  elif [ "${RC[$r]}" != 0 ]; then
    echo "netns-2host: rank $r (host $((r / RPH))) exited with ${RC[$r]}"
  fi
done
if [ $STATS = 1 ] && [ -n "$RATE$FLOW_RATE$DELAY" ]; then
  for h in 0 1; do
    echo "netns-2host: host $h egress qdiscs:"
    tc -n "${NS[h]}" -s qdisc show dev "$IFNAME" | sed 's/^/    /'
    if [ -n "$FLOW_RATE" ]; then
      # flow classes that carried at least 64 KiB: the data flows seen
      tc -n "${NS[h]}" -s class show dev "$IFNAME" | awk '
        /^class htb/ { cls = $3 }
        /Sent/ { if ($2 >= 65536) { n++; list = list " " cls "=" int($2 / 1048576) "MiB" } }
        END { printf "    flow classes with traffic: %d:%s\n", n, list }'
    fi
  done
fi
if [ -n "$DROP_AFTER" ] && [ "$DROP_STATE" != down ]; then
  echo "netns-2host: FAIL: the link was never taken down (${DROP_STATE}: not every rank printed READY?)"
  [ $TIMED_OUT = 1 ] && exit 124
  exit 1
fi
if [ $TIMED_OUT = 1 ]; then
  echo "netns-2host: FAIL: timeout (${TIMEOUT} s)"
  exit 124
fi
if [ $bad -gt 0 ]; then
  echo "netns-2host: FAIL: $((bad - ${#STOPPED[@]})) of $NRANKS ranks failed${STOPPED[*]:+, ${#STOPPED[@]} stopped} (${ELAPSED} s)"
  exit 1
fi
echo "netns-2host: all $NRANKS ranks exited 0 (${ELAPSED} s)"
exit 0
