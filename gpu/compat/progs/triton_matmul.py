"""Triton tiled matrix product (@triton.jit, tl.dot), fp16 inputs, fp32 accumulation.

    triton_matmul.py

The Triton tutorial's grouped-tile matmul with one fixed configuration (128 x 128 x 64
tiles, GROUP_M 8, 8 warps, 3 stages; no autotuning, so every run uses the same kernel):
six 4096^3 products with fresh inputs and one 3000 x 5000 @ 5000 x 2000 product (masked
edges). Prints the largest difference from torch.matmul; saves every 16th row and column
of each result and float64 sums.
"""

import os

import common

if not common.on_gpu():
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % group) % size_m)
    pid_n = (pid % group) // size_m
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    c = acc.to(tl.float16)
    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + cm[:, None] * scm + cn[None, :] * scn, c, mask=(cm[:, None] < M) & (cn[None, :] < N))


def matmul(torch, a, b, bm, bn, bk):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=8, num_stages=3)
    return c


def main():
    torch = common.torch_setup()
    dev = common.device()
    n, shapes, tile = common.pick((4096, (3000, 5000, 2000), (128, 128, 64)), (64, (40, 70, 30), (16, 16, 16)))
    dtype = torch.float16 if common.on_gpu() else torch.float32
    g = common.cpu_generator(torch)
    res, worst = {}, 0.0
    for i in range(6):
        a = torch.randn(n, n, generator=g).to(dev, dtype)
        b = torch.randn(n, n, generator=g).to(dev, dtype)
        c = matmul(torch, a, b, *tile)
        worst = max(worst, (c.float() - (a @ b).float()).abs().max().item())
        res[f"c{i}"] = c[::16, ::16]
        res[f"sum{i}"] = c.double().sum()
    m, k, nn = shapes
    a = torch.randn(m, k, generator=g).to(dev, dtype)
    b = torch.randn(k, nn, generator=g).to(dev, dtype)
    c = matmul(torch, a, b, *tile)
    worst = max(worst, (c.float() - (a @ b).float()).abs().max().item())
    res["c_odd"] = c[::16, ::16]
    res["sum_odd"] = c.double().sum()
    common.kv("max_diff_vs_torch", f"{worst:.4g}")
    common.save(res)
    common.finish(torch)


if __name__ == "__main__":
    main()
