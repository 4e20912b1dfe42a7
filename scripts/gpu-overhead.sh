#!/usr/bin/env bash
# What gmux costs one real program alone, with no memory pressure, in one device call:
# gpu/workload.py (KIND, llm-decode by default) natively, under `gmux run` (a gmuxd
# with no budget), under `gmux record` (the same, writing its trace) and under
# `GMUX_DEBUG=profile gmux run` (the same, timing each entry point), alternating.
#
#   KIND=llm-decode ROUNDS=2 SYSTEMS="native gmux record profile" bash scripts/gpu-overhead.sh
#
# Needs .gpu-bin/ (scripts/gpu-pack.sh; carry it); BIN names another build's folder
# (e.g. BIN=.gpu-bin-base, to compare two builds in one call). Each run sets up, warms up WARMUP
# seconds (5) and counts units over DURATION (10). Prints each run's units/s, then the
# medians and their ratios to native last, after the first profile's 20 costliest entry
# points; logs go to $OUT/overhead/.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-./out}
mkdir -p "$OUT/overhead" && OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 1
BIN=${BIN:-.gpu-bin}
GMUX=$ROOT/$BIN/gmux
export GMUX_SHIM=$ROOT/$BIN/libgmux.so PYTHONUNBUFFERED=1
export GMUX_SOCKET=/tmp/gmux-overhead.sock
PROG=(python3 gpu/workload.py --kind "${KIND:-llm-decode}" --warmup "${WARMUP:-5}" --duration "${DURATION:-10}")
rate() { sed -n 's/^units_per_s=//p' "$1" | tail -1; }

"$GMUX" daemon --socket "$GMUX_SOCKET" >"$OUT/overhead/daemon.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null' EXIT
for _ in $(seq 50); do [[ -S $GMUX_SOCKET ]] && break; sleep 0.1; done
declare -A runs=([native]="" [gmux]="" [record]="" [profile]="")
for r in $(seq "${ROUNDS:-2}"); do
  for sys in ${SYSTEMS:-native gmux record}; do
    log=$OUT/overhead/$sys$r.log
    case $sys in
      native) "${PROG[@]}" >"$log" 2>&1 ;;
      gmux) "$GMUX" run --tenant "gmux$r" -- "${PROG[@]}" >"$log" 2>&1 ;;
      record) "$GMUX" record --force -o "$OUT/overhead/record$r.trace.jsonl" --tenant "record$r" -- "${PROG[@]}" >"$log" 2>&1 ;;
      profile) GMUX_DEBUG=profile "$GMUX" run --tenant "profile$r" -- "${PROG[@]}" >"$log" 2>&1 ;;
    esac
    runs[$sys]+="$(rate "$log") "
    echo "round $r: $sys $(rate "$log") units/s"
  done
done
rm -f "$OUT"/overhead/*.trace.jsonl
[[ -f $OUT/overhead/profile1.log ]] && grep '^profile:' "$OUT/overhead/profile1.log" | head -22
python3 - "${runs[native]}" "${runs[gmux]}" "${runs[record]}" "${runs[profile]}" <<'PY'
import statistics, sys
med = [statistics.median(float(x) for x in a.split()) if a.split() else float("nan") for a in sys.argv[1:]]
n = med[0]
print("units/s median: native %.1f; " % n + ", ".join(f"{name} {m:.1f} ({m / n:.3f} of native)" for name, m in zip(["gmux", "gmux record", "gmux profiled"], med[1:]) if m == m))
PY
