"""CuPy FFTs (cuFFT): batched 2D, 3D, real-to-complex and strided transforms.

    cupy_fft.py

Complex64 data of [64, 512, 512] drawn on the host from a seeded generator: fft2 over the
last two axes and back, fftn over all three with an explicit cupyx.scipy.fft plan, rfft2
and irfft2 of the real part, and a transform along the first (strided) axis. Saves
every 8th row and column of each spectrum, the round trips' largest errors and sums.
"""

import numpy as np

import common


def main():
    if common.on_gpu():
        import cupy as xp
        import cupyx.scipy.fft as cufft

        common.kv("cupy", xp.__version__)
    else:
        xp, cufft = np, None
    b, n = common.pick((64, 512), (4, 32))
    rng = np.random.default_rng(common.SEED)
    host = (rng.standard_normal((b, n, n), dtype=np.float32) + 1j * rng.standard_normal((b, n, n), dtype=np.float32)).astype(np.complex64)
    x = xp.asarray(host)
    X = xp.fft.fft2(x)
    back = xp.fft.ifft2(X)
    if cufft is not None:
        with cufft.get_fft_plan(x, axes=(0, 1, 2)):
            Y = cufft.fftn(x, axes=(0, 1, 2))
    else:
        Y = xp.fft.fftn(x, axes=(0, 1, 2))
    R = xp.fft.rfft2(x.real)
    r_back = xp.fft.irfft2(R, s=(n, n))
    Z = xp.fft.fft(x, axis=0)
    res = {
        "fft2": X[:, ::8, ::8],
        "fftn": Y[:, ::8, ::8],
        "rfft2": R[:, ::8, ::8],
        "strided": Z[:, ::8, ::8],
        "roundtrip_err": xp.abs(back - x).max(),
        "rroundtrip_err": xp.abs(r_back - x.real).max(),
        "sums": xp.stack([X.sum(), Y.sum(), R.sum(), Z.sum()]),
    }
    common.kv("roundtrip_err", float(res["roundtrip_err"]))
    common.save(res)
    common.finish()


if __name__ == "__main__":
    main()
