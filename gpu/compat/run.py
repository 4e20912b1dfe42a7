#!/usr/bin/env python3
"""Runs the compatibility corpus natively and under gmux, and classifies every gmux run.

    run.py [--part N/M | --only A,B | --tenants] [--levels 100,50,25] [--jobs 3]
           [--gmux ./target/release/gmux] [--build DIR] [--work DIR] [--out DIR]
           [--timeout 180] [--budget SECONDS] [--overhead 64]
    run.py --list [--part N/M]       the programs, their parts and estimated times
    run.py --print-cpp [--part N/M]  the C++ programs (binary names) a part needs
    run.py --dry-run ...             the runs it would make, without running anything
    run.py --self-test               unit tests and an end-to-end run with stand-ins (no GPU)

For each program: two native runs (their results must agree, bit for bit or within the
program's tolerance, else it is reported nondeterministic and gmux runs are held to 10x
the native difference); a footprint run under `gmux run --standalone --mem-limit 70G`
with GMUX_LOG=info, whose exit summary gives the footprint (`peak allocated`, else the
larger of `peak resident` and `allocated`); then one run per level at
limit = level% x footprint (rounded up to 2 MiB, at least 64 MiB).

Each gmux run (the footprint run included, as level "fp") is classified:
  identical    exit 0 and the result equals the native one (bit for bit or within tolerance)
  clear-error  non-zero exit, and a `gmux:` line naming the working set and the limit
               ("needs ... limit"), or exit status 86 (the shim's oversize exit)
  refused      non-zero exit after gmux refused, by name, a call it does not support
  wrong        exit 0 but the result differs or is missing
  crash        killed by a signal (SIGSEGV/SIGBUS/SIGILL/SIGFPE always), timed out, or a
               non-zero exit without such a message
nvidia-smi is sampled every ~50 ms during each run; a gmux run whose processes' peak
exceeds the limit, plus what the program holds natively outside its allocations (its
native nvidia-smi peak less its footprint: context, kernels' code), plus --overhead MiB,
is counted over-limit.

--tenants runs groups of 4 programs at once as tenants of one gmuxd (`gmux daemon --hbm
B`, B = half their summed footprints), each with `gmux run --tenant NAME --` and no limit.

Writes under --out: <tag>.json (every program and run), <tag>.txt (the summary) and
<tag>-logs.tar.gz (stdout and stderr of every run). Prints the summary last.
Only the standard library and numpy.
"""

import argparse
import concurrent.futures
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import programs as corpus  # noqa: E402

MIB = 1 << 20
CHUNK = 2 * MIB
MIN_LIMIT = 64 * MIB
OVERSIZE_EXIT = 86
FAULT_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}
CLASSES = ["identical", "clear-error", "refused", "wrong", "crash", "skipped"]

# Estimated slowdown of a run relative to a native one, for splitting into parts:
# native x2, the footprint run, then each level (more eviction at lower limits).
RUN_FACTORS = {"native": 1.0, "fp": 1.3, 100: 1.4, 50: 1.9, 25: 2.6}


# ---------------------------------------------------------------- sizes and the shim's summary

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": MIB, "MB": MIB, "MIB": MIB,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}
_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?i?B|[KMGT])?"


def parse_size(text):
    """Bytes in '0 B', '4.0 KiB', '1.25 GiB', '70G', '123' (binary units)."""
    m = re.fullmatch(r"\s*" + _SIZE + r"\s*", text, flags=re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    unit = (m.group(2) or "").upper()
    return int(round(float(m.group(1)) * _UNITS[unit]))


def fmt_size(n):
    if n is None:
        return "-"
    for unit, div in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} B"


def summary_lines(stderr_text):
    return [l.strip() for l in stderr_text.splitlines() if l.strip().startswith("gmux: limit ")]


def summary_field(line, name):
    """The size after `name` in a summary line (`allocated` does not match `peak allocated`)."""
    prefix = r"(?<!peak )" if not name.startswith("peak") else ""
    m = re.search(prefix + r"\b" + re.escape(name) + r"\s+" + _SIZE, line, flags=re.IGNORECASE)
    if not m:
        return None
    return parse_size(m.group(1) + " " + (m.group(2) or "B"))


def footprint_from_stderr(stderr_text):
    """(bytes, source) from the shim's exit summaries: `peak allocated`, else the larger
    of `peak resident` and `allocated`. Several summaries (child processes): the largest."""
    best, source = None, None
    for line in summary_lines(stderr_text):
        v = summary_field(line, "peak allocated")
        src = "peak allocated"
        if v is None:
            cands = [x for x in (summary_field(line, "peak resident"), summary_field(line, "allocated")) if x is not None]
            v = max(cands) if cands else None
            src = "peak resident/allocated"
        if v is not None and (best is None or v > best):
            best, source = v, src
    return best, source


def limit_for(footprint, level):
    """level% of the footprint, rounded up to 2 MiB, at least 64 MiB."""
    raw = math.ceil(footprint * level / 100.0)
    return max(MIN_LIMIT, -(-raw // CHUNK) * CHUNK)


def limit_arg(nbytes):
    return f"{nbytes // MIB}M"


# ---------------------------------------------------------------- classification


def gmux_lines(stderr_text):
    return [l.strip() for l in stderr_text.splitlines() if l.strip().startswith("gmux:")]


def is_oversize_line(line):
    low = line.lower()
    return low.startswith("gmux:") and "needs" in low and "limit" in low


def spilled_commands(stderr_text):
    """Commands that ran over the limit with part of their memory mapped on the host, from
    the shim's exit summaries (0 when none did)."""
    found = [int(m.group(1)) for m in re.finditer(r"commands over the limit (\d+)", stderr_text)]
    return sum(found)


def is_refusal_line(line):
    return line.startswith("gmux:") and "not supported under gmux" in line


_INFO = ("gmux: limit ", "gmux: virtualizing device memory")


def relevant_line(stderr_text, max_len=220):
    """The first gmux line that explains a failure, else the last line of stderr."""
    lines = gmux_lines(stderr_text)
    for pick in (is_oversize_line, is_refusal_line,
                 lambda l: not l.startswith(_INFO) and "passes through" not in l):
        for l in lines:
            if pick(l):
                return l[:max_len]
    rest = [l.strip() for l in stderr_text.splitlines() if l.strip()]
    return ("stderr: " + rest[-1])[:max_len] if rest else ""


def classify(exit_code, timed_out, stderr_text, cmp_status):
    """(class, reason) of one gmux run. exit_code < 0 is death by that signal."""
    if timed_out:
        return "crash", "timeout"
    if exit_code == 0:
        if cmp_status in ("identical", "within-tol"):
            return "identical", cmp_status
        return "wrong", f"result {cmp_status}"
    if exit_code < 0 and -exit_code in {int(s) for s in FAULT_SIGNALS}:
        return "crash", f"signal {signal_name(-exit_code)}"
    clear = any(is_oversize_line(l) for l in gmux_lines(stderr_text))
    if clear or exit_code == OVERSIZE_EXIT:
        return "clear-error", f"exit {exit_code}" + (" (oversize message)" if clear else "")
    if exit_code > 0 and any(is_refusal_line(l) for l in gmux_lines(stderr_text)):
        return "refused", f"exit {exit_code} (a call gmux does not support, refused by name)"
    if exit_code < 0:
        return "crash", f"signal {signal_name(-exit_code)}"
    return "crash", f"exit {exit_code}"


def signal_name(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return str(num)


# ---------------------------------------------------------------- result comparison


def _np():
    import numpy

    return numpy


def load_npz(path):
    np = _np()
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def array_diff(a, b):
    """(max |a - b|, max |a - b| / max |a|); NaN in both places counts as equal."""
    np = _np()
    if a.shape != b.shape:
        return math.inf, math.inf
    if a.size == 0:
        return 0.0, 0.0
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        a64 = a.astype(np.complex128 if a.dtype.kind == "c" or b.dtype.kind == "c" else np.float64)
        b64 = b.astype(a64.dtype)
        both_nan = np.isnan(a64) & np.isnan(b64)
        d = np.abs(a64 - b64)
        d = np.where(both_nan, 0.0, d)
        d = np.nan_to_num(d, nan=math.inf)
        scale = np.nan_to_num(np.abs(a64), nan=0.0, posinf=0.0).max()
    else:
        d = np.abs(a.astype(np.float64) - b.astype(np.float64))
        scale = np.abs(a.astype(np.float64)).max()
    dmax = float(d.max())
    rel = dmax / scale if scale > 0 else (0.0 if dmax == 0 else math.inf)
    return dmax, float(rel)


def within(a, b, rtol, atol):
    np = _np()
    if a.shape != b.shape:
        return False
    if a.dtype.kind not in "fc":
        return False  # integers, booleans: exact only
    a64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    b64 = b.astype(a64.dtype)
    both_nan = np.isnan(a64) & np.isnan(b64)
    ok = np.abs(a64 - b64) <= atol + rtol * np.abs(a64)
    return bool(np.all(ok | both_nan))


def compare_results(ref_path, path, kind, tol=None, ref_diffs=None):
    """Compares a run's result with the reference. Returns a dict with `status`
    (identical, within-tol, differs, missing, unreadable), `worst` (the array that differs
    most), `max_abs`, `max_rel`, `diffs` ({array: max |a - b|} for arrays that differ),
    `detail`. `ref_diffs` ({array: native run-to-run max |a - b|}) widens the tolerance of
    those arrays to 10x that difference."""
    out = {"status": None, "worst": None, "max_abs": 0.0, "max_rel": 0.0, "diffs": {}, "detail": ""}
    if not os.path.exists(path):
        out.update(status="missing", detail="no result file")
        return out
    if kind == "cpp":
        try:
            a, b = open(ref_path, "rb").read(), open(path, "rb").read()
        except OSError as e:
            out.update(status="unreadable", detail=str(e))
            return out
        if a == b:
            out["status"] = "identical"
            return out
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        out.update(status="differs", worst="bytes", max_abs=math.inf, max_rel=math.inf,
                   detail=f"raw results differ from byte {first} (sizes {len(a)} and {len(b)})")
        return out
    try:
        ref, new = load_npz(ref_path), load_npz(path)
    except Exception as e:  # noqa: BLE001 -- any unreadable file is reported the same way
        out.update(status="unreadable", detail=f"{type(e).__name__}: {e}")
        return out
    if ref.keys() != new.keys():
        only = sorted(ref.keys() ^ new.keys())
        out.update(status="differs", worst="keys", max_abs=math.inf, max_rel=math.inf,
                   detail=f"arrays present in one result only: {','.join(only[:6])}")
        return out
    rtol, atol = tol if tol else (0.0, 0.0)
    status = "identical"
    for k in sorted(ref):
        a, b = ref[k], new[k]
        if a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes():
            continue
        d, r = array_diff(a, b)
        out["diffs"][k] = d
        if d >= out["max_abs"]:
            out["worst"] = k
        out["max_abs"], out["max_rel"] = max(out["max_abs"], d), max(out["max_rel"], r)
        k_atol = max(atol, 10.0 * (ref_diffs or {}).get(k, 0.0))
        if a.dtype == b.dtype and (tol or k_atol > 0) and within(a, b, rtol, k_atol):
            if status == "identical":
                status = "within-tol"
        else:
            status = "differs"
    out["status"] = status
    if out["worst"]:
        out["detail"] = f"{len(out['diffs'])} arrays differ, most {out['worst']} (max |diff| {out['max_abs']:.3g}, rel {out['max_rel']:.3g})"
    return out


# ---------------------------------------------------------------- nvidia-smi sampling


def parse_apps(text):
    """{pid: MiB} from `nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`."""
    used = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2:
            continue
        try:
            pid, mib = int(parts[0]), int(float(parts[1]))
        except ValueError:
            continue
        used[pid] = used.get(pid, 0) + mib
    return used


def parse_total(text):
    for line in text.splitlines():
        try:
            return int(float(line.strip()))
        except ValueError:
            continue
    return None


def children_map():
    """{ppid: [pid, ...]} for every process in /proc."""
    kids = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return kids
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat.rsplit(")", 1)[-1].split()
        if len(rest) >= 2:
            kids.setdefault(int(rest[1]), []).append(int(e))
    return kids


def descendants(root, kids):
    out, todo = {root}, [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


class Tracker:
    """The peak device memory of one run's process tree."""

    def __init__(self, root, group):
        self.root, self.group = root, group
        self.pids = {root}
        self.pid_peak = None  # MiB, from the per-process list
        self.total_peak = None  # MiB above the idle baseline, while this run ran alone
        self.alone = True

    def result(self):
        if self.pid_peak is not None:
            return self.pid_peak, "pid"
        if self.alone and self.total_peak is not None:
            return self.total_peak, "gpu-total"
        return None, None


class Sampler:
    """Polls nvidia-smi every `interval` seconds while any run is tracked."""

    def __init__(self, smi="nvidia-smi", interval=0.05):
        self.smi, self.interval = smi, interval
        self.available = shutil.which(smi) is not None
        self.lock = threading.Lock()
        self.trackers = []
        self.group_peaks = {}  # summed per-process peaks of a group's runs
        self.group_totals = {}  # the GPU's memory.used above the baseline while only that group ran
        self.stop = threading.Event()
        self.baseline = self._total() if self.available else None
        if self.available:
            threading.Thread(target=self._loop, daemon=True).start()

    def _query(self, what):
        try:
            p = subprocess.run([self.smi, what, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
            return p.stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    def _total(self):
        return parse_total(self._query("--query-gpu=memory.used"))

    def track(self, pid, group=None):
        t = Tracker(pid, group)
        with self.lock:
            self.trackers.append(t)
            if len(self.trackers) > 1:
                for x in self.trackers:
                    x.alone = False
        return t

    def untrack(self, t):
        with self.lock:
            if t in self.trackers:
                self.trackers.remove(t)

    def group_peak(self, group):
        """(MiB, source) for a group of runs (tenants)."""
        if group in self.group_peaks:
            return self.group_peaks[group], "pid"
        if group in self.group_totals:
            return self.group_totals[group], "gpu-total"
        return None, None

    def _loop(self):
        while not self.stop.is_set():
            with self.lock:
                active = list(self.trackers)
            if active:
                self.sample(active)
            self.stop.wait(self.interval)

    def sample(self, active):
        apps = parse_apps(self._query("--query-compute-apps=pid,used_memory"))
        one_group = len({t.group for t in active}) == 1 and active[0].group is not None
        total = self._total() if len(active) == 1 or one_group else None
        kids = children_map()
        groups = {}
        with self.lock:
            for t in active:
                t.pids |= descendants(t.root, kids)
                mine = [apps[p] for p in t.pids if p in apps]
                if mine:
                    used = sum(mine)
                    t.pid_peak = max(t.pid_peak or 0, used)
                    if t.group is not None:
                        groups[t.group] = groups.get(t.group, 0) + used
                if total is not None and self.baseline is not None and t.alone:
                    t.total_peak = max(t.total_peak or 0, total - self.baseline)
            for g, used in groups.items():
                self.group_peaks[g] = max(self.group_peaks.get(g, 0), used)
            if one_group and total is not None and self.baseline is not None:
                g = active[0].group
                self.group_totals[g] = max(self.group_totals.get(g, 0), total - self.baseline)


# ---------------------------------------------------------------- running one command


class Budget:
    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds if seconds else None

    def left(self):
        return math.inf if self.deadline is None else self.deadline - time.monotonic()


def execute(argv, env, log_base, timeout, sampler, group=None):
    """Runs argv in its own session; returns (exit code or -signal, timed_out, seconds,
    smi MiB, smi source). stdout and stderr go to log_base.stdout / .stderr."""
    t0 = time.monotonic()
    timed_out = False
    with open(log_base + ".stdout", "wb") as out, open(log_base + ".stderr", "wb") as err:
        try:
            p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        except OSError as e:
            err.write(f"run.py: cannot start {argv[0]}: {e}\n".encode())
            return 127, False, 0.0, None, None
        tracker = sampler.track(p.pid, group) if sampler and sampler.available else None
        try:
            rc = p.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(p.pid, signal.SIGTERM)
            try:
                rc = p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _kill_group(p.pid, signal.SIGKILL)
                rc = p.wait()
        finally:
            if tracker:
                sampler.untrack(tracker)
        _kill_group(p.pid, signal.SIGKILL)  # what the program left behind in its session
    smi, source = tracker.result() if tracker else (None, None)
    return rc, timed_out, time.monotonic() - t0, smi, source


def _kill_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def read_text(path, limit=4 << 20):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return ""
    if len(data) > limit:
        data = data[: limit // 4] + b"\n...\n" + data[-(limit * 3 // 4):]
    return data.decode("utf-8", "replace")


# ---------------------------------------------------------------- the corpus runner


class Runner:
    def __init__(self, args, progs):
        self.a = args
        self.progs = progs
        self.work = os.path.abspath(args.work)
        self.logs = os.path.join(self.work, "logs")
        self.results = os.path.join(self.work, "results")
        for d in (self.logs, self.results):
            os.makedirs(d, exist_ok=True)
        self.budget = Budget(args.budget)
        self.sampler = None if args.dry_run else Sampler(args.smi)
        self.lock = threading.Lock()
        self.runs = []
        self.records = {}
        self.log_files = []
        self.groups = []

    # -- commands

    def base_cmd(self, prog):
        if prog["kind"] == "py":
            return [sys.executable, os.path.join(self.a.progs, prog["cmd"][0]), *prog["cmd"][1:]]
        return [os.path.join(os.path.abspath(self.a.build), prog["cmd"][0]), *prog["cmd"][1:]]

    def env_for(self, prog, out_path, gmux):
        env = dict(os.environ)
        for k in ("GMUX_DAEMON", "GMUX_MEM_LIMIT", "GMUX_TENANT", "GMUX_PRIORITY"):
            env.pop(k, None)
        env.update(
            PYTHONUNBUFFERED="1",
            CUBLAS_WORKSPACE_CONFIG=":4096:8",
            XLA_PYTHON_CLIENT_PREALLOCATE="false",
            TORCHINDUCTOR_CACHE_DIR=os.path.join(self.work, "cache", "inductor", prog["name"]),
            GMUX_COMPAT_OUT=out_path,
        )
        env.update(prog["env"])
        if gmux:
            env["GMUX_LOG"] = self.a.gmux_log
        return env

    def result_path(self, prog, label):
        d = os.path.join(self.results, prog["name"])
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, label + (".bin" if prog["kind"] == "cpp" else ".npz"))

    def gmux_run_argv(self, prog, limit):
        return [self.a.gmux, "run", "--standalone", "--mem-limit", limit, "--", *self.base_cmd(prog)]

    # -- one run

    def run_one(self, prog, label, argv, gmux, level=None, limit_bytes=None, group=None, extra_env=None, timeout=None):
        rec = {"program": prog["name"], "label": label, "level": level, "limit_bytes": limit_bytes,
               "argv": argv, "exit": None, "timed_out": False, "seconds": None, "class": None, "reason": "",
               "smi_peak_mib": None, "smi_source": None, "over_limit": None, "line": "", "gmux_summary": "",
               "stdout": f"logs/{prog['name']}.{label}.stdout", "stderr": f"logs/{prog['name']}.{label}.stderr"}
        out_path = self.result_path(prog, label)
        for p in (out_path, out_path + ".tmp"):
            if os.path.exists(p):
                os.remove(p)
        left = self.budget.left()
        if self.a.dry_run:
            rec.update(**{"class": "skipped" if gmux else None}, reason="dry run")
            print(f"[dry-run] {prog['name']:<26} {label:<8} {' '.join(argv)}", flush=True)
            return rec
        if left < max(self.a.min_run, 1.5 * prog["est"]):
            rec.update(**{"class": "skipped" if gmux else None}, reason="time budget spent")
            with self.lock:
                self.runs.append(rec)
            return rec
        env = self.env_for(prog, out_path, gmux)
        if extra_env:
            env.update(extra_env)
        log_base = os.path.join(self.logs, f"{prog['name']}.{label}")
        timeout = timeout or self.a.timeout
        clamped = left < timeout
        rc, timed_out, secs, smi, src = execute(argv, env, log_base, min(timeout, left), self.sampler, group)
        with self.lock:
            self.log_files += [log_base + ".stdout", log_base + ".stderr"]
        rec.update(exit=rc, timed_out=timed_out, seconds=round(secs, 2), smi_peak_mib=smi, smi_source=src)
        if timed_out and clamped:
            # Stopped by the time budget, not by its own timeout: not a verdict on gmux.
            rec.update(exit=None, timed_out=False, reason="stopped at the end of the time budget",
                       **{"class": "skipped" if gmux else None})
        stderr = read_text(log_base + ".stderr")
        sums = summary_lines(stderr)
        rec["gmux_summary"] = sums[-1] if sums else ""
        rec["result"] = out_path
        with self.lock:
            self.runs.append(rec)
        word = "timeout" if timed_out else f"rc={rc}"
        print(f"  {prog['name']:<26} {label:<8} {word:<8} {secs:7.1f}s" + (f" smi={smi}MiB" if smi is not None else ""), flush=True)
        return rec

    def judge(self, prog, rec, ref_path, ref_diffs):
        """Classifies a finished gmux run against the native reference."""
        if rec["class"] == "skipped" or rec["exit"] is None:
            return
        stderr = read_text(os.path.join(self.work, rec["stderr"]))
        cmp = compare_results(ref_path, rec["result"], prog["kind"], prog["tol"], ref_diffs) if rec["exit"] == 0 else {"status": "not compared"}
        rec["cmp"] = cmp
        cls, reason = classify(rec["exit"], rec["timed_out"], stderr, cmp["status"])
        rec["class"], rec["reason"] = cls, reason
        if cls == "wrong":
            rec["line"] = cmp.get("detail") or reason
            extra = relevant_line(stderr)
            if extra.startswith("gmux:"):
                rec["line"] += " | " + extra
        elif cls != "identical":
            rec["line"] = relevant_line(stderr)
        rec["spilled"] = spilled_commands(stderr)
        if any(is_refusal_line(l) for l in gmux_lines(stderr)):
            rec["refused"] = sorted({l.split()[1] for l in gmux_lines(stderr) if is_refusal_line(l)})
        limit = rec["limit_bytes"]
        if rec["smi_peak_mib"] is not None and limit is not None:
            rec["allowed_mib"] = limit // MIB + self.outside(prog) + self.a.overhead
            rec["over_limit"] = rec["smi_peak_mib"] > rec["allowed_mib"]

    def outside(self, prog):
        """MiB the program holds natively outside its allocations (see `prepare`), or the
        context's size where that was not measured."""
        return self.records.get(prog["name"], {}).get("outside_mib", self.a.context_mib)

    # -- one program

    def prepare(self, prog):
        """Native runs and the footprint run. Returns the program's record."""
        name = prog["name"]
        rec = {"name": name, "kind": prog["kind"], "covers": prog["covers"], "tol": prog["tol"], "env": prog["env"],
               "est_s": prog["est"], "status": "ok", "deterministic": None, "native_diffs": {}, "footprint_bytes": None,
               "footprint_source": None, "note": ""}
        self.records[name] = rec
        base = self.base_cmd(prog)
        if prog["kind"] == "cpp" and not os.path.exists(base[0]) and not self.a.dry_run:
            rec.update(status="build-missing", note=f"{base[0]} is missing (the build failed or did not run)")
            return rec
        n1 = self.run_one(prog, "native1", base, False)
        if not self.a.dry_run and not (n1["exit"] == 0 and os.path.exists(n1.get("result", ""))):
            if n1["exit"] is None:
                rec.update(status="skipped", note=n1["reason"])
                return rec
            else:
                why = f"exit {n1['exit']}" + (" (timeout)" if n1["timed_out"] else "") + ("" if n1["exit"] != 0 else ", no result")
            line = relevant_line(read_text(os.path.join(self.work, n1["stderr"])))
            rec.update(status="native-failed", note=f"native run: {why}" + (f"; {line}" if line else ""))
            return rec
        n2 = self.run_one(prog, "native2", base, False)
        fp = self.run_one(prog, "fp", self.gmux_run_argv(prog, self.a.fp_limit), True, level="fp",
                          limit_bytes=parse_size(self.a.fp_limit))
        if self.a.dry_run:
            return rec
        if fp["exit"] is None:
            rec.update(status="skipped", note=f"footprint run: {fp['reason']}")
            return rec
        rec["native_seconds"] = [n1["seconds"], n2["seconds"]]
        rec["native_smi_mib"] = [n1["smi_peak_mib"], n2["smi_peak_mib"]]
        rec["reference"] = n1["result"]
        if n2["exit"] == 0:
            c = compare_results(n1["result"], n2["result"], prog["kind"], prog["tol"])
            rec["native_compare"] = c
            if c["status"] in ("identical", "within-tol"):
                rec["deterministic"] = True
                rec["bitwise_deterministic"] = c["status"] == "identical"
            else:
                rec["deterministic"] = False
                rec["native_diffs"] = c["diffs"]
                rec["note"] = f"nondeterministic natively: {c['detail']}"
        else:
            rec["note"] = f"second native run: exit {n2['exit']}"
        stderr = read_text(os.path.join(self.work, fp["stderr"]))
        fpb, src = footprint_from_stderr(stderr)
        if fpb is None and n1["smi_peak_mib"]:
            est = (n1["smi_peak_mib"] - self.a.context_mib) * MIB
            if est > MIN_LIMIT:
                fpb, src = est, f"native nvidia-smi peak - {self.a.context_mib} MiB"
        rec["footprint_bytes"], rec["footprint_source"] = fpb, src
        # Device memory the program holds natively beyond its allocations: the context,
        # kernels' code, libraries' own buffers. No limit can bring that down.
        smis = [m for m in rec["native_smi_mib"] if m is not None]
        if fpb is not None and smis:
            rec["outside_mib"] = max(0, max(smis) - fpb // MIB)
        self.judge(prog, fp, n1["result"], rec["native_diffs"])
        return rec

    def run_program(self, prog):
        rec = self.prepare(prog)
        if self.a.dry_run:
            for level in self.a.levels:
                self.run_one(prog, f"l{level}", self.gmux_run_argv(prog, f"<{level}% of footprint>"), True, level=level)
            return
        if rec["status"] != "ok":
            return
        if rec["footprint_bytes"] is None:
            rec["status"], rec["note"] = "no-footprint", "no gmux summary line and no nvidia-smi reading"
            return
        for level in self.a.levels:
            limit = limit_for(rec["footprint_bytes"], level)
            r = self.run_one(prog, f"l{level}", self.gmux_run_argv(prog, limit_arg(limit)), True, level=level, limit_bytes=limit)
            self.judge(prog, r, rec["reference"], rec["native_diffs"])

    def run_all(self):
        order = sorted(self.progs, key=lambda p: -p["est"])
        if self.a.jobs <= 1 or self.a.dry_run:
            for p in order:
                self.run_program(p)
            return
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.a.jobs) as ex:
            for f in [ex.submit(self.run_program, p) for p in order]:
                f.result()

    # -- tenants

    def run_tenants(self, groups):
        by_name = {p["name"]: p for p in self.progs}
        flat = [by_name[n] for g in groups for n in g]
        # Natives and footprints first (in parallel), then each group under one daemon.
        if self.a.jobs <= 1 or self.a.dry_run:
            for p in flat:
                self.prepare(p)
        else:
            with concurrent.futures.ThreadPoolExecutor(max_workers=self.a.jobs) as ex:
                list(ex.map(self.prepare, flat))
        for gi, names in enumerate(groups, 1):
            self.run_group(gi, [by_name[n] for n in names])

    def run_group(self, gi, progs):
        label = f"tenants{gi}"
        ready = [p for p in progs if self.records[p["name"]]["status"] == "ok" and self.records[p["name"]]["footprint_bytes"]]
        group = {"group": gi, "programs": [p["name"] for p in progs], "hbm_bytes": None, "peak_mib": None, "over_limit": None, "note": ""}
        self.groups.append(group)
        if self.a.dry_run:
            print(f"[dry-run] group {gi}: gmux daemon --hbm <half of summed footprints> --socket <sock> {self.a.daemon_args}", flush=True)
            for p in progs:
                self.run_one(p, label, [self.a.gmux, "run", "--tenant", p["name"], "--", *self.base_cmd(p)], True, level="tenants")
            return
        if len(ready) < len(progs):
            group["note"] = "not run: " + ", ".join(p["name"] for p in progs if p not in ready) + " failed natively or has no footprint"
        if len(ready) < 2:
            return
        hbm = max(MIN_LIMIT, -(-sum(self.records[p["name"]]["footprint_bytes"] for p in ready) // 2 // CHUNK) * CHUNK)
        group["hbm_bytes"] = hbm
        sock = os.path.join(self.work, f"gmuxd-{gi}.sock")
        if os.path.exists(sock):
            os.remove(sock)
        env = dict(os.environ, GMUX_SOCKET=sock, GMUX_LOG=self.a.gmux_log)
        dlog = os.path.join(self.logs, f"{label}.daemon.log")
        self.log_files.append(dlog)
        dargv = [self.a.gmux, "daemon", "--hbm", limit_arg(hbm), "--socket", sock, *self.a.daemon_args.split()]
        group["daemon_argv"] = dargv
        with open(dlog, "wb") as f:
            daemon = subprocess.Popen(dargv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        t0 = time.monotonic()
        while not os.path.exists(sock) and daemon.poll() is None and time.monotonic() - t0 < 15:
            time.sleep(0.05)
        if not os.path.exists(sock):
            group["note"] = f"gmux daemon did not start (exit {daemon.poll()}); see logs/{label}.daemon.log"
            _kill_group(daemon.pid, signal.SIGKILL)
            daemon.wait()
            return
        print(f"  group {gi}: gmuxd --hbm {limit_arg(hbm)} with {', '.join(p['name'] for p in ready)}", flush=True)
        ps_log = os.path.join(self.logs, f"{label}.ps")
        self.log_files.append(ps_log)

        def ps_later():
            time.sleep(3)
            try:
                p = subprocess.run([self.a.gmux, "ps"], capture_output=True, env=env, timeout=10)
                with open(ps_log, "wb") as f:
                    f.write(p.stdout + p.stderr)
            except (OSError, subprocess.SubprocessError):
                pass

        threading.Thread(target=ps_later, daemon=True).start()
        tenant_env = {"GMUX_SOCKET": sock}
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(ready)) as ex:
            futs = {p["name"]: ex.submit(self.run_one, p, label, [self.a.gmux, "run", "--tenant", p["name"], "--", *self.base_cmd(p)],
                                         True, "tenants", None, label, tenant_env, self.a.tenant_timeout) for p in ready}
            recs = {n: f.result() for n, f in futs.items()}
        for p in ready:
            r = recs[p["name"]]
            r["limit_bytes"] = hbm  # the shared budget; per-run over-limit: one tenant above all of it
            self.judge(p, r, self.records[p["name"]]["reference"], self.records[p["name"]]["native_diffs"])
        try:
            subprocess.run([self.a.gmux, "stop"], env=env, capture_output=True, timeout=15)
        except (OSError, subprocess.SubprocessError):
            pass
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            _kill_group(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill_group(daemon.pid, signal.SIGKILL)
                daemon.wait()
        group["daemon_exit"] = daemon.returncode
        peak, source = self.sampler.group_peak(label) if self.sampler else (None, None)
        group["peak_mib"], group["peak_source"] = peak, source
        if peak is not None:
            group["over_limit"] = peak > hbm / MIB + sum(self.outside(p) + self.a.overhead for p in ready)

    # -- output

    def write(self, tag, elapsed, header):
        os.makedirs(self.a.out, exist_ok=True)
        progs = [self.records[p["name"]] for p in self.progs if p["name"] in self.records]
        doc = {"header": header, "elapsed_s": round(elapsed, 1), "overhead_mib": self.a.overhead,
               "levels": self.a.levels, "fp_limit": self.a.fp_limit, "programs": progs,
               "runs": sorted(self.runs, key=lambda r: (r["program"], str(r["label"]))), "tenant_groups": self.groups}
        text = summary_text(doc)
        with open(os.path.join(self.a.out, f"{tag}.json"), "w") as f:
            json.dump(doc, f, indent=1, default=str)
        with open(os.path.join(self.a.out, f"{tag}.txt"), "w") as f:
            f.write(text)
        self.pack_logs(os.path.join(self.a.out, f"{tag}-logs.tar.gz"))
        return text

    def pack_logs(self, path, per_file=1 << 20, total=48 << 20):
        """The runs' stdout/stderr, each cut to its first 256 KiB and last 768 KiB, at most
        `total` bytes before compression (the device tool brings back 16 MiB per file)."""
        written = 0
        with tarfile.open(path, "w:gz") as tar:
            for f in sorted(set(self.log_files)):
                if not os.path.exists(f):
                    continue
                data = open(f, "rb").read()
                if len(data) > per_file:
                    data = data[: per_file // 4] + b"\n... cut by run.py ...\n" + data[-(per_file * 3 // 4):]
                if written + len(data) > total:
                    data = b"... left out: the archive is full ...\n"
                info = tarfile.TarInfo("logs/" + os.path.basename(f))
                info.size, info.mtime = len(data), int(time.time())
                tar.addfile(info, io.BytesIO(data))
                written += len(data)


def level_name(level):
    return {"fp": "fp", "tenants": "tenants"}.get(level, f"{level}%")


def summary_text(doc):
    runs = [r for r in doc["runs"] if r["class"] is not None]
    levels = ["fp"] + list(doc["levels"]) + (["tenants"] if any(r["level"] == "tenants" for r in runs) else [])
    lines = [doc["header"], f"levels: fp = --mem-limit {doc['fp_limit']} (the footprint run), then % of each footprint; "
             f"over-limit = nvidia-smi peak > limit + what the program holds natively outside its allocations + {doc['overhead_mib']} MiB; {doc['elapsed_s']} s"]
    progs = doc["programs"]
    bad = [p for p in progs if p["status"] != "ok"]
    nondet = [p for p in progs if p.get("deterministic") is False]
    lines.append(f"programs: {len(progs)}, run at every level {len(progs) - len(bad)}" + (f", nondeterministic {len(nondet)}" if nondet else ""))
    for p in bad:
        lines.append(f"  NOT RUN {p['name']}: {p['status']}: {p['note']}")
    for p in nondet:
        lines.append(f"  NONDETERMINISTIC {p['name']}: {p['note']}")
    for g in doc.get("tenant_groups", []):
        lines.append(f"  tenants group {g['group']}: {', '.join(g['programs'])}; hbm {fmt_size(g['hbm_bytes'])}; "
                     f"peak {g['peak_mib'] if g['peak_mib'] is not None else '-'} MiB; over-limit {g['over_limit']}"
                     + (f"; {g['note']}" if g["note"] else ""))
    lines.append("")
    head = f"{'level':<9}{'runs':>5}" + "".join(f"{c:>13}" for c in CLASSES) + f"{'over-limit':>12}{'host-mapped':>13}"
    lines.append(head)
    for lv in levels:
        rs = [r for r in runs if r["level"] == lv]
        if not rs:
            continue
        counts = "".join(f"{sum(r['class'] == c for r in rs):>13}" for c in CLASSES)
        over = sum(bool(r.get("over_limit")) for r in rs)
        spilled = sum(r["class"] == "identical" and bool(r.get("spilled")) for r in rs)
        lines.append(f"{level_name(lv):<9}{len(rs):>5}{counts}{over:>12}{spilled:>13}")
    lines.append("host-mapped: identical runs in which commands over the limit ran with part of their memory mapped on the host")
    spills = [r for r in runs if r["class"] == "identical" and r.get("spilled")]
    if spills:
        lines.append("")
        lines.append("identical with commands over the limit (program, level, commands, seconds against the native run's):")
        native = {}
        for r in doc["runs"]:
            if r["label"] == "native1" and r.get("seconds") is not None:
                native.setdefault(r["program"], r["seconds"])
        for r in sorted(spills, key=lambda r: (r["program"], str(r["level"]))):
            base = native.get(r["program"])
            ratio = f"{r['seconds']:.1f} s vs {base:.1f} s" if base else f"{r['seconds']:.1f} s"
            lines.append(f"  {r['program']:<26} {level_name(r['level']):<8} {r['spilled']:>6}  {ratio}")
    odd = [r for r in runs if r["class"] not in ("identical",) or r.get("over_limit")]
    if odd:
        lines.append("")
        lines.append("not identical or over the limit (program, level, class, first relevant line):")
        order = {lv: i for i, lv in enumerate(levels)}
        for r in sorted(odd, key=lambda r: (r["program"], order.get(r["level"], 99))):
            extra = ""
            if r.get("over_limit"):
                extra = f" [over limit: {r['smi_peak_mib']} MiB > {r.get('allowed_mib')} MiB allowed]"
            text = f"[{r['reason']}] {r['line']}" if r["line"] and r["class"] != "wrong" else (r["line"] or r["reason"])
            lines.append(f"  {r['program']:<26} {level_name(r['level']):<8} {r['class']:<12} {text}{extra}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- parts


def estimate(prog, levels):
    runs = 2 * RUN_FACTORS["native"] + RUN_FACTORS["fp"] + sum(RUN_FACTORS.get(l, 2.0) for l in levels)
    return prog["est"] * runs


def assign_parts(progs, m, levels):
    """{name: part (1..m)}: the longest program first, each to the part with the least
    estimated time so far (ties to the lower part). Deterministic."""
    loads = [0.0] * m
    out = {}
    for p in sorted(progs, key=lambda p: (-estimate(p, levels), p["name"])):
        i = min(range(m), key=lambda j: (loads[j], j))
        loads[i] += estimate(p, levels)
        out[p["name"]] = i + 1
    return out


def parse_part(text):
    m = re.fullmatch(r"(\d+)/(\d+)", text or "")
    if not m or not (1 <= int(m.group(1)) <= int(m.group(2))):
        raise argparse.ArgumentTypeError(f"--part wants N/M with 1 <= N <= M, not {text!r}")
    return int(m.group(1)), int(m.group(2))


def select(args, table):
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in {p["name"] for p in table}]
        if unknown:
            sys.exit(f"run.py: unknown program(s): {', '.join(unknown)}")
        return [p for p in table if p["name"] in names]
    if args.part:
        n, m = args.part
        parts = assign_parts(table, m, args.levels)
        return [p for p in table if parts[p["name"]] == n]
    return list(table)


def tenant_groups(args, table):
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        return [names[i : i + 4] for i in range(0, len(names), 4)]
    return [list(g) for g in corpus.TENANT_GROUPS]


def load_table(path):
    if not path:
        return corpus.PROGRAMS
    with open(path) as f:
        table = json.load(f)
    for p in table:
        p.setdefault("env", {})
        p.setdefault("tol", None)
        p.setdefault("est", 5)
        p.setdefault("covers", "")
        if p["tol"] is not None:
            p["tol"] = tuple(p["tol"])
    return table


# ---------------------------------------------------------------- main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gmux", default="./target/release/gmux", help="the gmux binary")
    ap.add_argument("--out", default="./out/compat", help="where the JSON, summary and log archive go")
    ap.add_argument("--work", default="/tmp/gmux-compat", help="scratch: logs, results, caches")
    ap.add_argument("--build", default=None, help="the built C++ programs (default WORK/build)")
    ap.add_argument("--progs", default=os.path.join(HERE, "progs"), help=argparse.SUPPRESS)
    ap.add_argument("--programs", default=None, help="a JSON program table instead of programs.py (tests)")
    ap.add_argument("--part", type=parse_part, default=None, help="N/M: run part N of M (balanced by estimated time)")
    ap.add_argument("--only", default=None, help="comma-separated program names")
    ap.add_argument("--levels", default="100,50,25", help="limits as %% of the footprint")
    ap.add_argument("--tenants", action="store_true", help="run groups of 4 programs as tenants of one gmuxd")
    ap.add_argument("--daemon-args", default="--timeslice 50ms", help="extra arguments of `gmux daemon` in --tenants")
    ap.add_argument("--jobs", type=int, default=1, help="programs run at once (each program's runs stay in order)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per run")
    ap.add_argument("--tenant-timeout", type=float, default=300.0, help="seconds per tenant run in --tenants")
    ap.add_argument("--budget", type=float, default=0.0, help="seconds for everything (0: none); runs that no longer fit are skipped")
    ap.add_argument("--min-run", type=float, default=15.0, help="do not start a run with less budget than this")
    ap.add_argument("--overhead", type=int, default=64, help="MiB allowed above the limit and what the program holds natively outside its allocations (context, kernels' code)")
    ap.add_argument("--context-mib", type=int, default=512, help="context size subtracted from nvidia-smi when no summary gives the footprint")
    ap.add_argument("--fp-limit", default="70G", help="the footprint run's --mem-limit")
    ap.add_argument("--gmux-log", default="info", help="GMUX_LOG of gmux runs")
    ap.add_argument("--smi", default="nvidia-smi", help="the nvidia-smi command")
    ap.add_argument("--tag", default=None, help="name of the output files (default from --part / --tenants)")
    ap.add_argument("--list", action="store_true", help="print the programs and parts, run nothing")
    ap.add_argument("--print-cpp", action="store_true", help="print the C++ binaries the selection needs, run nothing")
    ap.add_argument("--dry-run", action="store_true", help="print the runs, run nothing")
    ap.add_argument("--self-test", action="store_true", help="unit tests and an end-to-end run with stand-ins")
    a = ap.parse_args(argv)
    try:
        a.levels = [int(x) for x in a.levels.split(",") if x.strip()]
    except ValueError:
        ap.error("--levels wants integers, e.g. 100,50,25")
    if a.build is None:
        a.build = os.path.join(a.work, "build")
    if a.tag is None:
        a.tag = "tenants" if a.tenants else (f"part{a.part[0]}of{a.part[1]}" if a.part else ("only" if a.only else "all"))
    return a


def main(argv=None):
    a = parse_args(argv)
    if a.self_test:
        import selftest

        return selftest.main()
    table = load_table(a.programs)
    if a.tenants:
        groups = tenant_groups(a, table)
        names = {n for g in groups for n in g}
        unknown = names - {p["name"] for p in table}
        if unknown:
            sys.exit(f"run.py: unknown program(s): {', '.join(sorted(unknown))}")
        chosen = [p for p in table if p["name"] in names]
    else:
        chosen = select(a, table)
    if a.print_cpp:
        print(" ".join(sorted({p["cmd"][0] for p in chosen if p["kind"] == "cpp"})))
        return 0
    if a.list:
        m = a.part[1] if a.part else 4
        parts = assign_parts(table, m, a.levels)
        loads = {}
        for p in table:
            loads[parts[p["name"]]] = loads.get(parts[p["name"]], 0) + estimate(p, a.levels)
        print(f"{'program':<26}{'kind':<5}{'part':>6}{'est s':>7}{'runs s':>8}  tolerance  covers")
        for p in sorted(table, key=lambda p: (parts[p["name"]], p["name"])):
            tol = "exact" if not p["tol"] else f"{p['tol'][0]:g}/{p['tol'][1]:g}"
            print(f"{p['name']:<26}{p['kind']:<5}{parts[p['name']]:>4}/{m}{p['est']:>7}{estimate(p, a.levels):>8.0f}  {tol:<9}  {p['covers']}")
        for i in range(1, m + 1):
            print(f"part {i}/{m}: {sum(parts[p['name']] == i for p in table)} programs, about {loads.get(i, 0):.0f} s of runs"
                  f" ({loads.get(i, 0) / max(1, a.jobs):.0f} s with --jobs {a.jobs})")
        return 0
    if not chosen:
        print("run.py: no programs selected")
        return 2
    if not a.dry_run and not os.path.exists(a.gmux):
        sys.exit(f"run.py: no gmux binary at {a.gmux} (give --gmux)")
    a.gmux = os.path.abspath(a.gmux) if os.path.exists(a.gmux) else a.gmux
    runner = Runner(a, chosen)
    t0 = time.monotonic()
    what = "tenants" if a.tenants else (f"part {a.part[0]}/{a.part[1]}" if a.part else ("only" if a.only else "all"))
    print(f"gmux compat: {what}: {len(chosen)} programs, levels {','.join(map(str, a.levels))}, jobs {a.jobs}, "
          f"timeout {a.timeout:.0f}s, budget {a.budget:.0f}s", flush=True)
    if a.tenants:
        runner.run_tenants(tenant_groups(a, table))
    else:
        runner.run_all()
    if a.dry_run:
        return 0
    header = (f"== gmux compatibility corpus: {what}, {len(chosen)} programs, gmux {a.gmux}, "
              f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    text = runner.write(a.tag, time.monotonic() - t0, header)
    if runner.sampler:
        runner.sampler.stop.set()
    print()
    print(text, end="", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
