#!/usr/bin/env bash
# Multi-tenant checks of gmuxd on a GPU, run through the device tool after
# scripts/gpu-pack.sh (carry .gpu-bin):
#
#   bash scripts/gpu-tenants.sh [integrity] [kill] [restart]
#
#   integrity  the checksum program as 4 tenants at 300% of a 16 GiB budget (4 x 12 GB),
#              round robin: every tenant must report 0 mismatches
#   kill       tenant A holds most of the budget; B waits for memory; SIGKILL A and time
#              until the daemon hands A's memory on and until the driver shows it free
#   restart    4 checksum tenants at 150% of a 16 GiB budget; the daemon is SIGKILLed
#              mid-run and a new one started 3 s later on the same socket: every tenant
#              must register again and report 0 mismatches, and the caps of all grants
#              the shims applied (their GMUX_LOG=debug lines) must add up to at most the
#              budget at every instant
#
# Full logs go to $OUT/tenants-logs.tgz (the device tool brings back a few files, so
# they travel as one), the summary to $OUT/tenants-summary.txt; the last lines printed
# are the summary.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RESULTS=${OUT:-./out}
mkdir -p "$RESULTS" && RESULTS=$(cd "$RESULTS" && pwd)
cd "$ROOT" || exit 1
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
GMUX=$ROOT/.gpu-bin/gmux
WORK=/tmp/gmux-tenants
OUT=$WORK/logs
rm -rf "$OUT" && mkdir -p "$OUT"
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
  t_daemon=$(grep -m1 'tenant "A" pid .* \(exited\|disconnected\)' "$OUT/kill.daemon.log" | sed 's/^gmuxd \([^ ]*Z\):.*/\1/')
  [[ -n $t_daemon ]] && t_daemon=$(date -d "$t_daemon" +%s.%N)
  daemon_s=$(awk "BEGIN { printf \"%.3f\", ${t_daemon:-0} - $t_kill }")
  local free_s=nan
  [[ -n $t_free ]] && free_s=$(awk "BEGIN { printf \"%.3f\", $t_free - $t_kill }")
  local ok=FAIL
  [[ $brc == 0 && -n $t_free ]] && awk "BEGIN { exit !($free_s < 1.0 && $daemon_s < 1.0) }" && ok=PASS
  SUMMARY+=("kill       $ok  driver_freed_s=$free_s used_mib_before=$used_before daemon_reclaim_s=$daemon_s B_exit=$brc B=\"$(grep -o 'mismatches=[0-9]*' "$OUT/kill.B.log")\"")
}

restart_test() {
  local flags=(--hbm 16G --policy rr --timeslice 50ms --switch "${SWITCH:-msched}")
  start_daemon restart "${flags[@]}"
  local pids=() t0=$SECONDS
  for i in 0 1 2 3; do
    GMUX_LOG=debug timeout 540 "$GMUX" run --tenant "r$i" -- "$CHECKSUM" integrity --total-gb 6 --ops "${RESTART_OPS:-2000}" --seed $((i + 21)) >"$OUT/restart.$i.log" 2>&1 &
    pids+=($!)
  done
  sleep "${RESTART_AFTER_S:-10}"
  "$GMUX" ps >"$OUT/restart.ps.before" 2>&1
  kill -9 "$DAEMON"; wait "$DAEMON" 2>/dev/null
  local t_kill=$SECONDS
  sleep 3
  local restarted
  restarted=$(date +%s.%N)
  "$GMUX" daemon --socket "$GMUX_SOCKET" "${flags[@]}" >"$OUT/restart.daemon2.log" 2>&1 &
  DAEMON=$!
  sleep 5; "$GMUX" ps >"$OUT/restart.ps.after" 2>&1
  local rcs="" bad=0
  for i in 0 1 2 3; do wait "${pids[$i]}"; rcs+="$? "; done
  for i in 0 1 2 3; do
    grep -q '^integrity:.* mismatches=0 ' "$OUT/restart.$i.log" || bad=$((bad + 1))
  done
  stop_daemon
  # From the shims' GMUX_LOG=debug lines: the caps they applied, added up over the live
  # processes at each grant any of them applied (a process's cap ends at its exit); and
  # which of those alive 2 s after the new daemon started registered with it.
  local checked
  checked=$(python3 - "$restarted" "$OUT"/restart.?.log <<'PY'
import re, sys
restarted, events, back, alive = float(sys.argv[1]), [], 0, 0
for n, path in enumerate(sys.argv[2:]):
    text = open(path, errors="replace").read()
    for m in re.finditer(r"agent ([0-9.]+): (?:grant \d+ cap (\d+) run|exit)", text):
        events.append((float(m.group(1)), n, int(m.group(2) or 0)))
    ends = [float(t) for t in re.findall(r"agent ([0-9.]+): exit", text)]
    if not ends or ends[-1] > restarted + 2:
        alive += 1
        back += "registered again with gmuxd" in text
caps, most = {}, 0
for t, n, cap in sorted(events):
    caps[n] = cap
    most = max(most, sum(caps.values()))
print(f"{most / 2**30:.2f} {back} {alive} {len(events)}")
PY
)
  local most back alive grants
  read -r most back alive grants <<<"$checked"
  local ok=FAIL
  [[ $bad == 0 && $back == "$alive" && $alive -gt 0 ]] && awk "BEGIN { exit !($most <= 16.0) }" && ok=PASS
  SUMMARY+=("restart    $ok  switch=${SWITCH:-msched} tenants=4 budget=16G total=24GB exit=[${rcs% }] registered_again=$back/$alive $(grep -ho 'mismatches=[0-9]*' "$OUT"/restart.?.log | sort | uniq -c | tr -s ' \n' ' ')most_granted_gib=$most grants=$grants down_s=3 killed_at_s=$((t_kill - t0)) time=$((SECONDS - t0))s")
}

steps=("$@")
((${#steps[@]})) || steps=(integrity kill)
for s in "${steps[@]}"; do
  case $s in
    integrity) integrity ;;
    kill) kill_test ;;
    restart) restart_test ;;
    *) echo "unknown step $s" ;;
  esac
done
tar czf "$RESULTS/tenants-logs.tgz" -C "$OUT" .
echo "=== summary"
printf '%s\n' "${SUMMARY[@]}" | tee "$RESULTS/tenants-summary.txt"
