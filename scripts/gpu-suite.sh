#!/usr/bin/env bash
# gmux checks on a lent GPU machine (H100/H200, CUDA 13, PyTorch).
#
#   scripts/gpu-suite.sh [all|probe|a|b|c|d]        (default: all)
#
#   probe  hello without and with gmux; a small integrity run under a 1G limit
#   a      data integrity: 12 GiB of buffers, 5000 random ops, under a 4G limit
#   b      unmodified PyTorch (resnet50 inference, transformer training) under a limit of
#          60% of its own footprint, compared with two native runs; then the same under
#          LRU eviction (GMUX_EVICT=lru) beside the default OPT from history
#   c      resnet50 inference throughput, native vs gmux with no memory pressure
#   d      mover bandwidth: the link's ceiling (native pinned copies), then switching 8 GiB
#          in and 8 GiB out under gmux, pipelined vs sequential
#
# Needs .gpu-bin/gmux and .gpu-bin/libgmux.so: scripts/gpu-pack.sh on the dev machine,
# then a device run with carry [".gpu-bin"] and the command
# `bash scripts/gpu-suite.sh all`. Each step's output goes to stdout and
# $OUT/<step>.log (OUT defaults to ./out); the summary to stdout, $OUT/summary.txt and
# $OUT/summary.json. That is 8 files at most, what the device tool brings back; other
# scratch files go to $WORK (/tmp/gmux-suite).
#
# Estimated time on an H100: setup ~30 s, probe ~30 s, a ~90 s, b ~210 s, c ~70 s,
# d ~40 s; about 8 minutes for all. Every command has a timeout, and all timeouts are
# clamped to a suite budget (SUITE_BUDGET_S, default 510 s) so that a hang cannot eat
# the device tool's 10-minute command limit; what no longer fits is reported as SKIP.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 1
WORK=${GMUX_SUITE_WORK:-/tmp/gmux-suite}
mkdir -p "$WORK"
BUDGET=${SUITE_BUDGET_S:-510}
BENCH_ITERS=${BENCH_ITERS:-100}  # resnet50 batch 64 fp32: ~2 s of timed work per run
GMUX=$ROOT/.gpu-bin/gmux
GMUX_RUN=(env GMUX_LOG="${SUITE_GMUX_LOG:-info}" "$GMUX" run)  # an argv, not a function: timeout execs it
CHECKSUM=$WORK/checksum
RESULTS=$WORK/results.tsv
: >"$RESULTS"
LOG=/dev/null
RC=0
export PYTHONUNBUFFERED=1
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH

# ---------------------------------------------------------------- helpers

log() { echo "$*" | tee -a "$LOG"; }

begin() {
  LOG=$OUT/$1.log
  : >"$LOG"
  log "=== step $1 ($(date -u +%H:%M:%S), ${SECONDS}s into the suite)"
}

# Seconds the next command may take: its own limit, or what is left of the budget.
time_for() {
  local left=$((BUDGET - SECONDS))
  if ((left < $1)); then echo "$left"; else echo "$1"; fi
}

# run LABEL LIMIT CMD...: runs CMD with a timeout; its output goes to stdout, the step
# log and $WORK/LABEL.out. Sets RC (a number, or "skip").
run() {
  local label=$1 limit
  limit=$(time_for "$2")
  shift 2
  : >"$WORK/$label.out"
  if ((limit < 10)); then
    log "SKIP [$label]: suite time budget spent"
    RC=skip
    return
  fi
  log "+ [$label] (timeout ${limit}s) $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$WORK/$label.out" "$LOG"
  RC=${PIPESTATUS[0]}
  log "= [$label] rc=$RC in $((SECONDS - t0))s"
}

rc_word() {
  case $1 in
    0) echo ok ;;
    124 | 137) echo "timeout(rc=$1)" ;;
    skip) echo skipped ;;
    *) echo "rc=$1" ;;
  esac
}

# val KEY LABEL: the last KEY=value token in $WORK/LABEL.out.
val() { grep -o "\b$1=[^ ]*" "$WORK/$2.out" 2>/dev/null | tail -n 1 | cut -d= -f2-; }

# The shim's one-line stats summary, if it printed one.
gmux_stats() { grep '^gmux:' "$WORK/$1.out" 2>/dev/null | tail -n 1; }

# record NAME STATUS RESULT NUMBERS [GMUX_STATS]; empty fields are stored as "-"
# (read with IFS=tab would merge empty ones).
record() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "${3:--}" "${4:--}" "${5:--}" >>"$RESULTS"
  log "RESULT $1: $2 | $3 | $4"
}

# FAIL, or SKIP when the suite budget stopped the command (rc "skip").
fail_word() { if [[ $1 == skip ]]; then echo SKIP; else echo FAIL; fi; }

# status_of LABEL PATTERN: PASS when the command exited 0 and printed PATTERN.
status_of() {
  if [[ $RC == 0 ]] && grep -q -- "$2" "$WORK/$1.out"; then echo PASS; else fail_word "$RC"; fi
}

count_status() { awk -F'\t' -v s="$1" '$2 == s' "$RESULTS" | wc -l; }

gib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1073741824 }'; }

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

join_commas() {
  local IFS=,
  echo "$*"
}

# ---------------------------------------------------------------- steps

step_setup() {
  begin setup
  run nvidia_smi 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  local gpu
  gpu=$(sed -n 2p "$WORK/nvidia_smi.out" | cut -d, -f1 | tr ' ' '_')
  run nvcc_version 30 nvcc --version
  run glibc_version 10 ldd --version
  run torch_version 90 python3 -c 'import torch, torchvision; print(f"torch={torch.__version__} cuda={torch.version.cuda} torchvision={torchvision.__version__}")'
  [[ -f $GMUX ]] && chmod +x "$GMUX"
  if [[ ! -x $GMUX || ! -f $ROOT/.gpu-bin/libgmux.so ]]; then
    log "missing .gpu-bin/gmux or .gpu-bin/libgmux.so: run scripts/gpu-pack.sh on the dev machine first (and carry .gpu-bin)"
    record setup FAIL "no .gpu-bin" "gpu=${gpu:-?}"
    finish
    exit 1
  fi
  export GMUX_SHIM=$ROOT/.gpu-bin/libgmux.so
  run build_checksum 180 nvcc -O2 -arch=sm_90 -o "$CHECKSUM" gpu/checksum.cu
  if [[ $RC != 0 ]]; then
    record setup FAIL "checksum build $(rc_word "$RC")" "gpu=${gpu:-?}"
    finish
    exit 1
  fi
  record setup PASS ok "gpu=${gpu:-?} torch=$(val torch torch_version)"
}

step_probe() {
  begin probe
  run hello_native 60 "$CHECKSUM" hello
  record probe.hello_native "$(status_of hello_native 'hello: ok')" "$(rc_word "$RC")" ""
  run hello_gmux 60 "${GMUX_RUN[@]}" --mem-limit 1G -- "$CHECKSUM" hello
  record probe.hello_gmux "$(status_of hello_gmux 'hello: ok')" "$(rc_word "$RC")" "" "$(gmux_stats hello_gmux)"
  integrity probe.integrity probe_integrity 150 1G 2 300 1
}

step_a() {
  begin a
  integrity a.integrity a_integrity 300 4G 12 5000 7
}

# integrity NAME LABEL TIMEOUT LIMIT TOTAL_GB OPS SEED
integrity() {
  local name=$1 label=$2
  run "$label" "$3" "${GMUX_RUN[@]}" --mem-limit "$4" -- "$CHECKSUM" integrity --total-gb "$5" --ops "$6" --seed "$7"
  local bad
  bad=$(val mismatches "$label")
  record "$name" "$(status_of "$label" '^integrity:.* mismatches=0 ')" "$(rc_word "$RC")" \
    "limit=$4 total_gb=$5 ops=$6 buffers=$(val buffers "$label") mismatches=${bad:-?} time=$(val time "$label")" \
    "$(gmux_stats "$label")"
}

step_b() {
  begin b
  check_model resnet50
  check_model transformer
}

# check_model MODEL: two native runs and one under gmux at 60% of the native footprint.
check_model() {
  local m=$1
  local py=(python3 gpu/torch_check.py --model "$m" --mode check)
  run "${m}_ref1" 150 "${py[@]}" --out "$WORK/${m}_ref1.pt"
  local rc1=$RC
  run "${m}_ref2" 150 "${py[@]}" --out "$WORK/${m}_ref2.pt"
  local rc2=$RC
  local fp
  fp=$(val footprint_bytes "${m}_ref1")
  if [[ $rc1 != 0 || -z $fp || $fp == 0 ]]; then
    record "b.$m" "$(fail_word "$rc1")" "native run $(rc_word "$rc1")" ""
    return
  fi
  local limit=$((fp * 6 / 10))
  run "${m}_gmux" 240 "${GMUX_RUN[@]}" --mem-limit "$limit" -- "${py[@]}" --out "$WORK/${m}_gmux.pt"
  local rcg=$RC
  local refs="refs=n/a"
  if [[ $rc2 == 0 ]]; then
    run "${m}_cmp_refs" 60 python3 gpu/compare.py "$WORK/${m}_ref1.pt" "$WORK/${m}_ref2.pt"
    refs="refs_identical=$(val identical "${m}_cmp_refs") refs_max_abs=$(val max_abs_diff "${m}_cmp_refs")"
  fi
  local numbers
  numbers="footprint_gib=$(gib "$fp") limit_gib=$(gib "$limit") $refs"
  if [[ $rcg != 0 ]]; then
    record "b.$m" "$(fail_word "$rcg")" "gmux run $(rc_word "$rcg")" "$numbers" "$(gmux_stats "${m}_gmux")"
    return
  fi
  run "${m}_cmp_gmux" 60 python3 gpu/compare.py "$WORK/${m}_ref1.pt" "$WORK/${m}_gmux.pt"
  local same diff rel ref_diff
  same=$(val identical "${m}_cmp_gmux")
  diff=$(val max_abs_diff "${m}_cmp_gmux")
  rel=$(val max_rel "${m}_cmp_gmux")
  ref_diff=$(val max_abs_diff "${m}_cmp_refs")
  numbers="$numbers gmux_identical=${same:-?} gmux_max_abs=${diff:-?} gmux_max_rel=${rel:-0}"
  # Bit-identical passes. Otherwise pass only if the native runs differ too and gmux
  # stays within 10x of their difference.
  local status=FAIL result=differs
  if [[ $same == 1 ]]; then
    status=PASS result=identical
  elif [[ -n $ref_diff && -n $diff ]] && awk -v g="$diff" -v r="$ref_diff" 'BEGIN { exit !(r > 0 && g <= 10 * r) }'; then
    status=PASS result=within-run-to-run
  fi
  record "b.$m" "$status" "$result" "$numbers" "$(gmux_stats "${m}_gmux")"
  evict_compare "$m" "$limit"
}

# evict_compare MODEL LIMIT: the same run with LRU eviction (GMUX_EVICT=lru) beside the
# default (OPT from the process's history): output identical to native, time and bytes
# evicted of each.
evict_compare() {
  local m=$1 limit=$2
  local py=(python3 gpu/torch_check.py --model "$m" --mode check)
  run "${m}_lru" 240 env GMUX_EVICT=lru "${GMUX_RUN[@]}" --mem-limit "$limit" -- "${py[@]}" --out "$WORK/${m}_lru.pt"
  if [[ $RC != 0 ]]; then
    record "b.$m.lru_vs_opt" "$(fail_word "$RC")" "lru run $(rc_word "$RC")" ""
    return
  fi
  run "${m}_cmp_lru" 60 python3 gpu/compare.py "$WORK/${m}_ref1.pt" "$WORK/${m}_lru.pt"
  local same status=FAIL result=differs
  same=$(val identical "${m}_cmp_lru")
  [[ $same == 1 ]] && status=PASS result=identical
  local ev_opt ev_lru
  ev_opt=$(gmux_stats "${m}_gmux" | grep -o 'evicted [0-9]*' | cut -d' ' -f2)
  ev_lru=$(gmux_stats "${m}_lru" | grep -o 'evicted [0-9]*' | cut -d' ' -f2)
  record "b.$m.lru_vs_opt" "$status" "$result" \
    "opt_time_s=$(val time_s "${m}_gmux") lru_time_s=$(val time_s "${m}_lru") opt_evicted_gib=$(gib $((${ev_opt:-0} * 2097152))) lru_evicted_gib=$(gib $((${ev_lru:-0} * 2097152)))" \
    "$(gmux_stats "${m}_lru")"
}

step_c() {
  begin c
  local native=() shim=() failed=0 i v
  local py=(python3 gpu/torch_check.py --model resnet50 --mode bench --iters "$BENCH_ITERS")
  for i in 1 2 3; do
    run "bench_native_$i" 90 "${py[@]}"
    v=$(val images_per_s "bench_native_$i")
    if [[ $RC == 0 && -n $v ]]; then native+=("$v"); else failed=1; fi
    run "bench_gmux_$i" 90 "${GMUX_RUN[@]}" --mem-limit 64G -- "${py[@]}"
    v=$(val images_per_s "bench_gmux_$i")
    if [[ $RC == 0 && -n $v ]]; then shim+=("$v"); else failed=1; fi
  done
  if ((${#native[@]} == 0 || ${#shim[@]} == 0)); then
    record c.resnet50_bench FAIL "runs failed" "native_runs=${#native[@]} gmux_runs=${#shim[@]}"
    return
  fi
  local mn mg ratio overhead
  mn=$(median "${native[@]}")
  mg=$(median "${shim[@]}")
  ratio=$(awk -v g="$mg" -v n="$mn" 'BEGIN { printf "%.4f", g / n }')
  overhead=$(awk -v r="$ratio" 'BEGIN { printf "%.2f", (1 - r) * 100 }')
  local status=PASS
  ((failed)) && status=FAIL
  record c.resnet50_bench "$status" "$( ((failed)) && echo "some runs failed" || echo ok)" \
    "native_img_s=$mn gmux_img_s=$mg ratio=$ratio overhead_pct=$overhead native_all=$(join_commas "${native[@]}") gmux_all=$(join_commas "${shim[@]}")" \
    "$(gmux_stats bench_gmux_1)"
}

step_d() {
  begin d
  # The link's ceiling first: native pinned copies, the way the mover issues them.
  run bw 60 "$CHECKSUM" bw --gb 8
  record d.copy_ceiling "$(status_of bw 'both_GBps=')" "$(rc_word "$RC")" \
    "d2h_GBps=$(val d2h_GBps bw) h2d_GBps=$(val h2d_GBps bw) both_GBps=$(val both_GBps bw)" ""
  # 8320M: A (8 GiB) fits with room to spare, A + B do not.
  local mode label
  for mode in pipelined sequential; do
    label=mover_$mode
    if [[ $mode == sequential ]]; then
      run "$label" 120 env GMUX_MOVER=sequential "${GMUX_RUN[@]}" --mem-limit 8320M -- "$CHECKSUM" mover --gb 8
    else
      run "$label" 120 "${GMUX_RUN[@]}" --mem-limit 8320M -- "$CHECKSUM" mover --gb 8
    fi
    record "d.mover_$mode" "$(status_of "$label" 'verify_ok=1')" "$(rc_word "$RC")" \
      "switch_s=$(val switch_s "$label") kernel_s=$(val kernel_s "$label") combined_GBps=$(val combined_GBps "$label")" \
      "$(gmux_stats "$label")"
  done
}

# ---------------------------------------------------------------- summary

finish() {
  local table=$OUT/summary.txt
  {
    echo "gmux GPU suite: mode=$MODE elapsed=${SECONDS}s $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '%-22s %-20s %-6s %s\n' CHECK RESULT STATUS NUMBERS
    while IFS=$'\t' read -r name status result numbers stats; do
      printf '%-22s %-20s %-6s %s\n' "$name" "$result" "$status" "$numbers"
    done <"$RESULTS"
    if awk -F'\t' '$5 != "-" { found = 1 } END { exit !found }' "$RESULTS"; then
      echo "shim stats (GMUX_LOG=info):"
      while IFS=$'\t' read -r name status result numbers stats; do
        [[ $stats != - ]] && printf '  %-20s %s\n' "$name" "$stats"
      done <"$RESULTS"
    fi
    echo "passed=$(count_status PASS) failed=$(count_status FAIL) skipped=$(count_status SKIP)"
  } >"$table"
  echo
  cat "$table"
  python3 - "$RESULTS" "$OUT/summary.json" "$MODE" "$SECONDS" <<'EOF' || echo "summary.json: could not be written"
import json, sys
results, out, mode, elapsed = sys.argv[1:5]
checks = []
for line in open(results):
    name, status, result, numbers, stats = [
        "" if f == "-" else f for f in line.rstrip("\n").split("\t")]
    values = dict(tok.split("=", 1) for tok in numbers.split() if "=" in tok)
    for k, v in values.items():
        try:
            values[k] = float(v)
        except ValueError:
            pass
    checks.append({"name": name, "status": status, "result": result,
                   "numbers": numbers, "values": values, "gmux_stats": stats})
summary = {"mode": mode, "elapsed_s": int(elapsed), "checks": checks,
           "passed": sum(c["status"] == "PASS" for c in checks),
           "failed": sum(c["status"] == "FAIL" for c in checks),
           "skipped": sum(c["status"] == "SKIP" for c in checks)}
json.dump(summary, open(out, "w"), indent=2)
EOF
}

# ---------------------------------------------------------------- main

MODE=${1:-all}
case $MODE in
  all | probe | a | b | c | d) ;;
  *)
    echo "usage: $0 [all|probe|a|b|c|d]" >&2
    exit 2
    ;;
esac

step_setup
case $MODE in
  all) step_probe; step_a; step_b; step_c; step_d ;;
  probe) step_probe ;;
  a) step_a ;;
  b) step_b ;;
  c) step_c ;;
  d) step_d ;;
esac
finish
# Exit 0 only when every check passed.
[[ $(count_status FAIL) -eq 0 && $(count_status SKIP) -eq 0 ]]
