#!/usr/bin/env bash
# Narrows down a PyTorch mismatch under gmux: the same check run under each GMUX_DEBUG
# aid (and the other debugging settings), each compared with a native run.
#
#   scripts/gpu-diag.sh [resnet50|transformer] [limit-bytes] [variant...]
#
# Variants (default: all): logged default inflight1 sync-before sync-after sync-both
# run1 run4 all-events strict sequential (any other word is passed as GMUX_DEBUG=word).
# Run through the device tool with carry [".gpu-bin"]. Prints one line per variant
# (identical or not, largest relative difference) and, for the first gmux run, the
# entry points resolved around gmux and the kernels with no gmux memory in their
# parameters; full logs go to $OUT/diag.log.
set -uo pipefail
export GMUX_SHIM=$PWD/.gpu-bin/libgmux.so
M=${1:-resnet50}; L=${2:-722259148}; T=/tmp/gmux-diag; mkdir -p "$T"
OUT=${OUT:-./out}; mkdir -p "$OUT"; FULL=$OUT/diag.log; : >"$FULL"
check() { python3 gpu/torch_check.py --model "$M" --mode check --out "$1"; }
cmp_ref() { python3 gpu/compare.py "$T/ref.pt" "$1" | head -1; }

t0=$SECONDS
check "$T/ref.pt" >>"$FULL" 2>&1
echo "ref2: $(check "$T/ref2.pt" >>"$FULL" 2>&1; cmp_ref "$T/ref2.pt") ($((SECONDS - t0))s for two native runs)"

variant() {
  local tag=$1; shift
  local t=$SECONDS
  echo "=== $tag: $*" >>"$FULL"
  env "$@" timeout 150 .gpu-bin/gmux run --mem-limit "$L" -- python3 gpu/torch_check.py --model "$M" --mode check --out "$T/$tag.pt" >"$T/$tag.log" 2>&1
  local rc=$?
  cat "$T/$tag.log" >>"$FULL"
  local errs; errs=$(grep -c "^gmux: .*\(error\|fail\|not supported\)" "$T/$tag.log")
  echo "$tag: rc=$rc $( [[ -f $T/$tag.pt ]] && cmp_ref "$T/$tag.pt" || echo "no output: $(grep -m1 -i error "$T/$tag.log" | cut -c1-160)") gmux_errors=$errs ($((SECONDS - t))s)"
  rm -f "$T/$tag.pt"
}

logged() {
  variant logged GMUX_DEBUG=resolve GMUX_LOG=debug
  echo "-- unwrapped entry points resolved (GMUX_DEBUG=resolve):"
  grep -o "resolved unwrapped [A-Za-z0-9_]*" "$T/logged.log" | awk '{print $3}' | sort -u | tr '\n' ' '; echo
  echo "-- kernels with no gmux memory in their parameters:"
  grep "no gmux memory found" "$T/logged.log" | cut -c1-150 | sort | uniq -c | head -20
  echo "-- other messages:"
  grep "^gmux:" "$T/logged.log" | grep -v -e "resolved unwrapped" -e "no gmux memory" -e "plan of" -e "alloc " -e "pinned host" | cut -c1-250 | sort | uniq -c | head -20
}
shift $(($# < 2 ? $# : 2))
for v in "${@:-logged default inflight1 sync-before sync-after sync-both run1 run4 all-events strict sequential}"; do
  for w in $v; do
    case $w in
      logged) logged ;;
      default) variant default GMUX_LOG=info ;;
      inflight1) variant inflight1 GMUX_INFLIGHT=1 ;;
      strict) variant strict GMUX_UNMAP=strict ;;
      sequential) variant sequential GMUX_MOVER=sequential ;;
      sync-both) variant sync-both GMUX_DEBUG=sync-before,sync-after GMUX_LOG=info ;;
      *) variant "$w" GMUX_DEBUG="$w" GMUX_LOG=info ;;
    esac
    grep -h "waits for others' populations" "$T/$w.log" 2>/dev/null | sed "s/.*evicted/  evicted/"
  done
done
echo "diag done in ${SECONDS}s"
