#!/usr/bin/env bash
# The serving channel on a lent GPU, after scripts/gpu-pack.sh; carry .gpu-bin:
#
#   bash scripts/gpu-serving.sh [channel] [jobs] [bench]
#
#   channel  `gmux bench channel`: ping round trips through a real gmuxd's dispatcher,
#            back to back and 1 ms apart, and the idle CPU of client and dispatcher ~20 s
#   jobs     gpu/serve_jobs.py (ResNet-18 batch 1 and ResNet-50 batch 16, each request a
#            `gmux.job`) natively, then as a tenant of an 8 GiB gmuxd, natively again:
#            the daemon must count the jobs the loop marked; with .gpu-bin-base carried,
#            the baseline build's gmux too, and with PROFILE=1 this build's phases
#            (GMUX_DEBUG=profile)                                     ~1.5 min a build
#   bench    `gmux bench serving`: six torchvision models as tenants, lognormal arrivals
#            (SIGMAS, default 1.5) at LOADS (0.5,0.8), natively and with --dispatch
#            shallow and srpt-deficit (SYSTEMS, any of `gmux bench serving --systems`;
#            gmux-admit loads .gpu-bin/policies/admit_short.o;
#            FAIRNESS for srpt-deficit, default 100ms): short-job P50/P99, long-job
#            throughput, fairness; about 40 s a run (DURATION + WARMUP + 5 s), and the
#            whole part must end within 560 s: keep to 10 runs a call
#
# Full logs go to $OUT/serving-logs.tgz, the summary to $OUT/serving-summary.txt and is
# printed last.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RESULTS=${OUT:-./out}
mkdir -p "$RESULTS" && RESULTS=$(cd "$RESULTS" && pwd)
cd "$ROOT" || exit 1
GMUX=$ROOT/.gpu-bin/gmux
WORK=/tmp/gmux-serving
LOGS=$WORK/logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
SUMMARY=()
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}

channel() {
  timeout 120 "$GMUX" bench channel --out "$WORK/channel" >"$LOGS/channel.txt" 2>&1
  SUMMARY+=("channel (exit $?):")
  while IFS= read -r l; do SUMMARY+=("  $l"); done < <(head -n 5 "$LOGS/channel.txt")
}

jobs() {
  local t0=$SECONDS
  timeout 200 python3 gpu/serve_jobs.py >"$LOGS/jobs.native1.txt" 2>&1
  SUMMARY+=("jobs native  (exit $?): $(tail -n 1 "$LOGS/jobs.native1.txt")")
  # This build, then the baseline's (.gpu-bin-base, where carried), then this build
  # with its phases timed (PROFILE=1).
  local builds=(new)
  [[ -x $ROOT/.gpu-bin-base/gmux ]] && builds+=(base)
  [[ ${PROFILE:-0} == 1 ]] && builds+=(profile)
  for b in "${builds[@]}"; do
    local bin=$GMUX env=()
    [[ $b == base ]] && bin=$ROOT/.gpu-bin-base/gmux
    [[ $b == profile ]] && env=(GMUX_DEBUG=profile)
    export GMUX_SOCKET=$WORK/serving.sock
    "$bin" daemon --socket "$GMUX_SOCKET" --hbm 8G >"$LOGS/jobs.daemon.$b.log" 2>&1 &
    local daemon=$!
    for _ in $(seq 100); do [[ -S $GMUX_SOCKET ]] && break; sleep 0.05; done
    env GMUX_LOG=info "${env[@]}" timeout 200 "$bin" run --tenant serve -- python3 gpu/serve_jobs.py >"$LOGS/jobs.$b.txt" 2>"$LOGS/jobs.$b.stderr"
    SUMMARY+=("jobs gmux $b (exit $?): $(tail -n 1 "$LOGS/jobs.$b.txt")")
    "$bin" stop >/dev/null 2>&1; wait "$daemon" 2>/dev/null
    unset GMUX_SOCKET
  done
  timeout 200 python3 gpu/serve_jobs.py >"$LOGS/jobs.native2.txt" 2>&1
  SUMMARY+=("jobs native  (exit $?): $(tail -n 1 "$LOGS/jobs.native2.txt") time=$((SECONDS - t0))s")
}

bench() {
  local admission=()
  [[ -f $ROOT/.gpu-bin/policies/admit_short.o ]] && admission=(--admission "$ROOT/.gpu-bin/policies/admit_short.o")
  timeout 560 "$GMUX" bench serving --duration "${DURATION:-15}" --warmup "${WARMUP:-20}" --out "$WORK/bench" \
    --loads "${LOADS:-0.5,0.8}" --sigmas "${SIGMAS:-1.5}" --systems "${SYSTEMS:-native,gmux-shallow,gmux-srpt}" --fairness "${FAIRNESS:-100ms}" "${admission[@]}" \
    >"$LOGS/bench.txt" 2>"$LOGS/bench.stderr"
  SUMMARY+=("serving bench (exit $?):")
  while IFS= read -r l; do SUMMARY+=("  $l"); done < <(grep -v '^results:' "$LOGS/bench.txt")
  cp "$WORK"/bench/*.json "$LOGS/" 2>/dev/null
  cp "$WORK"/bench/*.log "$LOGS/" 2>/dev/null
}

parts=("$@")
[[ ${#parts[@]} == 0 ]] && parts=(channel jobs)
for p in "${parts[@]}"; do
  case $p in
    channel | jobs | bench) "$p" ;;
    *) echo "gpu-serving: unknown part $p (channel, jobs, bench)"; exit 2 ;;
  esac
done
tar -czf "$RESULTS/serving-logs.tgz" -C "$WORK" logs 2>/dev/null
printf '%s\n' "${SUMMARY[@]}" | tee "$RESULTS/serving-summary.txt"
