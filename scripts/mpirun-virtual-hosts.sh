#!/usr/bin/env bash
# mpirun-virtual-hosts.sh: run an NCCL-API program under mpirun, one rank per
# process, with the ranks spread over virtual hosts on this machine:
#
#   scripts/mpirun-virtual-hosts.sh [-np N] [--ranks-per-host K] [options] [--] PROGRAM [ARGS...]
#
# Each rank is started through this script in wrapper mode, which reads its
# rank from the launcher (OMPI_COMM_WORLD_RANK; else PMIX_RANK, PMI_RANK,
# SLURM_PROCID) and exports, before exec'ing PROGRAM:
#   NCCL_HOSTID=vhost<rank / K>     ranks of one virtual host use shared
#                                   memory, the others the network transport
#   LOCAL_RANK=<rank % K>, ANYCCL_TEST_LOCAL_RANK (same), ANYCCL_TEST_HOST
# NCCL_SOCKET_IFNAME defaults to lo (every virtual host lives on this
# machine: no traffic leaves it); set it to override.
#
# e.g. the MPI build of NCCL's example 2 (examples/, built when CMake finds MPI):
#   scripts/mpirun-virtual-hosts.sh -np 4 --ranks-per-host 2 build/examples/one_device_per_process_mpi
#
# Options:
#   -np, -n N               ranks (default 4)
#   --ranks-per-host K      ranks per virtual host (default 2)
#   --mpirun PATH           launcher (default: $MPIRUN, else mpirun on PATH)
#   --mpi-arg ARG           extra argument for mpirun (repeatable)
#   --timeout SECS          stop mpirun after SECS (exit 124); default none
#   -h, --help
# Open MPI as root / on few cores: --allow-run-as-root (when root) and
# --oversubscribe are passed; its TCP traffic is kept on lo. Exit 77 (SKIP)
# when no mpirun is found.
set -u
SKIP_RC=77

# ---- wrapper mode: one rank -----------------------------------------------------
if [ "${1:-}" = "--rank-wrapper" ]; then
  K=$2
  shift 2
  r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-${SLURM_PROCID:-}}}}
  if [ -z "$r" ]; then
    echo "mpirun-virtual-hosts: no rank in the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID)" >&2
    exit 2
  fi
  h=$((r / K))
  export NCCL_HOSTID=vhost$h LOCAL_RANK=$((r % K)) ANYCCL_TEST_LOCAL_RANK=$((r % K)) ANYCCL_TEST_HOST=$h
  [ -n "${MPIRUN_VHOSTS_VERBOSE:-}" ] &&
    echo "mpirun-virtual-hosts: rank $r -> NCCL_HOSTID=$NCCL_HOSTID LOCAL_RANK=$LOCAL_RANK" >&2
  exec "$@"
fi

# ---- launcher mode ------------------------------------------------------------------
NP=4
K=2
MPIRUN=${MPIRUN:-mpirun}
MPI_ARGS=()
TIMEOUT=0
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    -np|-n|--np) NP=$2; shift 2 ;;
    --ranks-per-host) K=$2; shift 2 ;;
    --mpirun) MPIRUN=$2; shift 2 ;;
    --mpi-arg) MPI_ARGS+=("$2"); shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    -*) echo "mpirun-virtual-hosts: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage 2
case $NP in ''|*[!0-9]*|0) echo "mpirun-virtual-hosts: -np wants a positive number" >&2; exit 2 ;; esac
case $K in ''|*[!0-9]*|0) echo "mpirun-virtual-hosts: --ranks-per-host wants a positive number" >&2; exit 2 ;; esac
if ! command -v "$MPIRUN" >/dev/null 2>&1; then
  echo "SKIP: $MPIRUN not found (apt-get install openmpi-bin libopenmpi-dev)"
  exit $SKIP_RC
fi
PROG=$1
shift
if [[ $PROG != */* ]]; then PROG=$(command -v -- "$PROG") || { echo "mpirun-virtual-hosts: $1 not found" >&2; exit 2; }; fi
SELF=$(readlink -f "$0")

export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
export MPIRUN_VHOSTS_VERBOSE=1
# the examples pick device = local rank; anyccl-cpu has 8 devices per host by default
if [ -z "${ANYCCL_CPU_DEVICES:-}" ] && [ "$NP" -gt 8 ]; then export ANYCCL_CPU_DEVICES=$NP; fi

FLAGS=(-np "$NP")
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
  [ "$(id -u)" = 0 ] && FLAGS+=(--allow-run-as-root)
  FLAGS+=(--oversubscribe --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
  # local ranks inherit the environment; -x also carries it to other nodes
  for v in $(compgen -e | grep -E '^(NCCL_|ANYCCL_|CUDA_|MPIRUN_VHOSTS_)'); do FLAGS+=(-x "$v"); done
fi
nhosts=$(((NP + K - 1) / K))
echo "mpirun-virtual-hosts: $NP ranks on $nhosts virtual hosts ($K per host), NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME"
CMD=("$MPIRUN" "${FLAGS[@]}" ${MPI_ARGS[@]+"${MPI_ARGS[@]}"} "$SELF" --rank-wrapper "$K" "$PROG" "$@")
if [ "$TIMEOUT" != 0 ]; then
  timeout --signal=TERM --kill-after=10 "$TIMEOUT" "${CMD[@]}"
else
  "${CMD[@]}"
fi
rc=$?
[ $rc = 124 ] && echo "mpirun-virtual-hosts: timeout after $TIMEOUT s"
echo "mpirun-virtual-hosts: mpirun exited with $rc"
exit $rc
