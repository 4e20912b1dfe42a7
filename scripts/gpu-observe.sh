#!/usr/bin/env bash
# Watching gmux on a GPU, run through the device tool after scripts/gpu-pack.sh (carry
# .gpu-bin):
#
#   bash scripts/gpu-observe.sh [install] [cooperate]
#
#   install    docs/install.md as a new user follows it, without root's parts: install
#              the build into a prefix (scripts/install.sh --from .gpu-bin), run two
#              PyTorch tenants with `gmux run`, and watch them with `gmux top --plain`,
#              `gmux ps`, `gmux events`, `gmux get TENANT gmem.pressure` and /metrics
#   cooperate  `gmux bench cooperate`: a high-priority inference tenant beside a cache
#              tenant that keeps its cache or gives it back on swap events (DURATION,
#              WARMUP seconds, BUDGET, POOL_GIB)
#
# Full logs go to $OUT/observe-logs.tgz, the summary to $OUT/observe-summary.txt; the
# last lines printed are the summary.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RESULTS=${OUT:-./out}
mkdir -p "$RESULTS" && RESULTS=$(cd "$RESULTS" && pwd)
cd "$ROOT" || exit 1
WORK=/tmp/gmux-observe
LOGS=$WORK/logs
rm -rf "$WORK" && mkdir -p "$LOGS"
SUMMARY=()
PARTS=("$@")
[[ ${#PARTS[@]} -gt 0 ]] || PARTS=(install cooperate)

install_part() {
  local prefix=$WORK/prefix
  PREFIX=$prefix bash scripts/install.sh --from .gpu-bin >"$LOGS/install.log" 2>&1 || { SUMMARY+=("install    FAIL (install.sh: see install.log)"); return; }
  local gmux=$prefix/bin/gmux
  local prog='import torch, time
x = torch.randn(int(1.5 * 2**30) // 4, device="cuda")
t = time.time()
while time.time() - t < 25:
    x.mul_(1.0001); torch.cuda.synchronize()'
  # docs/install.md step 3 as a user without root follows it: no daemon of their own
  # yet, no GMUX_SOCKET; the first `gmux run` starts one.
  (
    unset GMUX_SOCKET
    export XDG_RUNTIME_DIR=$WORK/xdg
    mkdir -p -m 700 "$XDG_RUNTIME_DIR"
    "$gmux" run --tenant a -- python3 -c "$prog" >"$LOGS/a.log" 2>&1 &
    local a=$!
    "$gmux" run --tenant b --mem-limit 8G -- python3 -c "$prog" >"$LOGS/b.log" 2>&1 &
    local b=$!
    sleep 12
    "$gmux" top --plain --interval 1 --count 3 >"$LOGS/top.txt" 2>&1
    "$gmux" ps >"$LOGS/ps.txt" 2>&1
    wait "$a"; echo "a_exit=$?" >"$LOGS/exits.txt"
    wait "$b"; echo "b_exit=$?" >>"$LOGS/exits.txt"
    "$gmux" stop >/dev/null 2>&1
  )
  # The daemon with a budget and /metrics (docs/install.md step 2's flags), a tenant
  # held below what it uses: its pressure, its memory events and the metrics.
  local sock=$WORK/gpu0.sock
  export GMUX_SOCKET=$sock
  "$gmux" daemon --hbm 6G --socket "$sock" --metrics 127.0.0.1:9400 >"$LOGS/daemon.log" 2>&1 &
  local daemon=$!
  for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
  "$gmux" events --json >"$LOGS/events.jsonl" 2>&1 &
  local events=$!
  "$gmux" run --tenant c -- python3 -c "${prog/< 25/< 15}" >"$LOGS/c.log" 2>&1 &
  local c=$!
  "$gmux" run --tenant d --mem-limit 1G -- python3 -c "${prog/< 25/< 15}" >"$LOGS/d.log" 2>&1 &
  local d=$!
  sleep 10
  "$gmux" get d gmem.pressure >"$LOGS/pressure-d.txt" 2>&1
  "$gmux" get d gmem.events >"$LOGS/events-d.txt" 2>&1
  python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9400/metrics").read().decode())' >"$LOGS/metrics.txt" 2>&1
  wait "$c"; local crc=$?
  wait "$d"; local drc=$?
  kill "$events" 2>/dev/null
  "$gmux" stop >/dev/null 2>&1
  wait "$daemon" 2>/dev/null
  local seen exits
  seen=$(grep -E '(; | \| )a [a-z]+ gmem ' "$LOGS/top.txt" | grep -cE '(; | \| )b [a-z]+ gmem ')
  exits=$(tr '\n' ' ' <"$LOGS/exits.txt")
  local ok=FAIL
  [[ $exits == "a_exit=0 b_exit=0 " && $crc == 0 && $drc == 0 && $seen -gt 0 ]] && grep -q '^a ' "$LOGS/ps.txt" && grep -q '^b ' "$LOGS/ps.txt" \
    && grep -q 'gmux_tenant_commands_total' "$LOGS/metrics.txt" && ok=PASS
  SUMMARY+=("install    $ok  version=\"$("$gmux" --version)\" top_lines_with_both=$seen $exits c_exit=$crc d_exit=$drc events=$(wc -l <"$LOGS/events.jsonl")")
  SUMMARY+=("  top: $(tail -1 "$LOGS/top.txt" | cut -c1-400)")
  SUMMARY+=("  d pressure: $(head -1 "$LOGS/pressure-d.txt"); d events: $(tr '\n' ' ' <"$LOGS/events-d.txt")")
}

cooperate_part() {
  .gpu-bin/gmux bench cooperate --out "$WORK/cooperate" --duration "${DURATION:-20}" --warmup "${WARMUP:-20}" \
    --budget "${BUDGET:-8G}" --pool-gib "${POOL_GIB:-12}" >"$LOGS/cooperate.txt" 2>"$LOGS/cooperate.err"
  local rc=$?
  cp -r "$WORK/cooperate" "$LOGS/" 2>/dev/null
  SUMMARY+=("cooperate  exit=$rc")
  while IFS= read -r l; do SUMMARY+=("  $l"); done <"$LOGS/cooperate.txt"
}

for p in "${PARTS[@]}"; do
  case $p in
    install) install_part ;;
    cooperate) cooperate_part ;;
    *) echo "gpu-observe: unknown part $p (install, cooperate)"; exit 2 ;;
  esac
done
tar czf "$RESULTS/observe-logs.tgz" -C "$WORK" logs
printf '%s\n' "${SUMMARY[@]}" | tee "$RESULTS/observe-summary.txt"
