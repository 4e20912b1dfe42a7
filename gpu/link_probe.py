"""What the PCIe link and the driver allow, measured without gmux.

    link_probe.py copies [--gib 4]   host<->device copy rates: one direction, both
                                     directions in one process, and one direction in each
                                     of two processes at once (cross-process duplex)
    link_probe.py teardown [--gib 12] how long the driver takes to free a SIGKILLed
                                     process's device memory (nvidia-smi), with and
                                     without as much pinned host memory beside it (three
                                     ways of pinning), and what pinning costs

Results are printed as key=value lines.
"""

import argparse
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import torch

GIB = 1 << 30


def kv(key, value):
    print(f"{key}={value}", flush=True)


def buffers(gib):
    n = int(gib * GIB)
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host.fill_(1)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    dev.fill_(2)
    torch.cuda.synchronize()
    return host, dev


def timed_copies(pairs, reps):
    """Runs each (dst, src, stream) `reps` times, all streams at once; seconds."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        for dst, src, s in pairs:
            with torch.cuda.stream(s):
                dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def one_direction(direction, gib, reps, start_at, out):
    """A child process: `reps` copies of `gib` in one direction from `start_at` on."""
    host, dev = buffers(gib)
    s = torch.cuda.Stream()
    pair = (dev, host, s) if direction == "h2d" else (host, dev, s)
    timed_copies([pair], 1)
    while time.time() < start_at:
        time.sleep(0.0005)
    t0 = time.time()
    dt = timed_copies([pair], reps)
    out.put((direction, t0, t0 + dt, gib * GIB * reps / dt / 1e9))


def copies(args):
    reps = 3
    host, dev = buffers(args.gib)
    host2, dev2 = buffers(args.gib)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    gb = args.gib * GIB * reps / 1e9
    timed_copies([(dev, host, s1)], 1)
    kv("h2d_gbps", round(gb / timed_copies([(dev, host, s1)], reps), 1))
    kv("d2h_gbps", round(gb / timed_copies([(host, dev, s1)], reps), 1))
    both = timed_copies([(dev, host, s1), (host2, dev2, s2)], reps)
    kv("duplex_one_process_gbps", round(2 * gb / both, 1))
    del host, dev, host2, dev2
    torch.cuda.empty_cache()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 20
    procs = [ctx.Process(target=one_direction, args=(d, args.gib, reps, start_at, out)) for d in ("h2d", "d2h")]
    for p in procs:
        p.start()
    res = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    t0 = min(r[1] for r in res)
    t1 = max(r[2] for r in res)
    for d, a, b, rate in res:
        kv(f"cross_process_{d}_gbps", round(rate, 1))
        kv(f"cross_process_{d}_window_s", f"{a - t0:.3f}..{b - t0:.3f}")
    kv("duplex_two_processes_gbps", round(2 * gb / (t1 - t0), 1))


def used_mib():
    q = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True, text=True)
    return int(q.stdout.split()[0])


def pin(gib, how):
    """Pins `gib` of host memory: `alloc` (cudaHostAlloc, as pin_memory does), or an
    anonymous mapping registered with cudaHostRegister, backed by 4 KiB pages
    (`register_4k`) or transparent huge pages (`register_thp`). Returns what keeps it."""
    n = int(gib * GIB)
    if how == "alloc":
        return [torch.empty(GIB, dtype=torch.uint8, pin_memory=True).fill_(4) for _ in range(int(gib))]
    import ctypes
    import mmap

    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE if how == "register_thp" else mmap.MADV_NOHUGEPAGE)
    buf = (ctypes.c_char * n).from_buffer(m)
    ptr = ctypes.addressof(buf)
    ctypes.memset(ptr, 4, n)
    err = torch.cuda.cudart().cudaHostRegister(ptr, n, 0)
    if int(err) != 0:
        raise RuntimeError(f"cudaHostRegister: {err}")
    return [m, buf]


def holder(gib, how):
    """A child: holds `gib` of device memory (and as much pinned host memory unless `how`
    is none), then sleeps. Prints `ready` and the seconds that pinning took."""
    parts = [torch.empty(GIB, dtype=torch.uint8, device="cuda").fill_(3) for _ in range(int(gib))]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if how != "none":
        parts.append(pin(gib, how))
    print(f"ready {time.perf_counter() - t0:.3f}", flush=True)
    time.sleep(600)


def teardown(args):
    thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
    kv("transparent_hugepage", thp.replace(" ", ","))
    for how in ["none", "alloc", "register_4k", "register_thp"]:
        code = f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); import link_probe as l; l.holder({args.gib}, {how!r})"
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline().split()
        if not line or line[0] != "ready":
            kv(f"teardown_{how}_s", "nan")
            continue
        if how != "none":
            kv(f"pin_{how}_s_per_gib", f"{float(line[1]) / args.gib:.3f}")
        time.sleep(1)
        before = used_mib()
        t0 = time.time()
        os.kill(p.pid, signal.SIGKILL)
        freed = None
        while time.time() - t0 < 20:
            if before - used_mib() > args.gib * 1024 * 0.9:
                freed = time.time() - t0
                break
            time.sleep(0.01)
        p.wait()
        kv(f"teardown_{how}_s", "nan" if freed is None else f"{freed:.3f}")
        time.sleep(2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["copies", "teardown"])
    p.add_argument("--gib", type=float, default=None)
    a = p.parse_args()
    if a.what == "copies":
        a.gib = a.gib or 4
        copies(a)
    else:
        a.gib = a.gib or 12
        teardown(a)


if __name__ == "__main__":
    main()
