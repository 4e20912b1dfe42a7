#!/usr/bin/env bash
# A CUDA-graph decode loop natively and under gmux at 100% of its footprint, in one
# device call: gpu/compat/progs/gpt2_static_cudagraph.py (GPT-2 shape, 12 layers, one
# decode step captured as a graph and replayed for every position), its time per step.
#
#   bash scripts/gpu-decode.sh          (ROUNDS=3 of each, alternating; NEW_TOKENS=480)
#
# Needs .gpu-bin/ (scripts/gpu-pack.sh; carry it). First one gmux run at 70G measures the
# footprint (the summary's `peak allocated`); then native and `gmux run --standalone
# --mem-limit FOOTPRINT` alternate. Prints each run's ms per step, the medians and their
# ratio last; logs go to $OUT/decode/.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-./out}
mkdir -p "$OUT/decode" && OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 1
GMUX=$ROOT/.gpu-bin/gmux
export GMUX_SHIM=$ROOT/.gpu-bin/libgmux.so CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1
PROG=(python3 gpu/compat/progs/gpt2_static_cudagraph.py --new-tokens "${NEW_TOKENS:-480}")
step_ms() { sed -n 's/^decode_ms_per_step=//p' "$1"; }

GMUX_LOG=info "$GMUX" run --standalone --mem-limit 70G -- "${PROG[@]}" >"$OUT/decode/fp.out" 2>"$OUT/decode/fp.err"
fp=$(sed -n 's/.*peak allocated \([0-9.]*\) \([KMG]\)iB.*/\1\2/p' "$OUT/decode/fp.err" | tail -1)
[[ -z $fp ]] && { echo "gpu-decode: no footprint in the summary:"; tail -3 "$OUT/decode/fp.err"; exit 1; }
limit=$(python3 -c "import math,sys; v,u=float(sys.argv[1][:-1]),sys.argv[1][-1]; print(str(math.ceil(v*{'K':1,'M':1024,'G':1048576}[u]/1024*1.0))+'M')" "$fp")
echo "footprint $fp, limit $limit"
native=() gmux=()
for r in $(seq "${ROUNDS:-3}"); do
  "${PROG[@]}" >"$OUT/decode/native$r.out" 2>&1
  native+=("$(step_ms "$OUT/decode/native$r.out")")
  GMUX_LOG=info "$GMUX" run --standalone --mem-limit "$limit" -- "${PROG[@]}" >"$OUT/decode/gmux$r.out" 2>"$OUT/decode/gmux$r.err"
  gmux+=("$(step_ms "$OUT/decode/gmux$r.out")")
  echo "round $r: native ${native[-1]} ms/step, gmux ${gmux[-1]} ms/step"
done
python3 - "${native[*]}" "${gmux[*]}" <<'PY'
import statistics, sys
n = [float(x) for x in sys.argv[1].split()]
g = [float(x) for x in sys.argv[2].split()]
mn, mg = statistics.median(n), statistics.median(g)
print(f"decode ms/step median: native {mn:.4f}, gmux {mg:.4f}, gmux/native {mg / mn:.4f}")
PY
tail -1 "$OUT/decode/gmux1.err"
