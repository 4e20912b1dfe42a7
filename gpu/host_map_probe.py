"""Whether host memory made with cuMemCreate (location HOST) can stand at a device
address gmux reserved, and what a kernel pays to use it there.

    host_map_probe.py [--mib 256]

Checks, each printed as key=value: the host granularity; a kernel's writes and reads,
atomics and a cuBLAS GEMM over a range whose first half is device memory and second
half host memory; copies between pinned memory and the host-backed range; the same host
handle mapped at a second address; read bandwidth from device and from host memory.
"""

import argparse
import ctypes as C
import time

from probe_support import cuda
from vmm_structs import Access, Location, Prop

MIB = 1 << 20
DEVICE, HOST = 1, 2
RW = 3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    a = ap.parse_args()
    import cupy as cp
    import torch

    call = cuda()

    gran = C.c_size_t()
    hp = Prop(type=1, location=Location(HOST, 0))
    call("cuMemGetAllocationGranularity", C.byref(gran), C.byref(hp), 0)
    print(f"host_granularity={gran.value}")
    dp = Prop(type=1, location=Location(DEVICE, 0))
    half = a.mib * MIB // 2
    va = C.c_uint64()
    call("cuMemAddressReserve", C.byref(va), C.c_size_t(2 * half), C.c_size_t(0), C.c_uint64(0), C.c_uint64(0))
    hd, hh = C.c_uint64(), C.c_uint64()
    call("cuMemCreate", C.byref(hd), C.c_size_t(half), C.byref(dp), C.c_uint64(0))
    call("cuMemCreate", C.byref(hh), C.c_size_t(half), C.byref(hp), C.c_uint64(0))
    call("cuMemMap", C.c_uint64(va.value), C.c_size_t(half), C.c_size_t(0), hd, C.c_uint64(0))
    call("cuMemMap", C.c_uint64(va.value + half), C.c_size_t(half), C.c_size_t(0), hh, C.c_uint64(0))
    acc = Access(Location(DEVICE, 0), RW)
    call("cuMemSetAccess", C.c_uint64(va.value), C.c_size_t(half), C.byref(acc), C.c_size_t(1))
    call("cuMemSetAccess", C.c_uint64(va.value + half), C.c_size_t(half), C.byref(acc), C.c_size_t(1))
    print("map_ok=1")

    n = 2 * half // 4
    mem = cp.cuda.UnownedMemory(va.value, 2 * half, None)
    x = cp.ndarray((n,), dtype=cp.float32, memptr=cp.cuda.MemoryPointer(mem, 0))
    x[...] = cp.arange(n, dtype=cp.float32)
    ref = cp.arange(n, dtype=cp.float32)
    print(f"elementwise_ok={int(bool((x == ref).all()))}")
    # atomics into the host half
    idx = cp.random.randint(n // 2, n, size=1 << 20).astype(cp.int64)
    y = x.copy()
    cp.add.at(x, idx, 1.0)
    cp.add.at(y, idx, 1.0)
    print(f"atomics_ok={int(bool((x == y).all()))}")
    # GEMM with operands straddling both halves
    t = torch.as_tensor(x, device="cuda")
    side = int((n // 4) ** 0.5) // 64 * 64
    A = t[n // 2 - side * side // 2: n // 2 + side * side // 2].view(side, side)
    B = A.clone()
    C1 = A @ B
    C2 = B.clone() @ B
    print(f"gemm_ok={int(bool(torch.equal(C1, C2)))} side={side}")
    # copies from pinned memory into the host half and back
    pinned = cp.cuda.alloc_pinned_memory(half)
    src = (C.c_ubyte * half).from_address(pinned.ptr)
    C.memset(pinned.ptr, 0x5A, half)
    call("cuMemcpyHtoD_v2", C.c_uint64(va.value + half), C.c_void_p(pinned.ptr), C.c_size_t(half))
    back = cp.cuda.alloc_pinned_memory(half)
    call("cuMemcpyDtoH_v2", C.c_void_p(back.ptr), C.c_uint64(va.value + half), C.c_size_t(half))
    print(f"copy_ok={int(C.string_at(back.ptr, 4096) == bytes([0x5A]) * 4096 and bytes(src[:16]) == bytes([0x5A]) * 16)}")
    # the host handle at a second address
    va2 = C.c_uint64()
    call("cuMemAddressReserve", C.byref(va2), C.c_size_t(half), C.c_size_t(0), C.c_uint64(0), C.c_uint64(0))
    call("cuMemMap", C.c_uint64(va2.value), C.c_size_t(half), C.c_size_t(0), hh, C.c_uint64(0))
    call("cuMemSetAccess", C.c_uint64(va2.value), C.c_size_t(half), C.byref(acc), C.c_size_t(1))
    x[n // 2] = 1234.5
    z = cp.ndarray((1,), dtype=cp.float32, memptr=cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(va2.value, 4, None), 0))
    print(f"alias_ok={int(float(z[0]) == 1234.5)}")
    # device-to-device copy engine between the halves
    call("cuMemcpyDtoD_v2", C.c_uint64(va.value), C.c_uint64(va.value + half), C.c_size_t(half))
    print(f"dtod_ok={int(bool((x[: n // 2] == x[n // 2:]).all()))}")
    for name, lo in (("device", 0), ("host", n // 2)):
        v = x[lo: lo + n // 2]
        float(v.sum())
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            float(v.sum())
        dt = (time.perf_counter() - t0) / 5
        print(f"read_{name}_gbs={half / dt / 1e9:.1f}")
    for h, v, s in ((hh, va2, half),):
        call("cuMemUnmap", C.c_uint64(v.value), C.c_size_t(s))
    call("cuMemUnmap", C.c_uint64(va.value), C.c_size_t(2 * half))
    call("cuMemRelease", hd)
    call("cuMemRelease", hh)
    t0 = time.perf_counter()
    hs = []
    for _ in range(64):
        h = C.c_uint64()
        call("cuMemCreate", C.byref(h), C.c_size_t(2 * MIB), C.byref(hp), C.c_uint64(0))
        hs.append(h)
    t1 = time.perf_counter()
    call("cuMemMap", C.c_uint64(va2.value), C.c_size_t(2 * MIB), C.c_size_t(0), hs[0], C.c_uint64(0))
    call("cuMemSetAccess", C.c_uint64(va2.value), C.c_size_t(2 * MIB), C.byref(acc), C.c_size_t(1))
    t2 = time.perf_counter()
    call("cuMemUnmap", C.c_uint64(va2.value), C.c_size_t(2 * MIB))
    for h in hs:
        call("cuMemRelease", h)
    print(f"create_host_2m_us={(t1 - t0) / 64 * 1e6:.0f} map_access_us={(t2 - t1) * 1e6:.0f}")
    print("done=1")


if __name__ == "__main__":
    main()
