#!/usr/bin/env bash
# `gmux bench workloads` on a GPU, through the device tool after scripts/gpu-pack.sh
# (carry .gpu-bin):
#
#   MIXES=multi-llm LEVELS=200 bash scripts/gpu-workloads.sh
#
# MIXES, LEVELS, SYSTEMS, SLICE (200ms), DURATION (10 s), WARMUP (15 s), SETTLE (10 s:
# the tenants run together, set up, this long before the window) and PAIRS (1: native and
# gmux runs at 100%, alternating; 3 pairs of multi-llm take about 5 minutes) pass through;
# BIN (.gpu-bin) names the build; REPLAY=0 skips the simulator's replay of the traces (it
# takes about a minute a level). Only `traced` records traces (recording slows a
# launch-bound program); leave it out of SYSTEMS when no replay is wanted.
# Each run takes 60-100 s (setup, 10 s settling, the window): keep one call to 5 runs (one
# native and one in-hbm run per mix, then gmux, whole and traced per level). The table is printed
# last; the JSON, the plot, every log and the traces go to $OUT/workloads-logs.tgz.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RESULTS=${OUT:-./out}
mkdir -p "$RESULTS" && RESULTS=$(cd "$RESULTS" && pwd)
cd "$ROOT" || exit 1
BIN=${BIN:-.gpu-bin}
export GMUX_SHIM=$ROOT/$BIN/libgmux.so
WORK=/tmp/gmux-workloads
rm -rf "$WORK" && mkdir -p "$WORK"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
NO_REPLAY=()
if [[ ${REPLAY:-1} == 0 ]]; then NO_REPLAY=(--no-replay); fi
timeout "${LIMIT:-570}" "$BIN/gmux" bench workloads --mixes "${MIXES:-multi-llm}" --levels "${LEVELS:-200}" \
  --systems "${SYSTEMS:-native,in-hbm,gmux,whole,traced}" --timeslice "${SLICE:-200ms}" --duration "${DURATION:-10}" \
  --warmup "${WARMUP:-15}" --settle "${SETTLE:-10}" --pairs "${PAIRS:-1}" "${NO_REPLAY[@]}" --out "$WORK" >"$WORK/table.txt" 2>"$WORK/progress.txt"
echo "exit $?"
cp "$WORK/workloads.json" "$WORK/workloads.svg" "$RESULTS/" 2>/dev/null
tar czf "$RESULTS/workloads-logs.tgz" -C "$WORK" . 2>/dev/null
grep -v "^$" "$WORK/progress.txt" | tail -n 6
cat "$WORK/table.txt"
