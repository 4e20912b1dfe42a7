"""MSched micro-benchmark tenant (section 7.1): a streaming vector add or a matmul with a
fixed footprint of device memory, measured over a shared wall-clock window.

    tenant.py --kind vecadd --gib 8 --duration 30 [--start-at T] [--ready-dir D --ready-count N [--settle S]] [--out F] [--verify]
    tenant.py --kind matmul --gib 8 --n 4096 --duration 30 [--start-at T] [--out F] [--verify]
    tenant.py --kind matmul --gib 0.05 --n 256 --duration 2 --verify --device cpu   # dry run

vecadd: three float32 vectors a, b, c of gib/3 each; one unit = torch.add(a, b, out=c).
matmul: 3m float32 n x n matrices (m = footprint / (4 n^2) / 3, at least 1 triple); one unit =
torch.mm(A_k, B_k, out=C_k), k cycling over the triples, so m units sweep the whole footprint.
TF32 is off. The script synchronises every --sync-every units (default 1 vecadd, 8 matmul) and
counts the units of each sync point whose completion time falls in [start_at, start_at +
duration]. Without --start-at the window opens --warmup seconds after setup (allocation and
first unit). Units run before the window are the warm-up; the script exits at the window's end.

Inputs hold small integers in [-2, 2], so every result is exact whatever the summation order,
and --verify checks every tensor against values regenerated from the fill pattern
(verify=ok|mismatch|skipped; exit 3 on mismatch).

This file also holds what rt_infer.py and be_train.py share: the measurement window, SIGTERM
handling (stop, report what was measured, exit 0) and the key=value / JSON report.
"""

import argparse
import json
import math
import os
import signal
import sys
import time


class Interrupted(BaseException):
    """SIGTERM or SIGINT during setup: skip the rest of it and report."""


# Installed before the slow `import torch`, so that a SIGTERM at any point ends in a report.
# It records the time of the first signal; it raises Interrupted only inside Window.setup().
_signal = {"t": None, "raise": False}


def _on_signal(signum, frame):
    if _signal["t"] is None:
        _signal["t"] = time.monotonic()
    if _signal["raise"]:
        _signal["raise"] = False
        raise Interrupted


signal.signal(signal.SIGTERM, _on_signal)
signal.signal(signal.SIGINT, _on_signal)

import torch  # noqa: E402

import torch_check as tc  # noqa: E402

# ---------------------------------------------------------------- shared plumbing


class _Setup:
    def __enter__(self):
        _signal["raise"] = True

    def __exit__(self, kind, value, tb):
        _signal["raise"] = False
        return kind is Interrupted


class Window:
    """The measurement window [start, end] on the monotonic clock, and the stop flag.

    During setup a SIGTERM (or SIGINT) interrupts it; afterwards it only sets the flag,
    which the work loops look at between units, so a process suspended for a long time at
    a kernel launch still stops cleanly and reports what it measured.
    """

    def __init__(self, args):
        self.duration = args.duration
        self.warmup = args.warmup
        self.start_at = args.start_at  # UNIX time, or None: warmup seconds after begin()
        self.ready_dir = args.ready_dir
        self.ready_count = args.ready_count
        self.settle = args.settle
        self.start = self.end = math.inf
        self.late_start_s = 0.0

    @property
    def stopped(self):
        return _signal["t"] is not None

    @property
    def stop_t(self):
        return math.inf if _signal["t"] is None else _signal["t"]

    def setup(self):
        """`with window.setup():` a SIGTERM inside the body ends it early, and execution goes
        on after it (the loop then sees the flag). The body starts with window.check()."""
        return _Setup()

    def check(self):
        """Inside setup: skip the rest of it if a signal came already (during the imports)."""
        if self.stopped:
            raise Interrupted

    def begin(self):
        """Setup is done: fix the window on the monotonic clock. With --ready-dir, first
        wait until --ready-count processes are ready there; the window then opens
        --settle seconds after the last became ready (or at --start-at if later)."""
        if self.ready_dir:
            last = ready_barrier(self.ready_dir, self.ready_count, lambda: self.stopped)
            self.start_at = max(self.start_at or 0.0, last + self.settle)
        now = time.monotonic()
        if self.start_at is None:
            self.start_at = time.time() + self.warmup
        self.start = self.start_at - time.time() + now
        self.end = self.start + self.duration
        self.late_start_s = max(0.0, now - self.start)

    def inside(self, t):
        return self.start <= t <= self.end

    def over(self, t):
        return self.stopped or t > self.end

    def seconds(self):
        """The part of the window that was measured (less than duration if stopped early)."""
        if self.start == math.inf:
            return 0.0
        return max(0.0, min(self.end, self.stop_t) - self.start)

    def fields(self, report):
        report["start_at"] = self.start_at
        report["duration"] = self.duration
        report["seconds"] = self.seconds()
        report["late_start_s"] = self.late_start_s
        report["interrupted"] = int(self.stopped)


class Report(dict):
    """Fields printed as key=value lines and, with --out, written as one JSON object."""

    def emit(self, out):
        fields = {k: round(v, 6) if isinstance(v, float) else v for k, v in self.items()}
        for key, value in fields.items():
            tc.kv(key, "nan" if value is None else value)
        if out:
            with open(out, "w") as f:
                json.dump(fields, f)
                f.write("\n")


def ready_barrier(folder, count, stopped):
    """Marks this process ready in `folder` and waits until `count` are; returns the UNIX
    time the last one became ready (the same for every process that waits)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{os.getpid()}.ready"), "w"):
        pass
    while True:
        marks = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".ready")]
        if len(marks) >= count or stopped():
            return max(os.stat(m).st_mtime for m in marks)
        time.sleep(0.02)


def window_args(p):
    p.add_argument("--start-at", type=float, help="UNIX time the window opens (default: warm-up)")
    p.add_argument("--ready-dir", help="wait after setup until --ready-count processes are ready in this folder; the window opens --settle seconds after the last")
    p.add_argument("--ready-count", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--settle", type=float, default=1.0, help="with --ready-dir: seconds the processes run together, all set up, before the window opens")
    p.add_argument("--duration", type=float, default=10.0, help="window length in seconds")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of warm-up without --start-at")
    p.add_argument("--out", help="also write the results as one JSON object to this file")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help=argparse.SUPPRESS)


def open_device(args, report):
    """Point torch_check (and so tc.sync, tc.resnet50) at the device; False if there is none."""
    tc.DEVICE = args.device
    if tc.DEVICE == "cuda" and not torch.cuda.is_available():
        tc.kv("error", "no CUDA device")
        return False
    name = torch.cuda.get_device_name(0) if tc.DEVICE == "cuda" else "cpu"
    report["device"] = name.replace(" ", "_")
    return True


def footprint(report):
    """footprint_bytes: the most device memory PyTorch's allocator held (0 on the CPU)."""
    report["footprint_bytes"] = torch.cuda.max_memory_reserved() if tc.DEVICE == "cuda" else 0


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list; None if it is empty."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


# ---------------------------------------------------------------- the tenant

CHUNK = 1 << 24  # elements per fill/verify step, to bound temporaries


def pattern(lo, hi, salt):
    """float32 small integers in [-2, 2] for flat indices [lo, hi) of tensor number `salt`."""
    idx = torch.arange(lo, hi, device=tc.DEVICE, dtype=torch.int64)
    return ((idx * 37 + salt * 1009) % 251 % 5 - 2).to(torch.float32)


def chunks(t):
    flat = t.view(-1)
    for lo in range(0, flat.numel(), CHUNK):
        hi = min(lo + CHUNK, flat.numel())
        yield lo, hi, flat[lo:hi]


def filled(shape, salt):
    t = torch.empty(shape, dtype=torch.float32, device=tc.DEVICE)
    for lo, hi, part in chunks(t):
        part.copy_(pattern(lo, hi, salt))
    return t


def holds_pattern(t, salt):
    return all(torch.equal(part, pattern(lo, hi, salt)) for lo, hi, part in chunks(t))


class VecAdd:
    def __init__(self, footprint):
        numel = footprint // 3 // 4
        self.a, self.b = filled(numel, 0), filled(numel, 1)
        self.c = torch.zeros(numel, dtype=torch.float32, device=tc.DEVICE)
        self.tensors = [self.a, self.b, self.c]

    def unit(self, i):
        torch.add(self.a, self.b, out=self.c)

    def verify(self, launched):
        if launched == 0:
            return None
        sums = all(
            torch.equal(part, pattern(lo, hi, 0) + pattern(lo, hi, 1))
            for lo, hi, part in chunks(self.c)
        )
        return holds_pattern(self.a, 0) and holds_pattern(self.b, 1) and sums


class MatMul:
    def __init__(self, footprint, n):
        count = max(3, footprint // (4 * n * n)) // 3 * 3
        self.triples = []
        for k in range(count // 3):
            a, b = filled((n, n), 3 * k), filled((n, n), 3 * k + 1)
            self.triples.append((a, b, torch.zeros_like(a)))
        self.tensors = [t for triple in self.triples for t in triple]

    def unit(self, i):
        a, b, c = self.triples[i % len(self.triples)]
        torch.mm(a, b, out=c)

    def verify(self, launched):
        if launched == 0:
            return None
        ok = True
        for k, (a, b, c) in enumerate(self.triples):
            ok = ok and holds_pattern(a, 3 * k) and holds_pattern(b, 3 * k + 1)
            if k < launched:  # C_k was computed at least once; |sums| <= 4n, exact in fp32
                ok = ok and torch.equal(c, torch.mm(a, b))
        return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kind", choices=["vecadd", "matmul"], required=True)
    p.add_argument("--gib", type=float, required=True, help="footprint of device memory, GiB")
    p.add_argument("--n", type=int, default=4096, help="matrix size (matmul)")
    p.add_argument("--sync-every", type=int, help="units between synchronisations (1 / 8)")
    p.add_argument("--verify", action="store_true", help="check all tensors at exit")
    window_args(p)
    a = p.parse_args()
    sync_every = a.sync_every or (1 if a.kind == "vecadd" else 8)
    window = Window(a)
    report = Report(kind=a.kind, gib=a.gib, n=a.n, sync_every=sync_every)
    if not open_device(a, report):
        return 1
    report.update(footprint_bytes=0, matrices=0, first_unit_s=None)
    torch.manual_seed(tc.SEED)
    tc.fp32_ieee()

    work, launched, units = None, 0, 0
    with window.setup():
        window.check()
        t0 = time.monotonic()
        nbytes = int(a.gib * 2**30)
        work = VecAdd(nbytes) if a.kind == "vecadd" else MatMul(nbytes, a.n)
        report["footprint_bytes"] = sum(t.numel() * t.element_size() for t in work.tensors)
        report["matrices"] = len(work.tensors) if a.kind == "matmul" else 0
        work.unit(0)
        tc.sync()
        launched = 1
        report["first_unit_s"] = time.monotonic() - t0
        window.begin()

    while not window.stopped:
        for _ in range(sync_every):
            work.unit(launched)
            launched += 1
        tc.sync()
        t = time.monotonic()
        if window.inside(t):
            units += sync_every
        if window.over(t):
            break

    report["units"] = units
    window.fields(report)
    seconds = report["seconds"]
    report["units_per_s"] = units / seconds if seconds > 0 else 0.0
    status = 0
    if a.verify:
        tc.sync()
        ok = work.verify(launched) if work is not None else None
        report["verify"] = "skipped" if ok is None else "ok" if ok else "mismatch"
        status = 3 if ok is False else 0
    report.emit(a.out)
    return status


if __name__ == "__main__":
    sys.exit(main())
