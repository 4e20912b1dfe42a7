#!/usr/bin/env bash
# eBPF policies on a lent GPU, after scripts/gpu-pack.sh (which also compiles policies/
# into .gpu-bin/policies/); carry .gpu-bin (and .gpu-bin-base for `overhead`):
#
#   bash scripts/gpu-policy.sh [overhead] [micro] [hooks] [stream] [churn] [maps] [rt]
#
#   overhead  what the hooks cost: `gmux bench launch` of this build with no policy, of
#             the baseline build (.gpu-bin-base, skipped without it), and of this build
#             with policies/noop.c (a program on every memory hook) in gmux's child, in
#             the order new, base, noop, twice                                 ~3 min
#   micro     msched-micro at 100% (gmux alone) without and with noop.o in every
#             tenant (GMUX_POLICY)                                             ~2 min
#   hooks     `gmux bench hooks`: ns per call of noop.o, rt_boost.o, stride.o and
#             admit_short.o (HOOKS picks), JIT and interpreted                 ~1 min
#   stream    gpu/stream.py (48 buffers of 64 MiB, 32 kernels each, per pass) natively
#             and under a 1 GiB limit: gmux's own order, then with policies/stride.c,
#             each with OPT from history (default) and with GMUX_EVICT=lru    ~2 min
#   churn     the checksum program as 4 tenants at 300% of 16 GiB while a loop loads
#             and unloads policies 100 times (lfu.o into every tenant's process, then
#             rt_boost.o into the daemon): 0 mismatches                        ~2 min
#   maps      gpu/stream.py as a tenant of a 2 GiB gmuxd with policies/lfu.c loaded: its
#             `uses` map is read from the process (`gmux policy map 1 uses dump`), a key
#             is written into the process's copy and deleted, and the copy sent at exit
#             is shown after the process ends                                  ~1 min
#   rt        `gmux bench priority --rt-policy policies/rt_boost.o`: the real-time
#             tenant's latency alone, under round robin, under strict priority with the
#             class asked for, and with the class given by rt_boost (RUNS picks some of
#             alone,rr,priority,ebpf; REPEAT runs each that many times, in turn; DURATION
#             and WARMUP, default 10 and 30 s)                          ~1 min a run
#
# Full logs go to $OUT/policy-logs.tgz, the summary to $OUT/policy-summary.txt and is
# printed last.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RESULTS=${OUT:-./out}
mkdir -p "$RESULTS" && RESULTS=$(cd "$RESULTS" && pwd)
cd "$ROOT" || exit 1
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
GMUX=$ROOT/.gpu-bin/gmux
POL=$ROOT/.gpu-bin/policies
WORK=/tmp/gmux-policy
LOGS=$WORK/logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
SUMMARY=()
[[ -f $POL/noop.o ]] || { echo "gpu-policy: no $POL/noop.o: run scripts/gpu-pack.sh with clang installed"; exit 2; }

overhead() {
  local runs=(new base noop new base noop)
  [[ -f .gpu-bin-base/libgmux.so ]] || runs=(new noop new noop)
  local i=0
  for run in "${runs[@]}"; do
    i=$((i + 1))
    local shim=$ROOT/.gpu-bin/libgmux.so extra=()
    [[ $run == base ]] && shim=$ROOT/.gpu-bin-base/libgmux.so
    [[ $run == noop ]] && extra=(--policy "$POL/noop.o")
    GMUX_SHIM=$shim timeout 120 "$GMUX" bench launch --launches 200000 --rounds "${ROUNDS:-3}" "${extra[@]}" \
      --out "$WORK/launch-$i" >"$LOGS/launch-$i-$run.txt" 2>"$LOGS/launch-$i-$run.stderr"
    local row
    row=$(awk '$1 == "empty" || $1 == "buffer" {printf "%s %s ", $1, $5}' "$LOGS/launch-$i-$run.txt")
    SUMMARY+=("launch $run: added µs within gmux's child: ${row:-failed}")
  done
}

micro() {
  for run in plain noop; do
    local envs=()
    [[ $run == noop ]] && envs=(GMUX_POLICY="$POL/noop.o")
    env "${envs[@]}" timeout 200 "$GMUX" bench msched-micro --levels 100 --systems gmux --duration 10 --warmup 25 \
      --out "$WORK/micro-$run" >"$LOGS/micro-$run.txt" 2>"$LOGS/micro-$run.stderr"
    local units
    units=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["rows"][0]; print(" ".join(f"{k}={v:.1f}" for k, v in sorted(r["units_per_s"].items())), "total=%.1f" % sum(r["units_per_s"].values()))' \
      "$WORK/micro-$run/msched-micro.json" 2>&1)
    SUMMARY+=("msched-micro 100% $run: units/s $units")
  done
}

hooks() {
  for p in ${HOOKS:-noop rt_boost stride admit_short}; do
    timeout 120 "$GMUX" bench hooks --policy "$POL/$p.o" --out "$WORK/hooks-$p" >"$LOGS/hooks-$p.txt" 2>&1
    while IFS= read -r l; do SUMMARY+=("hooks $p: $l"); done < <(sed -n '3,$p' "$LOGS/hooks-$p.txt" | grep -v '^results')
  done
}

stream() {
  local args=(gpu/stream.py --buffers 48 --mib 64 --work 32 --passes 8)
  SUMMARY+=("stream native: $(timeout 120 python3 "${args[@]}" 2>"$LOGS/stream-native.stderr")")
  for evict in opt lru; do
    for run in own stride; do
      local envs=(GMUX_LOG=info GMUX_EVICT=$evict)
      [[ $run == stride ]] && envs+=(GMUX_POLICY="$POL/stride.o")
      local line
      line=$(env "${envs[@]}" timeout 180 "$GMUX" run --standalone --mem-limit 1G -- python3 "${args[@]}" 2>"$LOGS/stream-$evict-$run.stderr")
      local waits
      waits=$(grep -o 'commands [0-9]* ([0-9]* waited for memory)' "$LOGS/stream-$evict-$run.stderr" | tail -n 1)
      SUMMARY+=("stream gmux 1G evict=$evict $run: $line $waits")
    done
  done
}

churn() {
  [[ -x $WORK/checksum ]] || nvcc -O2 -arch=sm_90 -o "$WORK/checksum" gpu/checksum.cu || { SUMMARY+=("churn FAIL: checksum build"); return; }
  export GMUX_SOCKET=$WORK/churn.sock
  "$GMUX" daemon --socket "$GMUX_SOCKET" --hbm 16G --policy rr --timeslice 50ms >"$LOGS/churn.daemon.log" 2>&1 &
  local daemon=$!
  for _ in $(seq 100); do [[ -S $GMUX_SOCKET ]] && break; sleep 0.05; done
  local pids=() t0=$SECONDS
  for i in 0 1 2 3; do
    GMUX_LOG=info timeout 400 "$GMUX" run --tenant "cs$i" -- "$WORK/checksum" integrity --total-gb 12 --ops "${OPS:-600}" --seed $((i + 21)) >"$LOGS/churn.$i.log" 2>&1 &
    pids+=($!)
  done
  sleep 5
  local loads=0 unloads=0
  for n in $(seq 50); do
    for p in lfu rt_boost; do
      local id
      id=$("$GMUX" policy load "$POL/$p.o" 2>>"$LOGS/churn.cli.log" | grep -o 'loaded policy [0-9]*' | grep -o '[0-9]*$')
      [[ -n $id ]] && loads=$((loads + 1))
      sleep 0.2
      [[ -n $id ]] && "$GMUX" policy unload "$id" >>"$LOGS/churn.cli.log" 2>&1 && unloads=$((unloads + 1))
    done
    [[ $n == 25 ]] && "$GMUX" policy list >"$LOGS/churn.list" 2>&1
  done
  local rcs="" bad=0
  for i in 0 1 2 3; do wait "${pids[$i]}"; rcs+="$? "; done
  for i in 0 1 2 3; do grep -q '^integrity:.* mismatches=0 ' "$LOGS/churn.$i.log" || bad=$((bad + 1)); done
  local attached
  attached=$(cat "$LOGS"/churn.?.log | grep -c 'lfu.o) attached')
  "$GMUX" stop >/dev/null 2>&1; wait "$daemon" 2>/dev/null
  SUMMARY+=("churn  $([[ $bad == 0 && $loads == 100 && $unloads == 100 ]] && echo PASS || echo FAIL)  loads=$loads unloads=$unloads lfu_attached_in_processes=$attached exit=[${rcs% }] $(grep -ho 'mismatches=[0-9]*' "$LOGS"/churn.?.log | tr '\n' ' ')time=$((SECONDS - t0))s")
  unset GMUX_SOCKET
}

maps() {
  export GMUX_SOCKET=$WORK/maps.sock
  "$GMUX" daemon --socket "$GMUX_SOCKET" --hbm 2G >"$LOGS/maps.daemon.log" 2>&1 &
  local daemon=$! t0=$SECONDS
  for _ in $(seq 100); do [[ -S $GMUX_SOCKET ]] && break; sleep 0.05; done
  "$GMUX" policy load "$POL/lfu.o" >"$LOGS/maps.cli.log" 2>&1
  GMUX_LOG=info timeout 300 "$GMUX" run --tenant s -- python3 gpu/stream.py --buffers 48 --mib 64 --work 32 --passes "${MAP_PASSES:-30}" \
    >"$LOGS/maps.stream.log" 2>"$LOGS/maps.stream.stderr" &
  local tenant=$!
  # until_dump has|lacks RE: waits up to 30 s for the dump to hold (or lack) a line matching RE.
  until_dump() {
    for _ in $(seq 300); do
      "$GMUX" policy map 1 uses dump >"$LOGS/maps.dump" 2>&1
      if [[ $1 == has ]]; then grep -qE "$2" "$LOGS/maps.dump" && return 0; else grep -qE "$2" "$LOGS/maps.dump" || return 0; fi
      sleep 0.1
    done
    return 1
  }
  local steps=()
  until_dump has '^in process ' && steps+=("snapshot=$(grep -m1 '^in process ' "$LOGS/maps.dump" | grep -o '[0-9]* entries')") || steps+=("snapshot=none")
  cp "$LOGS/maps.dump" "$LOGS/maps.dump.first"
  "$GMUX" policy map 1 uses update 4000000000 77 >>"$LOGS/maps.cli.log" 2>&1
  until_dump has '^4000000000 77$' && steps+=(write=ok) || steps+=(write=missing)
  "$GMUX" policy map 1 uses delete 4000000000 >>"$LOGS/maps.cli.log" 2>&1
  until_dump lacks '^4000000000 ' && steps+=(delete=ok) || steps+=(delete=missing)
  kill -0 "$tenant" 2>/dev/null && steps+=(written_while_running) || steps+=(TENANT_ENDED_TOO_SOON)
  wait "$tenant"; local rc=$?
  until_dump has 'exited, as it said' && steps+=(exit_snapshot=ok) || steps+=(exit_snapshot=missing)
  "$GMUX" stop >/dev/null 2>&1; wait "$daemon" 2>/dev/null
  local verdict=FAIL
  [[ $rc == 0 && " ${steps[*]} " == *" write=ok delete=ok written_while_running exit_snapshot=ok "* && ${steps[0]} != snapshot=none ]] \
    && grep -q 'verify=ok' "$LOGS/maps.stream.log" && verdict=PASS
  SUMMARY+=("maps   $verdict  ${steps[*]} exit=$rc $(cat "$LOGS/maps.stream.log") time=$((SECONDS - t0))s")
  unset GMUX_SOCKET
}

rt() {
  local runs=()
  [[ -n ${RUNS:-} ]] && runs=(--runs "$RUNS")
  timeout 560 "$GMUX" bench priority --duration "${DURATION:-10}" --warmup "${WARMUP:-30}" --rt-policy "$POL/rt_boost.o" --out "$WORK/prio" \
    "${runs[@]}" --repeat "${REPEAT:-1}" >"$LOGS/priority.txt" 2>"$LOGS/priority.stderr"
  SUMMARY+=("priority (exit $?):")
  while IFS= read -r l; do SUMMARY+=("  $l"); done < <(grep -v '^results:' "$LOGS/priority.txt")
}

parts=("$@")
[[ ${#parts[@]} == 0 ]] && parts=(overhead micro hooks stream churn maps rt)
for p in "${parts[@]}"; do
  case $p in
    overhead | micro | hooks | stream | churn | maps | rt) "$p" ;;
    *) echo "gpu-policy: unknown part $p (overhead, micro, hooks, stream, churn, maps, rt)"; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$LOGS/gpu.txt" 2>&1
tar -czf "$RESULTS/policy-logs.tgz" -C "$WORK" logs 2>/dev/null
printf '%s\n' "== gpu-policy $(cat "$LOGS/gpu.txt") $(.gpu-bin/gmux --version 2>/dev/null)" "${SUMMARY[@]}" | tee "$RESULTS/policy-summary.txt"
