#!/usr/bin/env bash
# The compatibility corpus (gpu/compat/) on a lent GPU machine: one part per call.
#
#   scripts/gpu-compat.sh PART        PART: N/M (1/4, 2/4, 3/4, 4/4), tenants, list, selftest
#
#   N/M       gpu/compat/run.py --part N/M: each program of that part natively twice, under
#             gmux --standalone at 70G (its footprint), then at 100%, 50% and 25% of it
#   tenants   groups of 4 programs as tenants of one gmuxd with half their summed footprints
#   list      the programs, their parts and estimated times (runs nothing)
#   selftest  run.py's own tests with stand-ins (no GPU needed)
#
# Needs .gpu-bin/gmux and .gpu-bin/libgmux.so: scripts/gpu-pack.sh on the dev machine,
# then a device run with carry [".gpu-bin"] and the command `bash scripts/gpu-compat.sh 1/4`
# (a gmux built in target/release is used when there is no .gpu-bin). The part's C++
# programs are built with nvcc into $WORK/build, once: a warm machine keeps them.
#
# Output: progress, then the summary last. Files: $OUT/compat/<tag>.json (every program
# and run), <tag>.txt (the summary), <tag>-logs.tar.gz (every run's stdout and stderr),
# where tag is part1of4 ... or tenants: 3 files, within what the device tool brings back.
#
# Settings (environment): OUT (./out), WORK (/tmp/gmux-compat), JOBS (programs at once,
# 3), LEVELS (100,50,25), RUN_TIMEOUT (seconds per run, 180), COMPAT_BUDGET_S (seconds for
# the whole call, 570: runs that no longer fit are reported skipped), COMPAT_ARGS (more
# run.py arguments, e.g. "--only cpp_vmm,gpt2_train" to run just those).
#
# Estimated time on one H100 with JOBS=3: setup and builds ~40 s, each of the four parts
# ~5-7 minutes, tenants ~5 minutes (`list` prints the estimate of each part).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
PART=${1:-}
OUT=${OUT:-./out}
mkdir -p "$OUT/compat" && OUT=$(cd "$OUT" && pwd)
WORK=${WORK:-/tmp/gmux-compat}
BUILD=$WORK/build
mkdir -p "$BUILD"
JOBS=${JOBS:-3}
LEVELS=${LEVELS:-100,50,25}
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
BUDGET=${COMPAT_BUDGET_S:-570}
COMPAT_ARGS=${COMPAT_ARGS:-}
RUNPY=(python3 gpu/compat/run.py)
export PYTHONUNBUFFERED=1
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH

usage() {
  echo "usage: $0 N/M | tenants | list | selftest" >&2
  exit 2
}

case $PART in
  selftest) exec "${RUNPY[@]}" --self-test ;;
  list) exec "${RUNPY[@]}" --list --part "${LIST_PART:-1/4}" --jobs "$JOBS" --levels "$LEVELS" ;;
  tenants) SELECT=(--tenants) ;;
  [0-9]*/[0-9]*) SELECT=(--part "$PART") ;;
  *) usage ;;
esac

# ---------------------------------------------------------------- gmux

if [[ -f $ROOT/.gpu-bin/gmux && -f $ROOT/.gpu-bin/libgmux.so ]]; then
  chmod +x "$ROOT/.gpu-bin/gmux"
  GMUX=$ROOT/.gpu-bin/gmux
  export GMUX_SHIM=$ROOT/.gpu-bin/libgmux.so
elif [[ -x $ROOT/target/release/gmux ]]; then
  GMUX=$ROOT/target/release/gmux
else
  echo "gpu-compat: no .gpu-bin/gmux + .gpu-bin/libgmux.so and no target/release/gmux:"
  echo "  run scripts/gpu-pack.sh on the dev machine and carry .gpu-bin"
  exit 1
fi

# ---------------------------------------------------------------- what is here

echo "=== gpu-compat $PART ($(date -u +%H:%M:%S))"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n 2
nvcc --version 2>&1 | grep -i release
python3 - <<'EOF'
import importlib.metadata as md
import sys
names = ["torch", "torchvision", "transformers", "triton", "jax", "jaxlib", "cupy-cuda13x", "cupy-cuda12x", "numpy"]
have = []
for n in names:
    try:
        have.append(f"{n}={md.version(n)}")
    except md.PackageNotFoundError:
        pass
print(f"python={sys.version.split()[0]} " + " ".join(have))
EOF
echo "gmux=$GMUX"

# ---------------------------------------------------------------- C++ programs

# build NAME: nvcc gpu/compat/cpp/NAME.cu into $BUILD/NAME with the libraries named on its
# `// build:` line; skipped when the binary is newer than the source and common.h.
build() {
  local name=$1 src=gpu/compat/cpp/$1.cu bin=$BUILD/$1 flags
  if [[ -x $bin && $bin -nt $src && $bin -nt gpu/compat/cpp/common.h ]]; then
    echo "$name: up to date" >"$BUILD/$name.log"
    return 0
  fi
  flags=$(sed -n 's|^// build:||p' "$src" | head -n 1)
  # shellcheck disable=SC2086 # flags is a list of words
  if nvcc -O2 -std=c++17 -arch=sm_90 -Igpu/compat/cpp -o "$bin.tmp" "$src" $flags >"$BUILD/$name.log" 2>&1; then
    mv "$bin.tmp" "$bin"
  else
    rm -f "$bin.tmp" "$bin"
    return 1
  fi
}

# shellcheck disable=SC2086 # COMPAT_ARGS is a list of words
read -r -a CPP <<<"$("${RUNPY[@]}" --print-cpp "${SELECT[@]}" --levels "$LEVELS" $COMPAT_ARGS)"
if ((${#CPP[@]})); then
  t0=$SECONDS
  pids=()
  for n in "${CPP[@]}"; do
    build "$n" &
    pids+=($!)
  done
  failed=()
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed+=("${CPP[$i]}")
  done
  echo "built ${#CPP[@]} C++ programs in $((SECONDS - t0)) s${failed:+; FAILED: ${failed[*]}}"
  for n in "${failed[@]}"; do
    echo "--- $n build log (tail)"
    tail -n 15 "$BUILD/$n.log"
  done
fi

# ---------------------------------------------------------------- the corpus

left=$((BUDGET - SECONDS))
if ((left < 60)); then
  echo "gpu-compat: only ${left}s left of the ${BUDGET}s budget after setup"
  exit 1
fi
# run.py stops starting runs at its budget and kills what still runs at the end of it;
# the outer timeout is a last resort that leaves 20 s for writing the summary.
# shellcheck disable=SC2086 # COMPAT_ARGS is a list of words
timeout -k 5 $((left - 5)) "${RUNPY[@]}" "${SELECT[@]}" --gmux "$GMUX" --build "$BUILD" --work "$WORK" \
  --out "$OUT/compat" --jobs "$JOBS" --levels "$LEVELS" --timeout "$RUN_TIMEOUT" --budget $((left - 25)) $COMPAT_ARGS
rc=$?
if ((rc == 124 || rc == 137)); then
  echo "gpu-compat: run.py was stopped by the outer timeout; partial logs in $WORK/logs"
fi
exit $rc
