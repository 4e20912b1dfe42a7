#!/usr/bin/env bash
# gmux on a host of several GPUs (one daemon per GPU), run through the device tool on a
# machine of 2 GPUs after scripts/gpu-pack.sh (carry .gpu-bin):
#
#   bash scripts/gpu-multi.sh [ddp] [integrity] [micro] [mp]   (the first three when none given)
#
#   ddp        gpu/ddp_train.py (PyTorch DDP over NCCL, 2 ranks, bitwise deterministic)
#              natively twice (the losses must match: native is reproducible), then as
#              one tenant of the daemons of both GPUs (`gmux daemon --gpu all`, `gmux run
#              --gpus 0,1`) under 60% of its native footprint per GPU: every step's loss
#              must be bitwise the native one's                                  ~3 min
#   integrity  the checksum program as 4 tenants per GPU (8 on 2 GPUs), each GPU's daemon
#              with a 16 GiB budget, 300% of it (4 x 12 GB): every tenant must report 0
#              mismatches, each tenant must be served by its GPU's daemon alone, and what
#              the tenants of a GPU hold must never exceed its budget        ~3-4 min
#   peer       gpu/peer_probe.cu: copies and kernels across two GPUs' VMM mappings    ~10 s
#   mp         gpu/model_parallel.py (one process, half of a transformer on each GPU,
#              activations and gradients copied between them) natively twice, then as a
#              tenant of both GPUs' daemons under 60% of its footprint per GPU: every
#              step's loss must be bitwise the native one's                      ~2 min
#   micro      `gmux bench msched-micro` at 100% (gmux alone) on GPU 0 alone, then on
#              GPUs 0 and 1 at once (two benches): each one's units/s within 5% of the
#              solo run's                                                       ~3 min
#
# All three take over 10 minutes, one device command's limit: run them in two calls
# (e.g. `ddp` and `integrity micro`; OPS=400 shortens integrity). Knobs: DDP_STEPS (30),
# GMUX_DDP_P2P=1 (leave NCCL's peer-to-peer transport on under gmux), DDP_DIAG=0 (no
# extra native run over SHM when the gmux losses differ), OPS (1500 ops per checksum
# tenant), DDP_NATIVE_TIMEOUT, DDP_GMUX_TIMEOUT, INTEGRITY_TIMEOUT, MICRO_TIMEOUT (s).
#
# Full logs go to $OUT/multi-logs.tgz (the device tool brings back a few files, so they
# travel as one), the summary to $OUT/multi-summary.txt; the last lines printed are the
# summary, one line per check with PASS, FAIL or SKIP and its numbers.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RESULTS=${OUT:-./out}
mkdir -p "$RESULTS" && RESULTS=$(cd "$RESULTS" && pwd)
cd "$ROOT" || exit 1
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
GMUX=$ROOT/.gpu-bin/gmux
WORK=/tmp/gmux-multi
LOGS=$WORK/logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
CHECKSUM=$WORK/checksum
SUMMARY=()
[[ -x $GMUX ]] || { echo "gpu-multi: no $GMUX: run scripts/gpu-pack.sh and carry .gpu-bin"; exit 2; }

# The daemons of every GPU listen in this directory, each on <UUID>.sock. GMUX_SOCKET would
# pin every command to one daemon: it is set only for single calls below.
export GMUX_RUN_DIR=$WORK/run
unset GMUX_SOCKET CUDA_VISIBLE_DEVICES
export GMUX_LOG=info
# CUDA numbers the GPUs as nvidia-smi does, so that index g is UUIDS[g] for `--gpus g`.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
# NCCL's NVLink SHARP (multicast) stays off, natively and under gmux alike.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
export PYTHONUNBUFFERED=1
TORCHRUN=(torchrun)
command -v torchrun >/dev/null || TORCHRUN=(python3 -m torch.distributed.run)

mapfile -t UUIDS < <(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | tr -d ' ')
NGPU=${#UUIDS[@]}
{ nvidia-smi -L; nvidia-smi topo -m; } >"$LOGS/gpus.txt" 2>&1

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# The socket of the daemon of GPU index $1.
sock_of() { echo "$GMUX_RUN_DIR/${UUIDS[$1]}.sock"; }

# `gmux daemon --gpu all ARGS...` in the background: one daemon process per GPU; waits
# until every GPU's socket is there.
start_daemons() { # NAME ARGS...
  local name=$1; shift
  "$GMUX" stop >/dev/null 2>&1 # daemons an earlier run of this script left
  rm -rf "$GMUX_RUN_DIR" && mkdir -p "$GMUX_RUN_DIR"
  "$GMUX" daemon --gpu all "$@" >"$LOGS/$name.daemon.log" 2>&1 &
  DAEMON=$!
  local up g
  for _ in $(seq 200); do
    up=0
    for g in "${!UUIDS[@]}"; do [[ -S $(sock_of "$g") ]] && up=$((up + 1)); done
    ((up == NGPU)) && return 0
    kill -0 "$DAEMON" 2>/dev/null || break
    sleep 0.05
  done
  echo "gpu-multi: the daemons of $name did not all start ($up of $NGPU sockets in $GMUX_RUN_DIR)"
  cat "$LOGS/$name.daemon.log"
  return 1
}

# `gmux stop` (every daemon in GMUX_RUN_DIR), then waits up to 10 s for `gmux daemon`.
stop_daemons() {
  "$GMUX" stop >>"$LOGS/stop.log" 2>&1
  for _ in $(seq 100); do
    kill -0 "$DAEMON" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$DAEMON" 2>/dev/null; then
    echo "gmux daemon $DAEMON still ran 10 s after gmux stop; killed" | tee -a "$LOGS/stop.log"
    kill "$DAEMON"
  fi
  wait "$DAEMON" 2>/dev/null
}

# ---------------------------------------------------------------------------- ddp

DDP_STEPS=${DDP_STEPS:-30}
declare -A RC WALL

# torchrun of gpu/ddp_train.py on GPUs 0 and 1, natively, with the extra environment
# VAR=VALUE...; losses to ddp.NAME.jsonl, output to ddp.NAME.log.
ddp_native() { # NAME [VAR=VALUE...]
  local name=$1; shift
  local t0
  t0=$(date +%s.%N)
  env CUDA_VISIBLE_DEVICES=0,1 NCCL_DEBUG="${NCCL_DEBUG:-INFO}" "$@" timeout -k 10 "${DDP_NATIVE_TIMEOUT:-150}" \
    "${TORCHRUN[@]}" --standalone --nproc_per_node=2 gpu/ddp_train.py --steps "$DDP_STEPS" --out "$LOGS/ddp.$name.jsonl" \
    >"$LOGS/ddp.$name.log" 2>&1
  RC[$name]=$?
  WALL[$name]=$(elapsed "$t0")
}

# Compares the loss lines of two runs: PASS when every step's loss (and the mean over
# the ranks) has the same bits and so do the final parameters; else FAIL and the first
# step that differs.
ddp_compare() { # A.jsonl B.jsonl
  python3 - "$1" "$2" <<'PY'
import json, sys

def load(path):
    steps, final = {}, None
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return steps, final
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "step" in r:
            steps[r["step"]] = r
        elif r.get("final"):
            final = r
    return steps, final

(a, fa), (b, fb) = load(sys.argv[1]), load(sys.argv[2])
if not a or not b:
    sys.exit(print(f"FAIL no losses (steps {len(a)} and {len(b)})"))
for i in sorted(set(a) | set(b)):
    if i not in a or i not in b:
        sys.exit(print(f"FAIL first_diff_step={i} (steps {len(a)} and {len(b)})"))
    ka, kb = (a[i].get("loss_hex"), a[i].get("loss_mean_hex")), (b[i].get("loss_hex"), b[i].get("loss_mean_hex"))
    if ka != kb:
        sys.exit(print(f"FAIL first_diff_step={i} loss={a[i]['loss']!r}/{b[i]['loss']!r} hex={ka[0]}/{kb[0]} mean_hex={ka[1]}/{kb[1]}"))
last = a[max(a)]
params = "params=same" if fa and fb and fa["param_sum_hex"] == fb["param_sum_hex"] else "params=DIFFER"
agree = "ranks_agree=yes" if fa and fb and fa.get("ranks_agree") and fb.get("ranks_agree") else "ranks_agree=NO"
ok = params == "params=same" and agree == "ranks_agree=yes"
print(f"{'PASS' if ok else 'FAIL'} steps={len(a)} identical_losses loss[{max(a)}]={last['loss']:.6f} ({last['loss_hex']}) {params} {agree}")
PY
}

# NCCL's transports between the ranks, from its NCCL_DEBUG=INFO lines ("... via SHM/direct/direct").
transport() { # LOG
  local t
  t=$(grep -ho ' via [A-Za-z0-9/_]*' "$1" 2>/dev/null | sed 's/^ via //' | sort | uniq -c | awk '{ printf "%s%s(x%s)", (NR > 1 ? "," : ""), $2, $1 }')
  echo "${t:-unknown}"
}

peaks() { # LOG [WHO]: each WHO's (rank, or device) peak_reserved_bytes, in MiB, in order
  local p
  p=$(grep -ho "${2:-rank} [0-9]* peak_reserved_bytes=[0-9]*" "$1" 2>/dev/null | sort -n -k2 | awk -F= '{ printf "%s%d", (NR > 1 ? " " : ""), $2 / 2^20 }')
  echo "${p:-none}"
}

ddp() {
  if ((NGPU < 2)); then
    SUMMARY+=("ddp-native  SKIP  needs 2 GPUs, nvidia-smi shows $NGPU" "ddp-gmux    SKIP  needs 2 GPUs")
    return
  fi
  # (a) native, for the losses and the footprint; (b) again: native must be reproducible.
  ddp_native native
  ddp_native native2
  local repro ok=FAIL
  repro=$(ddp_compare "$LOGS/ddp.native.jsonl" "$LOGS/ddp.native2.jsonl")
  [[ ${RC[native]} == 0 && ${RC[native2]} == 0 && $repro == PASS* ]] && ok=PASS
  SUMMARY+=("ddp-native  $ok  reproducible: ${repro#* } wall_s=[${WALL[native]} ${WALL[native2]}] exit=[${RC[native]} ${RC[native2]}] peak_reserved_mib=[$(peaks "$LOGS/ddp.native.log")] transport=$(transport "$LOGS/ddp.native.log")")

  # The footprint per GPU: the largest peak_reserved_bytes of the ranks (PyTorch's caching
  # allocator) plus 1 GiB for what PyTorch does not count: the CUDA context, cuBLAS's
  # workspace and NCCL's buffers. The limit: 60% of it, a multiple of 2 MiB.
  local peak
  peak=$(grep -ho 'peak_reserved_bytes=[0-9]*' "$LOGS/ddp.native.log" | cut -d= -f2 | sort -n | tail -n 1)
  if [[ -z $peak ]]; then
    SUMMARY+=("ddp-gmux    FAIL  the native run reported no peak_reserved_bytes (exit ${RC[native]}); see ddp.native.log")
    return
  fi
  local footprint=$((peak + (1 << 30)))
  local limit_mib=$((((footprint * 60 / 100) >> 21) << 1)) # whole 2 MiB chunks, in MiB
  local limit=${limit_mib}M

  # (c) under gmux: one daemon per GPU, the program a tenant of both. NCCL's peer-to-peer
  # transport exports device memory to the other rank's process, which gmux refuses for
  # the memory it migrates: it is off (NCCL then goes through host shared memory) unless
  # GMUX_DDP_P2P=1.
  local p2p=(NCCL_P2P_DISABLE=1) nccl_env="NCCL_P2P_DISABLE=1"
  # (`gmux run` turns it off itself unless the environment says otherwise.)
  if [[ ${GMUX_DDP_P2P:-0} == 1 ]]; then p2p=(NCCL_P2P_DISABLE=0); nccl_env="p2p_on(GMUX_DDP_P2P=1)"; fi
  if ! start_daemons ddp; then
    SUMMARY+=("ddp-gmux    FAIL  gmux daemon --gpu all did not start; see ddp.daemon.log")
    return
  fi
  local t0 pid
  t0=$(date +%s.%N)
  env NCCL_DEBUG="${NCCL_DEBUG:-INFO}" "${p2p[@]}" timeout -k 10 "${DDP_GMUX_TIMEOUT:-280}" \
    "$GMUX" run --gpus 0,1 --tenant ddp --mem-limit "$limit" -- \
    "${TORCHRUN[@]}" --standalone --nproc_per_node=2 gpu/ddp_train.py --steps "$DDP_STEPS" --out "$LOGS/ddp.gmux.jsonl" \
    >"$LOGS/ddp.gmux.log" 2>&1 &
  pid=$!
  for _ in $(seq 15); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  "$GMUX" ps >"$LOGS/ddp.ps" 2>&1
  "$GMUX" ps --json >"$LOGS/ddp.ps.json" 2>&1
  wait "$pid"
  RC[gmux]=$?
  WALL[gmux]=$(elapsed "$t0")
  local g evicted="" stat
  for g in 0 1; do
    stat=$LOGS/ddp.gmux.gpu$g.stat
    GMUX_SOCKET=$(sock_of "$g") "$GMUX" get ddp ggroup.stat >"$stat" 2>&1
    evicted+="$(awk '/^bytes_d2h/ { printf "%.1f", $2 / 2^30; f = 1 } END { if (!f) printf "?" }' "$stat") "
  done
  stop_daemons

  local same
  same=$(ddp_compare "$LOGS/ddp.native.jsonl" "$LOGS/ddp.gmux.jsonl")
  ok=FAIL
  [[ ${RC[gmux]} == 0 && $same == PASS* ]] && ok=PASS
  local slow
  slow=$(awk -v g="${WALL[gmux]}" -v n="${WALL[native]}" 'BEGIN { printf "%.2f", (n > 0 ? g / n : 0) }')
  SUMMARY+=("ddp-gmux    $ok  vs native: ${same#* } limit=$limit/GPU (60% of $((footprint >> 20)) MiB = max peak_reserved $((peak >> 20)) MiB + 1 GiB) wall_s=${WALL[gmux]} native_s=${WALL[native]} (x$slow) exit=${RC[gmux]} nccl=$nccl_env transport=$(transport "$LOGS/ddp.gmux.log") evicted_gib=[${evicted% }] peak_reserved_mib=[$(peaks "$LOGS/ddp.gmux.log")]")

  # When the losses differ with P2P off: is it the transport or gmux? Native over SHM too.
  if [[ $ok == FAIL && $same == FAIL* && ${GMUX_DDP_P2P:-0} != 1 && ${DDP_DIAG:-1} == 1 ]]; then
    ddp_native native-shm NCCL_P2P_DISABLE=1
    SUMMARY+=("ddp-diag    native with NCCL_P2P_DISABLE=1 vs native: $(ddp_compare "$LOGS/ddp.native.jsonl" "$LOGS/ddp.native-shm.jsonl") exit=${RC[native-shm]} transport=$(transport "$LOGS/ddp.native-shm.log")")
  fi
}

# ---------------------------------------------------------------------------- mp

# gpu/model_parallel.py (one process, half of a transformer on each GPU) natively, with
# the extra environment VAR=VALUE...; losses to mp.NAME.jsonl, output to mp.NAME.log.
mp_native() { # NAME [VAR=VALUE...]
  local name=$1; shift
  local t0
  t0=$(date +%s.%N)
  env CUDA_VISIBLE_DEVICES=0,1 "$@" timeout -k 10 "${MP_NATIVE_TIMEOUT:-150}" \
    python3 gpu/model_parallel.py --steps "$MP_STEPS" --out "$LOGS/mp.$name.jsonl" >"$LOGS/mp.$name.log" 2>&1
  RC[mp-$name]=$?
  WALL[mp-$name]=$(elapsed "$t0")
}

# PASS when every step's loss and each device's final parameter sum have the same bits.
mp_compare() { # A.jsonl B.jsonl
  python3 - "$1" "$2" <<'PY'
import json, sys

def load(path):
    try:
        rows = [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, ValueError):
        rows = []
    return [r for r in rows if "step" in r], next((r for r in rows if r.get("final")), None)

(a, fa), (b, fb) = load(sys.argv[1]), load(sys.argv[2])
if not a or len(a) != len(b):
    sys.exit(print(f"FAIL steps={len(a)}/{len(b)}"))
for x, y in zip(a, b):
    if x["loss_hex"] != y["loss_hex"]:
        sys.exit(print(f"FAIL first_diff_step={x['step']} loss={x['loss']!r}/{y['loss']!r}"))
params = "params=same" if fa and fb and fa["param_sum_hex"] == fb["param_sum_hex"] else "params=DIFFER"
print(f"{'PASS' if params == 'params=same' else 'FAIL'} steps={len(a)} identical_losses loss[{a[-1]['step']}]={a[-1]['loss']:.6f} {params}")
PY
}

MP_STEPS=${MP_STEPS:-20}

mp() {
  if ((NGPU < 2)); then
    SUMMARY+=("mp-native   SKIP  needs 2 GPUs, nvidia-smi shows $NGPU" "mp-gmux     SKIP  needs 2 GPUs")
    return
  fi
  mp_native native
  mp_native native2
  local repro ok=FAIL
  repro=$(mp_compare "$LOGS/mp.native.jsonl" "$LOGS/mp.native2.jsonl")
  [[ ${RC[mp-native]} == 0 && ${RC[mp-native2]} == 0 && $repro == PASS* ]] && ok=PASS
  SUMMARY+=("mp-native   $ok  reproducible: ${repro#* } wall_s=[${WALL[mp-native]} ${WALL[mp-native2]}] exit=[${RC[mp-native]} ${RC[mp-native2]}] peak_reserved_mib=[$(peaks "$LOGS/mp.native.log" device)]")
  local peak
  peak=$(grep -ho 'peak_reserved_bytes=[0-9]*' "$LOGS/mp.native.log" | cut -d= -f2 | sort -n | tail -n 1)
  if [[ -z $peak ]]; then
    SUMMARY+=("mp-gmux     FAIL  the native run reported no peak_reserved_bytes (exit ${RC[mp-native]}); see mp.native.log")
    return
  fi
  # The footprint per GPU: the larger device's peak_reserved_bytes plus 1 GiB for the CUDA
  # context and cuBLAS's workspace; the limit per GPU: 60% of it, in whole 2 MiB chunks.
  local footprint=$((peak + (1 << 30)))
  local limit=$((((footprint * 60 / 100) >> 21) << 1))M
  if ! start_daemons mp; then
    SUMMARY+=("mp-gmux     FAIL  gmux daemon --gpu all did not start; see mp.daemon.log")
    return
  fi
  local t0
  t0=$(date +%s.%N)
  env GMUX_LOG=info timeout -k 10 "${MP_GMUX_TIMEOUT:-300}" "$GMUX" run --gpus 0,1 --tenant mp --mem-limit "$limit" -- \
    python3 gpu/model_parallel.py --steps "$MP_STEPS" --out "$LOGS/mp.gmux.jsonl" >"$LOGS/mp.gmux.log" 2>&1
  RC[mp-gmux]=$?
  WALL[mp-gmux]=$(elapsed "$t0")
  local g evicted="" stat
  for g in 0 1; do
    stat=$LOGS/mp.gmux.gpu$g.stat
    GMUX_SOCKET=$(sock_of "$g") "$GMUX" get mp ggroup.stat >"$stat" 2>&1
    evicted+="$(awk '/^bytes_d2h/ { printf "%.1f", $2 / 2^30; f = 1 } END { if (!f) printf "?" }' "$stat") "
  done
  stop_daemons
  local same joined summaries
  same=$(mp_compare "$LOGS/mp.native.jsonl" "$LOGS/mp.gmux.jsonl")
  joined=$(grep -c 'device 1 joins' "$LOGS/mp.gmux.log")
  summaries=$(grep -c 'gmux: device [01]: limit' "$LOGS/mp.gmux.log")
  ok=FAIL
  [[ ${RC[mp-gmux]} == 0 && $same == PASS* && $summaries == 2 ]] && ok=PASS
  local slow
  slow=$(awk -v g="${WALL[mp-gmux]}" -v n="${WALL[mp-native]}" 'BEGIN { printf "%.2f", (n > 0 ? g / n : 0) }')
  SUMMARY+=("mp-gmux     $ok  vs native: ${same#* } limit=$limit/GPU (60% of $((footprint >> 20)) MiB) wall_s=${WALL[mp-gmux]} native_s=${WALL[mp-native]} (x$slow) exit=${RC[mp-gmux]} evicted_gib=[${evicted% }] device_summaries=$summaries peers_joined=$joined")
}

# gpu/peer_probe.cu: what the driver does with copies and kernels across two GPUs' VMM
# mappings granted to their own device alone, and granted to both (gmux grants both once
# a process uses two devices).
peer() {
  if ((NGPU < 2)); then
    SUMMARY+=("peer        SKIP  needs 2 GPUs")
    return
  fi
  nvcc -O2 -arch=sm_90 -o "$WORK/peer_probe" gpu/peer_probe.cu -lcuda >"$LOGS/peer.build.log" 2>&1 || {
    SUMMARY+=("peer        FAIL  peer_probe build failed; see peer.build.log")
    return
  }
  { "$WORK/peer_probe"; "$WORK/peer_probe" fault; } >"$LOGS/peer.log" 2>&1
  local own both cost
  own=$(grep -c '^own .* ok$' "$LOGS/peer.log")
  both=$(grep -c '^both .* ok$' "$LOGS/peer.log")
  cost=$(grep -o 'map+access per 2 MiB: .*' "$LOGS/peer.log")
  SUMMARY+=("peer        INFO  own-device access: $own of 8 cases work; access for both: $both of 8 work; $cost")
}

# ---------------------------------------------------------------------------- integrity

# Checks the `gmux ps --json` samples in DIR (each a JSON array of the daemons' objects,
# or one object with one daemon): per GPU, the tenants' `held` added up and the daemon's
# `held` never above BUDGET, nor its `peak_held` (the most held at once since it started);
# each tenant csG* seen on the daemon of GPU index G alone, 4 on each. Prints "ok ..." or
# "BAD ...", then the numbers.
held_check() { # BUDGET_BYTES DIR
  python3 - "$1" "$2" "$(IFS=,; echo "${UUIDS[*]}")" <<'PY'
import glob, json, sys

budget, folder, uuids = int(sys.argv[1]), sys.argv[2], sys.argv[3].split(",")
samples, most, peak, names, problems = 0, {}, {}, {}, []
for path in sorted(glob.glob(folder + "/*.json")):
    try:
        v = json.load(open(path))
    except (OSError, ValueError):
        continue
    samples += 1
    for k, d in enumerate(v if isinstance(v, list) else [v]):
        gpu = d.get("gpu") or f"daemon{k}"
        tenants = d.get("tenants") or []
        total = sum(t.get("held", 0) for t in tenants)
        most[gpu] = max(most.get(gpu, 0), total, d.get("held", 0))
        if d.get("peak_held") is not None:
            peak[gpu] = max(peak.get(gpu, 0), d["peak_held"])
        if total > budget or d.get("held", 0) > budget:
            problems.append(f"{gpu} held {total} > budget in {path.rsplit('/', 1)[-1]}")
        names.setdefault(gpu, set()).update(t.get("name", "?") for t in tenants)
for gpu, p in peak.items():
    if p > budget:
        problems.append(f"{gpu} peak_held {p} > budget")
for gpu, ns in names.items():
    g = uuids.index(gpu) if gpu in uuids else -1
    stray = sorted(n for n in ns if not n.startswith(f"cs{g}"))
    if stray or len(ns) != 4:
        problems.append(f"GPU {g} ({gpu}) served {sorted(ns)}")
if samples == 0:
    problems.append("no gmux ps --json sample")
gib = lambda b: f"{b / 2**30:.2f}"
per = lambda m: "[" + " ".join(gib(m.get(u, 0)) for u in uuids) + "]"
print(("BAD " + "; ".join(problems[:3]) if problems else "ok"), f"samples={samples} max_held_gib={per(most)} peak_held_gib={per(peak)} tenants_per_gpu=[{' '.join(str(len(names.get(u, ()))) for u in uuids)}]")
PY
}

integrity() {
  if ((NGPU < 1)); then
    SUMMARY+=("integrity   SKIP  nvidia-smi shows no GPU")
    return
  fi
  [[ -x $CHECKSUM ]] || nvcc -O2 -arch=sm_90 -o "$CHECKSUM" gpu/checksum.cu || {
    SUMMARY+=("integrity   FAIL  checksum build failed")
    return
  }
  if ! start_daemons integrity --hbm 16G --policy rr --timeslice 50ms; then
    SUMMARY+=("integrity   FAIL  gmux daemon --gpu all did not start; see integrity.daemon.log")
    return
  fi
  local samples=$WORK/ps-samples stop=$WORK/ps-stop
  rm -rf "$samples" "$stop" && mkdir -p "$samples"
  # `gmux ps --json` every 2 s while the tenants run.
  (
    n=0
    while [[ ! -e $stop ]]; do
      "$GMUX" ps --json >"$samples/$(printf %04d "$n").json" 2>/dev/null
      n=$((n + 1))
      sleep 2
    done
  ) &
  local sampler=$! pids=() t0=$SECONDS g i
  for ((g = 0; g < NGPU; g++)); do
    for i in 0 1 2 3; do
      timeout -k 10 "${INTEGRITY_TIMEOUT:-500}" "$GMUX" run --gpus "$g" --tenant "cs$g$i" -- \
        "$CHECKSUM" integrity --total-gb 12 --ops "${OPS:-1500}" --seed $((11 + 4 * g + i)) >"$LOGS/integrity.$g.$i.log" 2>&1 &
      pids+=($!)
    done
  done
  sleep 20
  "$GMUX" ps >"$LOGS/integrity.ps" 2>&1
  local rcs="" bad=0 p
  for p in "${pids[@]}"; do
    wait "$p"
    rcs+="$? "
  done
  touch "$stop"
  wait "$sampler"
  "$GMUX" ps --json >"$samples/final.json" 2>&1 # peak_held since each daemon started
  local evicted=""
  for ((g = 0; g < NGPU; g++)); do
    for i in 0 1 2 3; do
      grep -q '^integrity:.* mismatches=0 ' "$LOGS/integrity.$g.$i.log" || bad=$((bad + 1))
      GMUX_SOCKET=$(sock_of "$g") "$GMUX" get "cs$g$i" ggroup.stat >"$LOGS/integrity.$g.$i.stat" 2>&1
    done
    evicted+="$(cat "$LOGS"/integrity."$g".?.stat | awk '/^bytes_d2h/ { s += $2 } END { printf "%.1f", s / 2^30 }') "
  done
  stop_daemons
  local held
  held=$(held_check $((16 << 30)) "$samples")
  mkdir -p "$LOGS/integrity.ps-samples" && cp "$samples"/*.json "$LOGS/integrity.ps-samples/" 2>/dev/null
  local mism ok=FAIL
  mism=$(grep -ho 'mismatches=[0-9]*' "$LOGS"/integrity.*.?.log | sort | uniq -c | tr -s ' \n' ' ')
  [[ $bad == 0 && $held == ok* ]] && ok=PASS
  SUMMARY+=("integrity   $ok  gpus=$NGPU tenants=$((4 * NGPU)) budget=16G/GPU total=$((48 * NGPU))GB exit=[${rcs% }] ${mism}evicted_gib=[${evicted% }] held_vs_budget: $held time=$((SECONDS - t0))s")
}

# ---------------------------------------------------------------------------- micro

# `gmux bench msched-micro` at 100% on GPU $2 (CUDA_VISIBLE_DEVICES). The bench starts its
# own daemon on a socket it derives from its pid in the temporary directory and points
# its tenants there with GMUX_SOCKET; each run also gets a TMPDIR and GMUX_RUN_DIR of its
# own, so that two benches at once can never share a socket or a journal.
micro_run() { # NAME GPU
  local name=$1 gpu=$2 dir=$WORK/micro-$1
  rm -rf "$dir" && mkdir -p "$dir/tmp" "$dir/run"
  env -u GMUX_SOCKET CUDA_VISIBLE_DEVICES="$gpu" TMPDIR="$dir/tmp" GMUX_RUN_DIR="$dir/run" timeout -k 10 "${MICRO_TIMEOUT:-300}" \
    "$GMUX" bench msched-micro --levels 100 --systems gmux --duration 10 --warmup 25 --out "$dir/out" \
    >"$LOGS/micro-$name.txt" 2>"$LOGS/micro-$name.stderr"
  echo "exit $?" >>"$LOGS/micro-$name.txt"
  mkdir -p "$LOGS/micro-$name"
  cp "$dir"/out/*.json "$dir"/out/*.log "$LOGS/micro-$name/" 2>/dev/null
}

# Units/s of a run, all four tenants; "nan" when it has none.
micro_units() { # NAME
  python3 -c 'import json, sys
try:
    r = json.load(open(sys.argv[1]))["rows"][0]
    print("%.1f" % sum(r["units_per_s"].values()))
except Exception:
    print("nan")' "$WORK/micro-$1/out/msched-micro.json"
}

micro() {
  if ((NGPU < 1)); then
    SUMMARY+=("micro       SKIP  nvidia-smi shows no GPU")
    return
  fi
  micro_run solo0 0
  local solo
  solo=$(micro_units solo0)
  if ((NGPU < 2)); then
    SUMMARY+=("micro       SKIP  solo GPU 0: units/s=$solo; needs 2 GPUs for the simultaneous runs")
    return
  fi
  micro_run dual0 0 &
  local a=$!
  micro_run dual1 1 &
  local b=$!
  wait "$a" "$b"
  local u0 u1 verdict
  u0=$(micro_units dual0)
  u1=$(micro_units dual1)
  verdict=$(awk -v s="$solo" -v a="$u0" -v b="$u1" 'BEGIN {
    if (s + 0 <= 0 || a + 0 <= 0 || b + 0 <= 0) { print "FAIL ratio=[- -]"; exit }
    ra = a / s; rb = b / s
    ok = (ra >= 0.95 && ra <= 1.05 && rb >= 0.95 && rb <= 1.05)
    printf "%s ratio=[%.3f %.3f]", ok ? "PASS" : "FAIL", ra, rb }')
  local failed
  failed=$(cat "$WORK"/micro-*/out/msched-micro.json 2>/dev/null | python3 -c 'import json, sys, re
text = sys.stdin.read()
bad = [f for m in re.finditer(r"\"failed\": \[(.*?)\]", text, re.S) for f in re.findall(r"\"([^\"]+)\"", m.group(1))]
print(",".join(bad) or "none")')
  SUMMARY+=("micro       ${verdict%% *}  units/s solo_gpu0=$solo simultaneous gpu0=$u0 gpu1=$u1 ${verdict#* } (each within 5% of solo) tenant_failures=$failed")
}

# ----------------------------------------------------------------------------

parts=("$@")
((${#parts[@]})) || parts=(ddp integrity micro)
for p in "${parts[@]}"; do
  case $p in
    ddp | integrity | micro | mp | peer) "$p" ;;
    *) echo "gpu-multi: unknown part $p (ddp, integrity, micro)"; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sort | uniq -c | tr -s ' \n' ' ' >"$LOGS/gpu.txt"
tar -czf "$RESULTS/multi-logs.tgz" -C "$WORK" logs 2>/dev/null
echo "=== summary"
printf '%s\n' "== gpu-multi ${NGPU} GPUs: $(cat "$LOGS/gpu.txt") $("$GMUX" --version 2>/dev/null)" "${SUMMARY[@]}" | tee "$RESULTS/multi-summary.txt"
