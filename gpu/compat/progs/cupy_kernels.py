"""CuPy user kernels: ElementwiseKernel, ReductionKernel, RawKernel, RawModule; sort/cumsum.

    cupy_kernels.py

An ElementwiseKernel (z = a*x + y*y) over 64 M floats, a ReductionKernel (L2 norm in
float64), a RawKernel 5-point stencil with a shared-memory tile on an 8192 x 8192 grid
iterated 10 times between two buffers, a RawModule with a templated kernel instantiated
for float and double (name_expressions), cupy.sort and an integer cupy.cumsum over 32 M values, and
cupy.random (cuRAND, seeded). Saves samples of every output and their sums.
"""

import numpy as np

import common

STENCIL = r"""
__device__ float clamped(const float* in, int x, int y, int n) {
    x = x < 0 ? 0 : (x >= n ? n - 1 : x);
    y = y < 0 ? 0 : (y >= n ? n - 1 : y);
    return in[(size_t)y * n + x];
}

extern "C" __global__ void stencil(const float* in, float* out, int n) {
    __shared__ float tile[18][18];
    int gx = blockIdx.x * 16 + threadIdx.x, gy = blockIdx.y * 16 + threadIdx.y;
    int lx = threadIdx.x + 1, ly = threadIdx.y + 1;
    tile[ly][lx] = clamped(in, gx, gy, n);
    if (threadIdx.x == 0) tile[ly][0] = clamped(in, gx - 1, gy, n);
    if (threadIdx.x == 15) tile[ly][17] = clamped(in, gx + 1, gy, n);
    if (threadIdx.y == 0) tile[0][lx] = clamped(in, gx, gy - 1, n);
    if (threadIdx.y == 15) tile[17][lx] = clamped(in, gx, gy + 1, n);
    __syncthreads();
    if (gx < n && gy < n)
        out[(size_t)gy * n + gx] = 0.5f * tile[ly][lx] + 0.125f * (tile[ly][lx - 1] + tile[ly][lx + 1] + tile[ly - 1][lx] + tile[ly + 1][lx]);
}
"""

TEMPLATED = r"""
template <typename T>
__global__ void scale_shift(T* x, T s, T t, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
        x[i] = x[i] * s + t;
}
"""


def stencil_np(a):
    p = np.pad(a, 1, mode="edge")
    return 0.5 * a + 0.125 * (p[1:-1, :-2] + p[1:-1, 2:] + p[:-2, 1:-1] + p[2:, 1:-1])


def main():
    gpu = common.on_gpu()
    if gpu:
        import cupy as xp
    else:
        xp = np
    n_vec, grid, n_sort = common.pick((64 << 20, 8192, 32 << 20), (4096, 64, 4096))
    rng = np.random.default_rng(common.SEED)
    x = xp.asarray(rng.standard_normal(n_vec, dtype=np.float32))
    y = xp.asarray(rng.standard_normal(n_vec, dtype=np.float32))
    res = {}

    if gpu:
        saxpy = xp.ElementwiseKernel("float32 x, float32 y, float32 a", "float32 z", "z = a * x + y * y", "saxpy_sq")
        l2 = xp.ReductionKernel("float32 x", "float64 y", "(double)x * x", "a + b", "y = sqrt(a)", "0", "l2norm")
        z = saxpy(x, y, np.float32(0.75))
        norm = l2(z)
    else:
        z = np.float32(0.75) * x + y * y
        norm = np.sqrt((z.astype(np.float64) ** 2).sum())
    res["elementwise"] = z[::1021]
    res["l2norm"] = norm

    a = xp.asarray(rng.standard_normal((grid, grid), dtype=np.float32))
    b = xp.empty_like(a)
    if gpu:
        kern = xp.RawKernel(STENCIL, "stencil")
        blocks = ((grid + 15) // 16, (grid + 15) // 16)
        for _ in range(10):
            kern(blocks, (16, 16), (a, b, np.int32(grid)))
            a, b = b, a
    else:
        for _ in range(10):
            a = stencil_np(a)
    res["stencil"] = a[::61, ::61]
    res["stencil_sum"] = a.astype(xp.float64).sum()

    if gpu:
        mod = xp.RawModule(code=TEMPLATED, options=("-std=c++17",), name_expressions=("scale_shift<float>", "scale_shift<double>"))
        f32 = mod.get_function("scale_shift<float>")
        f64 = mod.get_function("scale_shift<double>")
        xd = x.astype(xp.float64)
        f32((1024,), (256,), (x, np.float32(1.5), np.float32(-0.5), np.uint64(n_vec)))
        f64((1024,), (256,), (xd, np.float64(0.25), np.float64(2.0), np.uint64(n_vec)))
    else:
        xd = x.astype(np.float64)
        x = x * np.float32(1.5) + np.float32(-0.5)
        xd = xd * 0.25 + 2.0
    res["raw_f32"] = x[::1021]
    res["raw_f64"] = xd[::1021]

    keys = y[:n_sort]
    s = xp.sort(keys)
    # An integer scan: a floating-point one may associate differently from run to run.
    c = xp.cumsum((s * 1000).astype(xp.int64))
    res["sorted"] = s[::997]
    res["cumsum"] = c[::997]
    if gpu:
        r = xp.random.RandomState(common.SEED).standard_normal(n_sort, dtype=xp.float32)
        res["random"] = r[::997]
        res["random_sum"] = r.astype(xp.float64).sum()
    common.kv("l2norm", float(norm))
    common.save(res)
    common.finish()


if __name__ == "__main__":
    main()
