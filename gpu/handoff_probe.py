"""Whether memory handed between processes as a shareable handle skips the driver's
clearing, measured without gmux.

    handoff_probe.py [--gib 2] [--piece-mib 2]

A third process keeps the link busy with copies both ways, as an evicting tenant does.
Under that load this process maps `--gib` of device memory three ways and times
cuMemSetAccess:
  fresh     cuMemCreate'd here right after another process freed as much
  imported  handles another process created, exported as POSIX file descriptors,
            mapped and wrote, then unmapped; imported here and mapped
  orphaned  as imported, but the creator has exited before the import
It also reports whether the imported memory still holds the creator's bytes.
Results are key=value lines.
"""

import argparse
import ctypes as C
import multiprocessing as mp
import os
import resource
import signal
import socket
import tempfile
import time

from probe_support import cuda, load
from vmm_structs import Access, Prop

MIB = 1 << 20
POSIX_FD = 1


def prop(export):
    p = Prop()
    p.type = 1
    p.requestedHandleTypes = POSIX_FD if export else 0
    p.location.type = 1
    p.location.id = 0
    return p


def reserve(cu, n):
    va = C.c_uint64()
    cu("cuMemAddressReserve", C.byref(va), C.c_size_t(n), C.c_size_t(0), C.c_uint64(0), C.c_uint64(0))
    return va.value


def set_access(cu, va, n):
    d = Access()
    d.location.type = 1
    d.location.id = 0
    d.flags = 3
    t0 = time.perf_counter()
    cu("cuMemSetAccess", C.c_uint64(va), C.c_size_t(n), C.byref(d), C.c_size_t(1))
    return time.perf_counter() - t0


def creator(path, gib, piece_mib, export, stay):
    """Creates, maps and writes `gib` in handles of `piece_mib`; sends their descriptors to `path` if
    `export`; unmaps and releases them; then stays until the socket closes, or exits."""
    signal.alarm(120)
    cu = cuda()
    piece = piece_mib * MIB
    n = int(gib * 1024 / piece_mib)
    va = reserve(cu, n * piece)
    hs, fds = [], []
    for i in range(n):
        h = C.c_uint64()
        cu("cuMemCreate", C.byref(h), C.c_size_t(piece), C.byref(prop(export)), C.c_uint64(0))
        cu("cuMemMap", C.c_uint64(va + i * piece), C.c_size_t(piece), C.c_size_t(0), h, C.c_uint64(0))
        hs.append(h)
        if export:
            fd = C.c_int()
            cu("cuMemExportToShareableHandle", C.byref(fd), h, C.c_int(POSIX_FD), C.c_uint64(0))
            fds.append(fd.value)
    set_access(cu, va, n * piece)
    cu("cuMemsetD8_v2", C.c_uint64(va), C.c_ubyte(0xAB), C.c_size_t(n * piece))
    cu("cuCtxSynchronize")
    cu("cuMemUnmap", C.c_uint64(va), C.c_size_t(n * piece))
    for h in hs:
        cu("cuMemRelease", h)
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    for i in range(0, len(fds), 200):
        socket.send_fds(s, [b"x"], fds[i:i + 200])
    socket.send_fds(s, [b"."], [])
    for fd in fds:
        os.close(fd)
    if stay:
        s.recv(1)
    s.close()


_pinned = {}


def pinned(n):
    """A pinned host buffer of `n` bytes, kept for the process's life."""
    import torch

    if n not in _pinned:
        _pinned[n] = torch.ones(n, dtype=torch.uint8, pin_memory=True)
    return _pinned[n]


def kv(k, v):
    print(f"{k}={v}", flush=True)


def run_case(case, cu, a, ctx, loaded):
    gib, piece = a.gib, a.piece_mib * MIB
    total = int(gib * (1 << 30))
    export = case != "fresh"
    path = os.path.join(tempfile.mkdtemp(), "s")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)
    srv.settimeout(60)
    p = ctx.Process(target=creator, args=(path, gib, a.piece_mib, export, case != "orphaned"))
    p.start()
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        p.terminate()
        raise RuntimeError(f"{case}: the creator never connected (exit code {p.exitcode})")
    conn.settimeout(60)
    fds = []
    while True:
        msg, got, _, _ = socket.recv_fds(conn, 1, 256)
        fds += got
        if msg == b".":
            break
    if case == "orphaned":
        p.join()
    loaded.set()
    time.sleep(0.3)
    va = reserve(cu, total)
    t0 = time.perf_counter()
    hs = []
    if export:
        for fd in fds:
            h = C.c_uint64()
            cu("cuMemImportFromShareableHandle", C.byref(h), C.c_void_p(fd), C.c_int(POSIX_FD))
            hs.append(h)
    else:
        for i in range(total // piece):
            h = C.c_uint64()
            cu("cuMemCreate", C.byref(h), C.c_size_t(piece), C.byref(prop(False)), C.c_uint64(0))
            hs.append(h)
    t1 = time.perf_counter()
    # cuMemMap takes no offset into a handle (CUDA_ERROR_NOT_SUPPORTED): one per piece.
    for i, h in enumerate(hs):
        cu("cuMemMap", C.c_uint64(va + i * piece), C.c_size_t(piece), C.c_size_t(0), h, C.c_uint64(0))
    t2 = time.perf_counter()
    acc = set_access(cu, va, total)
    kv(f"{case}_create_or_import_ms", f"{(t1 - t0) * 1e3:.1f}")
    kv(f"{case}_map_ms", f"{(t2 - t1) * 1e3:.1f}")
    kv(f"{case}_access_ms_per_gib", f"{acc * 1e3 / gib:.1f}")
    # The last piece is left unfilled to show what the memory held before.
    n = total - piece
    host = pinned(n)
    for label in ["fill", "refill"]:
        t0 = time.perf_counter()
        cu("cuMemcpyHtoD_v2", C.c_uint64(va), C.c_void_p(host.data_ptr()), C.c_size_t(n))
        kv(f"{case}_{label}_gbps", f"{n / (time.perf_counter() - t0) / 1e9:.1f}")
    b = (C.c_ubyte * 16)()
    cu("cuMemcpyDtoH_v2", b, C.c_uint64(va + n), C.c_size_t(16))
    kv(f"{case}_first_byte", hex(b[0]))
    cu("cuMemUnmap", C.c_uint64(va), C.c_size_t(total))
    for h in hs:
        cu("cuMemRelease", h)
    for fd in fds:
        os.close(fd)
    conn.close()
    p.join()
    srv.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=2)
    ap.add_argument("--piece-mib", type=int, default=2)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    ctx = mp.get_context("spawn")
    signal.alarm(300)
    cu = cuda()
    kv("phase", "context ready")
    for loaded in [False, True]:
        start, stop = ctx.Event(), ctx.Event()
        lp = ctx.Process(target=load, args=(start, stop, 2))
        lp.start()
        time.sleep(8)
        gate = start if loaded else ctx.Event()
        for case in ["fresh", "imported", "orphaned"]:
            print(f"# {'under load' if loaded else 'idle link'}", flush=True)
            try:
                run_case(case, cu, a, ctx, gate)
            except Exception as e:
                kv(f"{case}_error", repr(e))
        stop.set()
        start.set()
        lp.join()


if __name__ == "__main__":
    main()
