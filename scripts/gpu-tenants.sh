#!/usr/bin/env bash
# Multi-tenant checks of gmuxd on a GPU, run through the device tool after
# scripts/gpu-pack.sh (carry .gpu-bin):
#
#   bash scripts/gpu-tenants.sh [integrity] [kill]
#
#   integrity  the checksum program as 4 tenants at 300% of a 16 GiB budget (4 x 12 GB),
#              round robin: every tenant must report 0 mismatches
#   kill       tenant A holds most of the budget; B waits for memory; SIGKILL A and time
#              until the daemon hands A's memory on and until the driver shows it free
#
# Full logs go to $OUT/tenants/; the last lines printed are the summary.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-./out}
mkdir -p "$OUT/tenants" && OUT=$(cd "$OUT" && pwd)/tenants
cd "$ROOT" || exit 1
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
GMUX=$ROOT/.gpu-bin/gmux
WORK=/tmp/gmux-tenants
mkdir -p "$WORK"
CHECKSUM=$WORK/checksum
SUMMARY=()
export GMUX_LOG=info

[[ -x $CHECKSUM ]] || nvcc -O2 -arch=sm_90 -o "$CHECKSUM" gpu/checksum.cu || { echo "checksum build failed"; exit 1; }

start_daemon() { # NAME ARGS...
  local name=$1; shift
  export GMUX_SOCKET=$WORK/$name.sock
  "$GMUX" daemon --socket "$GMUX_SOCKET" "$@" >"$OUT/$name.daemon.log" 2>&1 &
  DAEMON=$!
  for _ in $(seq 100); do [[ -S $GMUX_SOCKET ]] && return; sleep 0.05; done
  echo "daemon $name did not start"; cat "$OUT/$name.daemon.log"
}
stop_daemon() { "$GMUX" stop >/dev/null 2>&1; wait "$DAEMON" 2>/dev/null; }

integrity() {
  start_daemon integrity --hbm 16G --policy rr --timeslice 50ms
  local pids=() t0=$SECONDS
  for i in 0 1 2 3; do
    timeout 540 "$GMUX" run --tenant "cs$i" -- "$CHECKSUM" integrity --total-gb 12 --ops "${OPS:-1500}" --seed $((i + 11)) >"$OUT/integrity.$i.log" 2>&1 &
    pids+=($!)
  done
  sleep 20; "$GMUX" ps >"$OUT/integrity.ps" 2>&1
  local bad=0 rcs=""
  for i in 0 1 2 3; do wait "${pids[$i]}"; rcs+="$? "; done
  for i in 0 1 2 3; do
    grep -q '^integrity:.* mismatches=0 ' "$OUT/integrity.$i.log" || bad=$((bad + 1))
    "$GMUX" get "cs$i" ggroup.stat >"$OUT/integrity.$i.stat" 2>&1
  done
  stop_daemon
  local mism moved
  mism=$(grep -ho 'mismatches=[0-9]*' "$OUT"/integrity.?.log | tr '\n' ' ')
  moved=$(cat "$OUT"/integrity.?.stat | awk '/bytes_d2h/ {s += $2} END {printf "%.1f", s / 2^30}')
  SUMMARY+=("integrity  $([[ $bad == 0 ]] && echo PASS || echo FAIL)  tenants=4 budget=16G total=48GB exit=[${rcs% }] ${mism}evicted_gib=$moved time=$((SECONDS - t0))s")
}

kill_test() {
  start_daemon kill --hbm 16G --policy rr --timeslice 50ms
  # A: 12 GB of buffers, many ops (killed long before it ends); B: 8 GB, must get memory.
  "$GMUX" run --tenant A -- "$CHECKSUM" integrity --total-gb 12 --ops 1000000 --seed 3 >"$OUT/kill.A.log" 2>&1 &
  local a=$!
  sleep 12
  "$GMUX" run --tenant B -- "$CHECKSUM" integrity --total-gb 8 --ops 400 --seed 4 >"$OUT/kill.B.log" 2>&1 &
  local b=$!
  sleep 8
  "$GMUX" ps >"$OUT/kill.ps.before" 2>&1
  local apid
  apid=$(pgrep -f "integrity --total-gb 12 --ops 1000000" | head -1)
  local used_before t_kill
  used_before=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  t_kill=$(date +%s.%N)
  kill -9 "$apid"
  # Driver view: poll used memory until it drops by at least 4 GiB.
  local t_free="" used
  for _ in $(seq 200); do
    used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    if ((used_before - used > 4096)); then t_free=$(date +%s.%N); break; fi
    sleep 0.02
  done
  sleep 1
  "$GMUX" ps >"$OUT/kill.ps.after" 2>&1
  wait "$b"; local brc=$?
  wait "$a" 2>/dev/null
  stop_daemon
  local t_daemon daemon_s
  t_daemon=$(grep -m1 'tenant "A" pid .* \(exited\|disconnected\)' "$OUT/kill.daemon.log" | sed 's/^gmuxd \([0-9.]*\):.*/\1/')
  daemon_s=$(awk "BEGIN { printf \"%.3f\", ${t_daemon:-0} - $t_kill }")
  local free_s=nan
  [[ -n $t_free ]] && free_s=$(awk "BEGIN { printf \"%.3f\", $t_free - $t_kill }")
  local ok=FAIL
  [[ $brc == 0 && -n $t_free ]] && awk "BEGIN { exit !($free_s < 1.0 && $daemon_s < 1.0) }" && ok=PASS
  SUMMARY+=("kill       $ok  driver_freed_s=$free_s used_mib_before=$used_before daemon_reclaim_s=$daemon_s B_exit=$brc B=\"$(grep -o 'mismatches=[0-9]*' "$OUT/kill.B.log")\"")
}

steps=("$@")
((${#steps[@]})) || steps=(integrity kill)
for s in "${steps[@]}"; do
  case $s in
    integrity) integrity ;;
    kill) kill_test ;;
    *) echo "unknown step $s" ;;
  esac
done
echo "=== summary"
printf '%s\n' "${SUMMARY[@]}"
