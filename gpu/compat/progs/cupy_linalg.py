"""CuPy dense linear algebra (cuBLAS, cuSOLVER): Cholesky, solve, QR, SVD, eigh, inverse.

    cupy_linalg.py

A 4096 x 4096 symmetric positive definite float64 matrix (A A^T + n I): Cholesky,
solve with 64 right-hand sides, inverse; QR of a 4096 x 2048 float32 matrix; SVD of a
2048 x 1024 float32 matrix; eigh of a 2048 x 2048 symmetric float64 matrix. Saves
samples and the results' norms. Tolerance: relative 1e-5 (cuSOLVER's results are
reproducible on one GPU, but this is not guaranteed by its documentation).
"""

import numpy as np

import common


def main():
    if common.on_gpu():
        import cupy as xp
    else:
        xp = np
    n, m, r, e = common.pick((4096, 2048, 1024, 2048), (64, 32, 16, 32))
    rng = np.random.default_rng(common.SEED)
    A = xp.asarray(rng.standard_normal((n, n)))
    spd = A @ A.T + n * xp.eye(n)
    L = xp.linalg.cholesky(spd)
    rhs = xp.asarray(rng.standard_normal((n, 64)))
    sol = xp.linalg.solve(spd, rhs)
    inv = xp.linalg.inv(spd)
    Q, R = xp.linalg.qr(xp.asarray(rng.standard_normal((n, m), dtype=np.float32)))
    U, S, Vt = xp.linalg.svd(xp.asarray(rng.standard_normal((m, r), dtype=np.float32)), full_matrices=False)
    sym = xp.asarray(rng.standard_normal((e, e)))
    w, V = xp.linalg.eigh(sym + sym.T)
    common.kv("cholesky_residual", float(xp.abs(L @ L.T - spd).max()))
    common.save(
        {
            "chol": L[::32, ::32],
            "solve": sol[::32],
            "inv": inv[::32, ::32],
            "qr_r": R[::16, ::16],
            "svd_s": S,
            "svd_u": xp.abs(U[::16, :16]),
            "eigh_w": w,
            "eigh_v": xp.abs(V[::16, :16]),
        }
    )
    common.finish()


if __name__ == "__main__":
    main()
