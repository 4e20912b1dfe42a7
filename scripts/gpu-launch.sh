#!/usr/bin/env bash
# What gmux adds to a kernel launch, this build's shim against a baseline's, in one
# device call:
#
#   bash scripts/gpu-launch.sh              (this build's shim, then the baseline's, twice)
#   BASE=0 bash scripts/gpu-launch.sh       (this build alone)
#   DISPATCH=srpt-deficit bash scripts/gpu-launch.sh
#                                           (gmux's child a tenant of a daemon with that
#                                           --dispatch, marking a job: the dispatcher's cost)
#
# Runs `gmux bench launch` (ROUNDS rounds, default 7, of native then `gmux run
# --standalone`, LAUNCHES launches each, the launching thread pinned to one CPU; added
# within gmux's child: through gmux against through the driver's own entry point, block by
# block) from .gpu-bin/, once with this build's
# libgmux.so and once with .gpu-bin-base/libgmux.so (GMUX_SHIM), in the order new, base,
# new, base. Carry .gpu-bin (scripts/gpu-pack.sh) and .gpu-bin-base. Tables go to
# $OUT/launch-*.txt and JSON to $OUT/launch-*.json; the summary is printed last.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 1
WORK=/tmp/gmux-launch
rm -rf "$WORK" && mkdir -p "$WORK"
runs="new1 base1 new2 base2"
[[ ${BASE:-1} == 0 ]] && runs="new1 new2"
for run in $runs; do
  shim=$ROOT/.gpu-bin/libgmux.so
  [[ $run == base* ]] && shim=$ROOT/.gpu-bin-base/libgmux.so
  if [[ ! -f $shim ]]; then
    echo "gpu-launch: no $shim; build it and carry its folder" >&2
    exit 2
  fi
  GMUX_SHIM=$shim timeout 240 .gpu-bin/gmux bench launch --launches "${LAUNCHES:-200000}" --rounds "${ROUNDS:-7}" \
    ${DISPATCH:+--dispatch "$DISPATCH"} --out "$WORK/$run" >"$OUT/launch-$run.txt" 2>"$WORK/$run.stderr"
  echo "$run: exit $?"
  cp "$WORK/$run/launch.json" "$OUT/launch-$run.json" 2>/dev/null
done
echo "== summary (µs per launch; added, within: gmux's child, through gmux minus through the driver's own entry point)"
for run in $runs; do
  echo "-- $run"
  head -n 5 "$OUT/launch-$run.txt"
done
