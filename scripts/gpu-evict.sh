#!/usr/bin/env bash
# OPT from the process's history (GMUX_EVICT=opt, the default) against LRU
# (GMUX_EVICT=lru) on unmodified PyTorch under a limit of 60% of its footprint:
# alternating runs, median time and bytes evicted per model. Run on the GPU machine
# after scripts/gpu-pack.sh (carry .gpu-bin):
#
#   scripts/gpu-evict.sh [ROUNDS]      (default 3 pairs per model; ~4 minutes on an H100)
#
# Prints a table last; each run's output goes to $OUT/evict.log.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-./out}
mkdir -p "$OUT"
LOG=$OUT/evict.log
: >"$LOG"
ROUNDS=${1:-3}
export PYTHONUNBUFFERED=1
GMUX=$ROOT/.gpu-bin/gmux

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

rows=()
for m in resnet50 transformer; do
  py=(python3 gpu/torch_check.py --model "$m" --mode check --out /tmp/evict_$m.pt)
  fp=$("${py[@]}" | tee -a "$LOG" | grep -o 'footprint_bytes=[0-9]*' | cut -d= -f2)
  limit=$((fp * 6 / 10))
  declare -A times=() evicted=()
  for ((r = 1; r <= ROUNDS; r++)); do
    for e in opt lru; do
      out=$(GMUX_LOG=info GMUX_EVICT=$e timeout 240 "$GMUX" run --mem-limit "$limit" -- "${py[@]}" 2>&1)
      echo "== $m $e round $r" >>"$LOG"
      echo "$out" >>"$LOG"
      times[$e]+="$(grep -o 'time_s=[0-9.]*' <<<"$out" | cut -d= -f2) "
      evicted[$e]+="$(grep -o 'evicted [0-9]*' <<<"$out" | tail -n 1 | cut -d' ' -f2) "
      echo "$m $e round $r: $(grep -o 'time_s=[0-9.]*' <<<"$out") $(grep -o 'evicted [0-9]* ([^)]*)' <<<"$out" | tail -n 1)"
    done
  done
  # shellcheck disable=SC2086
  to=$(median ${times[opt]}) tl=$(median ${times[lru]}) eo=$(median ${evicted[opt]}) el=$(median ${evicted[lru]})
  rows+=("$(printf '%-12s %10s %10s %8.3f %12.2f %12.2f %8.3f' "$m" "$to" "$tl" "$(awk -v a="$to" -v b="$tl" 'BEGIN{print a/b}')" \
    "$(awk -v c="$eo" 'BEGIN{print c*2/1024}')" "$(awk -v c="$el" 'BEGIN{print c*2/1024}')" "$(awk -v a="$eo" -v b="$el" 'BEGIN{print a/b}')")")
  unset times evicted
done
echo
echo "OPT from history vs LRU, limit 60% of footprint, median of $ROUNDS alternating runs ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1))"
printf '%-12s %10s %10s %8s %12s %12s %8s\n' model opt_time_s lru_time_s ratio opt_evict_gib lru_evict_gib ratio
printf '%s\n' "${rows[@]}"
