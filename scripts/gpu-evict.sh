#!/usr/bin/env bash
# Eviction and prefetch settings side by side on unmodified PyTorch (ResNet-50
# inference, a small transformer's training loop) under a limit of 60% of its
# footprint: runs alternate between the settings; median time and bytes evicted per
# model and setting. Run on the GPU machine after scripts/gpu-pack.sh (carry .gpu-bin):
#
#   scripts/gpu-evict.sh [ROUNDS] [SETTING...]
#
# A SETTING is a space-separated list of VAR=VALUE for the shim. Default: 3 rounds of
# "GMUX_EVICT=opt" (the default: OPT from the process's history) and "GMUX_EVICT=lru";
# about 5 minutes on an H100. MODELS (default "resnet50 transformer") picks the models.
# Every run's result is compared with a native run's (`same` counts the identical ones).
# Prints a table last; every run's output goes to $OUT/evict.log.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-./out}
mkdir -p "$OUT"
LOG=$OUT/evict.log
: >"$LOG"
ROUNDS=${1:-3}
shift $(($# > 0 ? 1 : 0))
SETTINGS=("$@")
((${#SETTINGS[@]})) || SETTINGS=("GMUX_EVICT=opt" "GMUX_EVICT=lru")
export PYTHONUNBUFFERED=1
GMUX=$ROOT/.gpu-bin/gmux

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

rows=()
for m in ${MODELS:-resnet50 transformer}; do
  py=(python3 gpu/torch_check.py --model "$m" --mode check)
  fp=$("${py[@]}" --out "/tmp/evict_$m.pt" | tee -a "$LOG" | grep -o 'footprint_bytes=[0-9]*' | cut -d= -f2)
  limit=$((fp * 6 / 10))
  declare -A times=() evicted=() waited=() same=()
  for ((r = 1; r <= ROUNDS; r++)); do
    for k in "${!SETTINGS[@]}"; do
      # shellcheck disable=SC2086 # a setting is a list of VAR=VALUE words
      rm -f "/tmp/evict_${m}_run.pt"
      out=$(env GMUX_LOG=info ${SETTINGS[k]} timeout 240 "$GMUX" run --mem-limit "$limit" -- "${py[@]}" --out "/tmp/evict_${m}_run.pt" 2>&1)
      s=0
      [[ -f /tmp/evict_${m}_run.pt ]] && python3 gpu/compare.py "/tmp/evict_$m.pt" "/tmp/evict_${m}_run.pt" | grep -q 'identical=1' && s=1
      printf '== %s [%s] round %d\n%s\n' "$m" "${SETTINGS[k]}" "$r" "$out" >>"$LOG"
      t=$(grep -o 'time_s=[0-9.]*' <<<"$out" | cut -d= -f2)
      e=$(grep -o 'evicted [0-9]*' <<<"$out" | tail -n 1 | cut -d' ' -f2)
      w=$(grep -o '([0-9]* waited for memory' <<<"$out" | tail -n 1 | tr -dc 0-9)
      times[$k]+="${t:-nan} " evicted[$k]+="${e:-0} " waited[$k]+="${w:-0} " same[$k]=$((${same[$k]:-0} + s))
      echo "$m [${SETTINGS[k]}] round $r: time_s=${t:-?} evicted=${e:-?} chunks, ${w:-?} commands waited, identical=$s"
    done
  done
  for k in "${!SETTINGS[@]}"; do
    # shellcheck disable=SC2086
    rows+=("$(printf '%-12s %-34s %10s %12.2f %10s %6s' "$m" "${SETTINGS[k]}" "$(median ${times[$k]})" \
      "$(awk -v c="$(median ${evicted[$k]})" 'BEGIN { print c * 2 / 1024 }')" "$(median ${waited[$k]})" "${same[$k]:-0}/$ROUNDS")")
  done
  unset times evicted waited same
done
echo
echo "limit 60% of footprint, median of $ROUNDS alternating runs ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1))"
printf '%-12s %-34s %10s %12s %10s %6s\n' model setting time_s evicted_gib waited same
printf '%s\n' "${rows[@]}"
