#!/usr/bin/env bash
# Two quick checks of the shim on a host of two GPUs, through the device tool after
# scripts/gpu-pack.sh (carry .gpu-bin, and .gpu-bin-base with a baseline's libgmux.so):
#
#   bash scripts/gpu-diag-multi.sh            ~40 s
#
# - gpu/compat/progs/cupy_fft.py under `gmux run --standalone --mem-limit 2200M` (the grant
#   it had as a tenant), REPEAT times (3) with this build's shim and with the baseline's,
#   both GPUs visible, then twice with GPU 0 alone: each run's exit status, first error
#   line and bytes evicted.
# - gpu/compat/progs/jax_mlp_grad.py as a tenant of one daemon (GMUX_SOCKET) while both
#   GPUs are visible: JAX sets up both devices and asks each for its memory; the daemon
#   serves the first, and the program must run on (exit 0), the second device either
#   left to the driver (queries alone) or refused by name (an allocation there).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
G=$ROOT/.gpu-bin
cd "$ROOT/gpu/compat/progs" || exit 1
[[ -x $G/gmux ]] || { echo "gpu-diag-multi: no $G/gmux: run scripts/gpu-pack.sh and carry .gpu-bin"; exit 2; }
W=$(mktemp -d)

cupy() { # LABEL SHIM [VAR=VALUE...]
  local label=$1 lib=$2 rc; shift 2
  env GMUX_SHIM="$lib" GMUX_LOG=info "$@" timeout 120 "$G/gmux" run --standalone --mem-limit 2200M -- python3 cupy_fft.py >"$W/o" 2>"$W/e"
  rc=$?
  echo "cupy_fft $label rc=$rc $(grep -m1 -E 'rror' "$W/e") $(grep -m1 -o 'evicted [0-9]* ([^)]*)' "$W/e")"
}

for i in $(seq "${REPEAT:-3}"); do
  cupy "new $i" "$G/libgmux.so"
  [[ -f $ROOT/.gpu-bin-base/libgmux.so ]] && cupy "base $i" "$ROOT/.gpu-bin-base/libgmux.so"
done
for i in 1 2; do
  cupy "new gpu0-only $i" "$G/libgmux.so" CUDA_VISIBLE_DEVICES=0
done

"$G/gmux" daemon --socket "$W/j.sock" --hbm 8G >"$W/daemon.log" 2>&1 &
for _ in $(seq 100); do [[ -S $W/j.sock ]] && break; sleep 0.05; done
GMUX_SOCKET=$W/j.sock GMUX_LOG=info timeout 120 "$G/gmux" run --tenant jax -- python3 jax_mlp_grad.py >"$W/jo" 2>"$W/je"
rc=$?
echo "jax_mlp_grad under one daemon, 2 GPUs visible: rc=$rc $(grep -o 'status=.*' "$W/jo") device 1 served: $(grep -c 'device 1 of' "$W/je") refused: $(grep -c 'device 1: cannot register' "$W/je")"
GMUX_SOCKET=$W/j.sock "$G/gmux" stop >/dev/null 2>&1
rm -rf "$W"
