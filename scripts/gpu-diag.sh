#!/usr/bin/env bash
# Diagnoses a PyTorch mismatch under gmux: repeats, warnings, strict unmapping.
set -uo pipefail
export GMUX_SHIM=$PWD/.gpu-bin/libgmux.so
M=${1:-resnet50}; L=${2:-722259148}; T=/tmp/gmux-diag; mkdir -p "$T"
run() { local tag=$1; shift; env "$@" GMUX_LOG=info timeout 120 .gpu-bin/gmux run --mem-limit "$L" -- python3 gpu/torch_check.py --model "$M" --mode check --out "$T/$tag.pt" 2>&1 | grep -E "gmux:|Error|error" | grep -v "virtualizing" | cut -c1-200 | sort | uniq -c; echo "$tag: $(python3 gpu/compare.py "$T/ref.pt" "$T/$tag.pt" | head -1)"; }
python3 gpu/torch_check.py --model "$M" --mode check --out "$T/ref.pt" >/dev/null 2>&1
run default1 X=1
run default2 X=1
run strict GMUX_UNMAP=strict
