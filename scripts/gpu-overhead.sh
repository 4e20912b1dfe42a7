#!/usr/bin/env bash
# What gmux costs one real program alone, with no memory pressure, in one device call:
# gpu/workload.py (KIND, llm-decode by default) natively, under `gmux run` (a gmuxd
# with no budget) of this build and of a baseline build, under `gmux record` (writing
# its trace) and under `GMUX_DEBUG=profile gmux run` (timing each entry point), in
# alternating rounds; then gpu/launch_loop.py (torch.add, one small kernel at a time)
# the same way, for the cost of one launch.
#
#   ROUNDS=3 SYSTEMS="native gmux base profile" bash scripts/gpu-overhead.sh
#
# Systems: native; gmux (this build, .gpu-bin or BIN); base (BASE_BIN, .gpu-bin-base);
# record; profile. Needs the builds' folders (scripts/gpu-pack.sh; carry them). Each
# program run sets up, warms up WARMUP seconds (5) and counts units over DURATION (10);
# LAUNCH_ROUNDS (1) rounds of the launch loop follow, over the same systems less record
# and profile (0: none). Prints each run's units/s, then the medians and their ratios to
# native last, after the first profile's costliest entry points; logs go to $OUT/overhead.tgz.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 1
LOGS=/tmp/gmux-overhead
rm -rf "$LOGS" && mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
PROG=(python3 gpu/workload.py --kind "${KIND:-llm-decode}" --warmup "${WARMUP:-5}" --duration "${DURATION:-10}")
SYSTEMS=${SYSTEMS:-native gmux record}

# One gmuxd per build, each on its own socket.
declare -A bin=([gmux]=$ROOT/${BIN:-.gpu-bin} [base]=$ROOT/${BASE_BIN:-.gpu-bin-base})
daemons=()
for b in gmux base; do
  [[ " $SYSTEMS " == *" $b "* || ($b == gmux && " $SYSTEMS " =~ \ (record|profile)\ ) ]] || continue
  if [[ ! -x ${bin[$b]}/gmux ]]; then
    echo "gpu-overhead: no ${bin[$b]}/gmux: build it (scripts/gpu-pack.sh) and carry its folder" >&2
    exit 2
  fi
  "${bin[$b]}/gmux" daemon --socket "/tmp/gmux-overhead-$b.sock" >"$LOGS/daemon-$b.log" 2>&1 &
  daemons+=($!)
  for _ in $(seq 50); do [[ -S /tmp/gmux-overhead-$b.sock ]] && break; sleep 0.1; done
done
trap 'kill "${daemons[@]}" 2>/dev/null; tar czf "$OUT/overhead.tgz" -C "$LOGS" . 2>/dev/null' EXIT

# Runs argv under system $1 (its stdout and stderr to $2).
under() {
  local sys=$1 log=$2 b=gmux
  shift 2
  [[ $sys == base ]] && b=base
  local env=(env "GMUX_SHIM=${bin[$b]}/libgmux.so" "GMUX_SOCKET=/tmp/gmux-overhead-$b.sock")
  case $sys in
    native) "$@" ;;
    gmux | base) "${env[@]}" "${bin[$b]}/gmux" run --tenant "$sys" -- "$@" ;;
    record) "${env[@]}" "${bin[$b]}/gmux" record --force -o "$LOGS/record.trace.jsonl" --tenant record -- "$@" ;;
    profile) "${env[@]}" GMUX_DEBUG=profile "${bin[$b]}/gmux" run --tenant profile -- "$@" ;;
  esac >"$log" 2>&1
  rm -f "$LOGS/record.trace.jsonl"
}

declare -A rates launch_us
for r in $(seq "${ROUNDS:-2}"); do
  for sys in $SYSTEMS; do
    under "$sys" "$LOGS/$sys$r.log" "${PROG[@]}"
    rate=$(sed -n 's/^units_per_s=//p' "$LOGS/$sys$r.log" | tail -1)
    rates[$sys]+="${rate:-nan} "
    echo "round $r: $sys ${rate:-failed} units/s"
  done
done
for r in $(seq "${LAUNCH_ROUNDS:-1}"); do
  for sys in $SYSTEMS; do
    [[ $sys == record || $sys == profile ]] && continue
    under "$sys" "$LOGS/launch-$sys$r.log" python3 gpu/launch_loop.py
    us=$(sed -n 's/.*launch_us=\([0-9.]*\).*/\1/p' "$LOGS/launch-$sys$r.log" | tail -1)
    launch_us[$sys]+="${us:-nan} "
    echo "launch loop round $r: $sys ${us:-failed} us per launch"
  done
done
[[ -f $LOGS/profile1.log ]] && grep '^profile:' "$LOGS/profile1.log" | head -24
args=()
for sys in $SYSTEMS; do args+=("$sys" "${rates[$sys]}" "${launch_us[$sys]:-}"); done
python3 - "${args[@]}" <<'PY'
import math, statistics, sys
a = sys.argv[1:]
rows = [(a[i], a[i + 1].split(), a[i + 2].split()) for i in range(0, len(a), 3)]
def med(xs):
    xs = [float(x) for x in xs if x != "nan"]
    return statistics.median(xs) if xs else math.nan
native = {"units": med(rows[0][1]), "us": med(rows[0][2])} if rows[0][0] == "native" else None
for name, units, us in rows:
    u, l = med(units), med(us)
    line = f"{name:8} units/s median {u:7.1f} (of {len(units)})"
    if native and name != "native":
        line += f"  {u / native['units']:.3f} of native"
    if us:
        line += f"; launch {l:.2f} us median"
        if native and name != "native":
            line += f" (+{l - native['us']:.2f} us over native)"
    print(line)
PY
