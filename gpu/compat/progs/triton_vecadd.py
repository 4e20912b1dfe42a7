"""Triton elementwise kernels (@triton.jit): vector add and a three-input fused multiply-add.

    triton_vecadd.py

96 M float32 per vector (384 MiB each, four vectors): out = x + y, then five passes of
out = alpha * x * y + out with different alphas, BLOCK 1024. Checks x + y against
PyTorch's and saves every 4099th output and float64 sums.
"""

import os

import common

if not common.on_gpu():
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def fma3_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    acc = tl.load(out_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x * y + acc, mask=mask)


def main():
    torch = common.torch_setup()
    dev = common.device()
    n = common.pick(96 << 20, 5000)
    g = common.cpu_generator(torch)
    x = torch.randn(n, generator=g).to(dev)
    y = torch.randn(n, generator=g).to(dev)
    out = torch.empty_like(x)
    block = 1024
    grid = (triton.cdiv(n, block),)
    add_kernel[grid](x, y, out, n, BLOCK=block)
    exact = bool(torch.equal(out, x + y))
    common.kv("add_equals_torch", int(exact))
    first = out[::4099].clone()
    for alpha in (0.5, -1.25, 2.0, 0.125, 3.0):
        fma3_kernel[grid](x, y, out, n, alpha, BLOCK=block)
    common.save({"add": first, "fma": out[::4099], "sum": out.double().sum(), "add_equals_torch": exact})
    common.finish(torch)


if __name__ == "__main__":
    main()
