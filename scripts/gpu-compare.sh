#!/usr/bin/env bash
# msched-micro under two builds of gmux in one device call, so that a change is judged
# against a baseline on the same machine:
#
#   bash scripts/gpu-compare.sh [LEVELS]        (default: 100,200,300)
#   LAUNCH=0 bash scripts/gpu-compare.sh 300    (skips the per-launch cost)
#   BASE=0 LAUNCH=0 bash scripts/gpu-compare.sh 100,150,200,300   (this build alone)
#   LAUNCH_ROUNDS=4 bash scripts/gpu-compare.sh none              (per-launch cost alone)
#   BUILDS="base v1 new" LAUNCH=0 bash scripts/gpu-compare.sh 200   (more builds: .gpu-bin-v1/)
#
# Needs the baseline's binaries in .gpu-bin-base/ (gmux and libgmux.so of the build to
# compare with) and this build's in .gpu-bin/ (scripts/gpu-pack.sh); carry both. Runs
# `gmux bench msched-micro --systems gmux` under the baseline, then `--systems
# in-hbm,gmux` under this build, each level with a 25 s warm-up and a 10 s window
# (about 50 s a run: two levels fit one 10-minute device call). Throughput of both builds is
# normalized to this run's in-hbm figures. A build NAME other than base and new runs from
# .gpu-bin-NAME/, as the baseline does. JSON goes to $OUT, the tables and logs to
# $OUT/compare-logs.tgz; the summary is printed last and written to
# $OUT/compare-summary.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 1
LEVELS=${1:-100,200,300}
WORK=/tmp/gmux-compare
rm -rf "$WORK" && mkdir -p "$WORK"

# Per-launch cost first (a minute): native, then each build, alternating, twice.
: >"$OUT/compare-launch.txt"
[[ ${LAUNCH:-1} == 0 ]] || for round in $(seq "${LAUNCH_ROUNDS:-2}"); do
  for who in native base new; do
    case $who in
      native) cmd=(python3 gpu/launch_loop.py) ;;
      base) cmd=(.gpu-bin-base/gmux run --mem-limit 8G -- python3 gpu/launch_loop.py) ;;
      new) cmd=(.gpu-bin/gmux run --mem-limit 8G -- python3 gpu/launch_loop.py) ;;
    esac
    line=$(timeout 120 "${cmd[@]}" 2>>"$WORK/launch.stderr" | grep launch_us=)
    echo "$who round $round: $line" | tee -a "$OUT/compare-launch.txt"
  done
done

builds=${BUILDS:-base new}
[[ ${BASE:-1} == 0 ]] && builds=new
[[ $LEVELS == none ]] && builds=""
for build in $builds; do
  bin=.gpu-bin-$build
  systems=gmux
  if [[ $build == new ]]; then bin=.gpu-bin systems=in-hbm,gmux; fi
  if [[ ! -x $bin/gmux ]]; then
    echo "gpu-compare: no $bin/gmux; build it (scripts/gpu-pack.sh for this build) and carry $bin" >&2
    exit 2
  fi
  echo "== $build ($bin): msched-micro --levels $LEVELS --systems $systems"
  timeout 540 "$bin/gmux" bench msched-micro --levels "$LEVELS" --systems "$systems" --duration 10 --warmup 25 \
    --out "$WORK/$build" >"$WORK/compare-$build.txt" 2>"$WORK/$build.stderr"
  echo "   exit $?"
  tail -n 12 "$WORK/compare-$build.txt"
  cp "$WORK/$build/msched-micro.json" "$OUT/compare-$build.json" 2>/dev/null
done

# The traces this build's gmux runs recorded, with the daemon's log of its slots, for
# replay in the simulator
# (gmux sim on a scenario naming them; see crates/gmux/src/bench/micro.rs).
for t in "$WORK"/new/L*.vecadd-0.trace.jsonl; do
  [[ -f $t ]] || continue
  level=$(basename "$t" .vecadd-0.trace.jsonl)
  tar czf "$OUT/traces-$level.tgz" -C "$WORK/new" $(cd "$WORK/new" && ls "$level".*.trace.jsonl "$level"-gmux.daemon.log 2>/dev/null)
done

tar czf "$OUT/compare-logs.tgz" -C "$WORK" $(cd "$WORK" && ls compare-*.txt ./*.stderr 2>/dev/null)

python3 - "$OUT" $builds <<'EOF' | tee "$OUT/compare-summary.txt"
import json, sys
out = sys.argv[1]
def rows(build):
    try:
        return json.load(open(f"{out}/compare-{build}.json"))["rows"]
    except (OSError, ValueError, KeyError):
        return []
extra = [b for b in sys.argv[2:] if b not in ("base", "new")]
base, new = rows("base"), rows("new")
hbm = {r["level"]: r["units_per_s"] for r in new if r["system"] == "in-hbm"}
def norm(r):
    b = hbm.get(r["level"])
    if not b:
        return None
    ratios = [r["units_per_s"].get(k, 0.0) / v for k, v in b.items() if v > 0]
    return sum(ratios) / len(ratios) if ratios else None
import re
launch = {}
for line in open(f"{out}/compare-launch.txt"):
    m = re.match(r"(\w+) round \d+: launch_us=([\d.]+)", line)
    if m:
        launch.setdefault(m.group(1), []).append(float(m.group(2)))
best = {k: min(v) for k, v in launch.items()}
print(f"per launch (torch.add of 1 MiB, best of {max(map(len, launch.values()), default=0)} runs, each the median of 7 rounds of 20000):",
      ", ".join(f"{k} {v:.2f} us" for k, v in best.items()))
if "base" in best and "new" in best:
    print(f"new / base per-launch time: {best['new'] / best['base']:.3f}")
print("msched-micro, gmux --switch msched: throughput over this run's in-hbm (mean over tenants)")
print(f"{'level':<6} {'base':>8} {'new':>8} {'new/base':>9}  {'GiB/kernel base':>15} {'new':>6}  failed")
for level in sorted({r["level"] for r in base + new}):
    b = next((r for r in base if r["level"] == level and r["system"] == "gmux"), None)
    n = next((r for r in new if r["level"] == level and r["system"] == "gmux"), None)
    nb, nn = (norm(b) if b else None), (norm(n) if n else None)
    ratio = f"{nn / nb:.2f}x" if nb and nn else "-"
    gib = lambda r: f"{r['bytes_per_task'] / 2**30:.3f}" if r and r.get("bytes_per_task") else "-"
    fmt = lambda v: f"{v:.3f}" if v is not None else "-"
    failed = ", ".join((b or {}).get("failed", []) + (n or {}).get("failed", []))
    print(f"{level}%{'':<3} {fmt(nb):>8} {fmt(nn):>8} {ratio:>9}  {gib(b):>15} {gib(n):>6}  {failed}")
    for x in extra:
        r = next((r for r in rows(x) if r["level"] == level and r["system"] == "gmux"), None)
        nx = norm(r) if r else None
        print(f"  {x}: {fmt(nx)} of in-hbm, {gib(r)} GiB/kernel{'  failed: ' + ', '.join(r.get('failed', [])) if r and r.get('failed') else ''}")
EOF
