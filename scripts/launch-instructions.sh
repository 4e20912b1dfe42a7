#!/usr/bin/env bash
# Instructions gmux adds to a kernel launch, counted on the CPU stand-in of the driver
# with valgrind's callgrind: deterministic, so that a change to the launch path can be
# judged on a machine without a GPU (the GPU figure is `gmux bench launch`).
#
#   bash scripts/launch-instructions.sh                 (this build's shim)
#   SHIM=path/to/libgmux.so bash scripts/launch-instructions.sh   (another build's)
#
# Runs `gmux bench launch-loop` (the child of `gmux bench launch`: 2 kernels, launches
# through gmux and through the driver's own entry point) under `gmux run --standalone`
# and prints the instructions of gmux's launch handling (`api::command::kernel`: the
# working set, the residency check, the bookkeeping) less those of the driver call it
# makes, per launch through gmux. Needs valgrind (callgrind_annotate).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v valgrind >/dev/null || { echo "launch-instructions: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
cargo build --release -q -p gmux -p gmux-shim -p cuda-standin
N=${LAUNCHES:-20000}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ln -s "$PWD/target/release/libcuda_standin.so" "$WORK/libcuda.so.1"
export LD_LIBRARY_PATH=$WORK GMUX_STANDIN_MEM=$((8 << 30)) GMUX_CUDA_LIB=$WORK/libcuda.so.1
export GMUX_SHIM=${SHIM:-$PWD/target/release/libgmux.so}
if ! valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$WORK/cg.%p" \
  target/release/gmux run --standalone --mem-limit 2G -- target/release/gmux bench launch-loop --launches "$N" >"$WORK/run.log" 2>&1; then
  echo "launch-instructions: the launch loop failed under valgrind:" >&2
  tail -n 5 "$WORK/run.log" >&2
  exit 1
fi
callgrind_annotate --tree=calling --inclusive=yes "$WORK"/cg.* 2>/dev/null | python3 -c '
import re, sys
lines = sys.stdin.read().split("\n")
def node(name):
    for i, l in enumerate(lines):
        if "*  " in l and ":" + name + " [" in l:
            kids, j = {}, i + 1
            while j < len(lines) and ">" in lines[j]:
                m = re.search(r">\s+\S*?:(.*?) \((\d[\d,]*)x\)", lines[j])
                if m:
                    kids[m.group(1)] = (int(lines[j].split("(")[0].replace(",", "")), int(m.group(2).replace(",", "")))
                j += 1
            return int(l.split("(")[0].replace(",", "")), kids
    sys.exit("launch-instructions: no " + name + " in the profile (is GMUX_SHIM a gmux build?)")
total, _ = node("gmux::api::command::kernel")
_, kids = node("gmux::api::command::run_now")
if "cuLaunchKernel" not in kids:
    sys.exit("launch-instructions: run_now called no cuLaunchKernel in the profile")
real, calls = kids["cuLaunchKernel"]
print(f"gmux instructions per launch: {(total - real) / calls:.0f} (over {calls} launches through gmux, 2 kernels)")
'
