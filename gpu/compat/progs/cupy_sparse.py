"""cupyx.scipy.sparse: CSR construction, SpMV, SpMM, SpGEMM, transpose, conjugate gradient.

    cupy_sparse.py

A 1,000,000 x 1,000,000 CSR matrix with 16 random entries per row (float32, built from
COO on the GPU), its symmetric diagonally dominant companion S, S @ x, S @ X for a dense
X of 16 columns, A^T, column sums, the product of a 100,000-row block with itself and 30
iterations of conjugate gradient on S. Tolerance: relative 1e-4 (cuSPARSE's default
SpMV algorithm is not guaranteed bit-reproducible, and CG compounds differences).
"""

import numpy as np

import common


def main():
    if common.on_gpu():
        import cupy as xp
        import cupyx.scipy.sparse as sp
        import cupyx.scipy.sparse.linalg as spla
    else:
        import scipy.sparse as sp
        import scipy.sparse.linalg as spla

        xp = np
    n, per_row, block, k = common.pick((1_000_000, 16, 100_000, 16), (2000, 4, 500, 3))
    rng = np.random.default_rng(common.SEED)
    rows = np.repeat(np.arange(n, dtype=np.int32), per_row)
    cols = rng.integers(0, n, n * per_row, dtype=np.int32)
    vals = rng.standard_normal(n * per_row, dtype=np.float32)
    A = sp.coo_matrix((xp.asarray(vals), (xp.asarray(rows), xp.asarray(cols))), shape=(n, n)).tocsr()
    A.sum_duplicates()
    absA = abs(A)
    sym = (absA + absA.T.tocsr()).tocsr()
    diag = xp.asarray(sym.sum(axis=1)).ravel() + 1.0
    S = (sym + sp.diags(diag.astype(xp.float32), format="csr")).tocsr()
    x = xp.asarray(rng.standard_normal(n, dtype=np.float32))
    X = xp.asarray(rng.standard_normal((n, k), dtype=np.float32))
    y = S @ x
    Y = S @ X
    At = A.T.tocsr()
    colsum = xp.asarray(A.sum(axis=0)).ravel()
    B = A[:block, :block]
    C = (B @ B).tocsr()
    sol, info = spla.cg(S, y, maxiter=30)
    common.kv("nnz", int(A.nnz))
    common.kv("spgemm_nnz", int(C.nnz))
    common.kv("cg_info", int(info))
    common.save(
        {
            "spmv": y[::16],
            "spmm": Y[::16],
            "at_data": At.data[::64],
            "at_indices": At.indices[::64],
            "colsum": colsum[::16],
            "spgemm_nnz": np.int64(C.nnz),
            "spgemm_data_sum": C.data.astype(xp.float64).sum(),
            "spgemm_indptr": C.indptr[::64],
            "cg": sol[::16],
            "cg_residual": xp.linalg.norm(S @ sol - y),
        }
    )
    common.finish()


if __name__ == "__main__":
    main()
