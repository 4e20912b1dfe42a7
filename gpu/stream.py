"""A stream over many buffers, one after another: each pass runs `--work` kernels on each
buffer in turn, in allocation order, the way the layers of a model whose weights do not
fit are streamed through GPU memory.

    stream.py [--buffers N] [--mib M] [--work K] [--passes P]

Prints `pass_ms=` (the median wall milliseconds of a pass, the first left out),
`first_ms=` (the first pass) and `verify=ok|mismatch` (every element of buffer i must be
i + P * K).
"""

import argparse
import statistics
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--buffers", type=int, default=48)
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--work", type=int, default=32)
    p.add_argument("--passes", type=int, default=8)
    a = p.parse_args()
    n = a.mib << 18  # float32 elements
    bufs = [torch.full((n,), float(i), device="cuda") for i in range(a.buffers)]
    torch.cuda.synchronize()
    times = []
    for _ in range(a.passes):
        t0 = time.perf_counter()
        for b in bufs:
            for _ in range(a.work):
                b.add_(1.0)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    want = a.passes * a.work
    ok = all(bool((b == float(i + want)).all().item()) for i, b in enumerate(bufs))
    rest = times[1:] or times
    print(f"pass_ms={statistics.median(rest):.2f} first_ms={times[0]:.2f} verify={'ok' if ok else 'mismatch'}")


if __name__ == "__main__":
    main()
