"""Whether mapping memory in one thread stalls the launches of another thread of the same
process, measured without gmux.

    map_beside_launch_probe.py [--seconds 4] [--piece-mib 24]

A second process keeps the link busy with copies both ways, as an evicting tenant does.
Under that load this process launches small kernels from one thread (torch adds,
synchronizing every 200) and counts them, in three phases:
  alone     nothing else runs in the process
  mapping   a second thread creates, maps, grants access to, unmaps and releases
            handles of --piece-mib, over and over, with no lock shared with the launcher
  copying   the second thread instead copies 512 MiB host to device in one call, over and
            over (the driver's own contention with a copy, for comparison)
Results are key=value lines: launches per second in each phase, and in the mapping phase
the mean time of cuMemSetAccess and cuMemUnmap per handle.
"""

import argparse
import ctypes as C
import multiprocessing as mp
import signal
import threading
import time

from probe_support import cuda, load
from vmm_structs import Access, Prop

MIB = 1 << 20


def kv(k, v):
    print(f"{k}={v}", flush=True)


def mapper(cu, piece, stop, times):
    """Creates, maps, grants access to, unmaps and releases one handle at a time."""
    p = Prop()
    p.type = 1
    p.location.type = 1
    p.location.id = 0
    d = Access()
    d.location.type = 1
    d.location.id = 0
    d.flags = 3
    va = C.c_uint64()
    cu("cuMemAddressReserve", C.byref(va), C.c_size_t(piece), C.c_size_t(0), C.c_uint64(0), C.c_uint64(0))
    while not stop.is_set():
        h = C.c_uint64()
        cu("cuMemCreate", C.byref(h), C.c_size_t(piece), C.byref(p), C.c_uint64(0))
        cu("cuMemMap", va, C.c_size_t(piece), C.c_size_t(0), h, C.c_uint64(0))
        t0 = time.perf_counter()
        cu("cuMemSetAccess", va, C.c_size_t(piece), C.byref(d), C.c_size_t(1))
        t1 = time.perf_counter()
        cu("cuMemUnmap", va, C.c_size_t(piece))
        t2 = time.perf_counter()
        cu("cuMemRelease", h)
        times.append((t1 - t0, t2 - t1))
    cu("cuMemAddressFree", va, C.c_size_t(piece))


def copier(cu, stop, torch):
    """Copies 512 MiB host to device in one call, over and over."""
    n = 512 * MIB
    src = torch.ones(n, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    while not stop.is_set():
        cu("cuMemcpyHtoD_v2", C.c_uint64(dst.data_ptr()), C.c_void_p(src.data_ptr()), C.c_size_t(n))


def launches_per_s(torch, x, y, seconds):
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(200):
            torch.add(x, y, out=x)
        torch.cuda.synchronize()
        n += 200
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--piece-mib", type=int, default=24)
    a = ap.parse_args()
    signal.alarm(150)
    import torch

    cu = cuda()
    x = torch.zeros(1 << 16, device="cuda")
    y = torch.ones(1 << 16, device="cuda")

    ctx = C.c_void_p()
    cu("cuCtxGetCurrent", C.byref(ctx))
    mp_ctx = mp.get_context("spawn")
    start, stop_load = mp_ctx.Event(), mp_ctx.Event()
    lp = mp_ctx.Process(target=load, args=(start, stop_load, 2))
    lp.start()
    time.sleep(8)
    start.set()
    time.sleep(1)
    launches_per_s(torch, x, y, 0.5)
    kv("alone_launches_per_s", f"{launches_per_s(torch, x, y, a.seconds):.0f}")
    for phase in ["mapping", "copying"]:
        stop, times = threading.Event(), []

        def side():
            cu("cuCtxSetCurrent", ctx)
            if phase == "mapping":
                mapper(cu, a.piece_mib * MIB, stop, times)
            else:
                copier(cu, stop, torch)

        t = threading.Thread(target=side)
        t.start()
        time.sleep(0.3)
        kv(f"{phase}_launches_per_s", f"{launches_per_s(torch, x, y, a.seconds):.0f}")
        stop.set()
        t.join()
        if times:
            acc = sum(s for s, _ in times) / len(times)
            unmap = sum(u for _, u in times) / len(times)
            kv("mapping_handles", len(times))
            kv("mapping_access_ms_per_handle", f"{acc * 1e3:.3f}")
            kv("mapping_unmap_ms_per_handle", f"{unmap * 1e3:.3f}")
            kv("mapping_busy_share", f"{sum(s + u for s, u in times) / a.seconds:.2f}")
    kv("alone_again_launches_per_s", f"{launches_per_s(torch, x, y, a.seconds):.0f}")
    stop_load.set()
    lp.join()
    kv("verify", "ok" if torch.isfinite(x).all().item() else "bad")


if __name__ == "__main__":
    main()
