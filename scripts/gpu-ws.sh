#!/usr/bin/env bash
# Predicted working sets against tensor bytes on the compatibility corpus's PyTorch
# programs, under PyTorch's caching allocator and under backend:cudaMallocAsync.
#
#   scripts/gpu-ws.sh [PROGRAM...]     default: the eight programs below
#
# Each program runs once per allocator under `gmux run --standalone --mem-limit 70G` with
# GMUX_DEBUG=working-sets, through gpu/ws_trace.py (which writes every aten operation's
# tensors); gpu/ws_compare.py joins the two and prints one table per allocator.
# Programs inside CUDA graphs or torch.compile are not traced, so none of those is here.
#
# Needs .gpu-bin/ (scripts/gpu-pack.sh on the dev machine; carry [".gpu-bin"]).
# Output: the two tables last; $OUT/ws/<allocator>.json and <allocator>.txt, and the
# logs as $OUT/ws/logs.tar.gz. JOBS (4) programs run at once. About 3 minutes on an H200.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-./out}
mkdir -p "$OUT/ws" && OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
JOBS=${JOBS:-4}
GMUX=$ROOT/.gpu-bin/gmux
export GMUX_SHIM=$ROOT/.gpu-bin/libgmux.so PYTHONUNBUFFERED=1
[[ -x $GMUX && -f $GMUX_SHIM ]] || { echo "gpu-ws: no .gpu-bin: run scripts/gpu-pack.sh and carry .gpu-bin"; exit 1; }

PROGRAMS=("$@")
((${#PROGRAMS[@]})) || PROGRAMS=(resnet18_fp32 resnet50_fp16_amp vit_b16_bf16 efficientnet_b0_fp32 sdpa_attention torch_alloc_churn gpt2_train gpt2_generate)

# The command line of a corpus program, from gpu/compat/programs.py.
cmd_of() {
  python3 -c "
import sys; sys.path.insert(0, 'gpu/compat')
from programs import PROGRAMS
p = next(p for p in PROGRAMS if p['name'] == sys.argv[1])
assert p['kind'] == 'py'
print(' '.join(p['cmd']))" "$1"
}

run_one() {
  local name=$1 alloc=$2 conf
  conf=$([[ $alloc == caching ]] && echo backend:native || echo backend:cudaMallocAsync)
  local cmd
  cmd=$(cmd_of "$name") || { echo "gpu-ws: $name is not a Python program of the corpus"; return; }
  local start=$SECONDS
  # shellcheck disable=SC2086
  (cd gpu/compat/progs && PYTORCH_CUDA_ALLOC_CONF=$conf GMUX_DEBUG=working-sets GMUX_LOG=info \
    timeout 300 "$GMUX" run --standalone --mem-limit 70G -- python3 "$ROOT/gpu/ws_trace.py" $cmd \
    >"$WORK/$name-$alloc.out" 2>"$WORK/$name-$alloc.log")
  echo "  $name ($alloc): exit $?, $((SECONDS - start)) s, $(grep -c '^gmux-ws' "$WORK/$name-$alloc.log") kernel launches"
}

echo "=== gpu-ws ($(date -u +%H:%M:%S)) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
for alloc in caching async; do
  for name in "${PROGRAMS[@]}"; do
    while (($(jobs -rp | wc -l) >= JOBS)); do wait -n; done
    run_one "$name" "$alloc" &
  done
done
wait

tar -C "$WORK" -czf "$OUT/ws/logs.tar.gz" . 2>/dev/null
for alloc in caching async; do
  python3 gpu/ws_compare.py --label "$alloc allocator" --json "$OUT/ws/$alloc.json" "$WORK"/*-"$alloc".log >"$OUT/ws/$alloc.txt" 2>&1
done
echo "=== summary"
cat "$OUT/ws/caching.txt" "$OUT/ws/async.txt"
