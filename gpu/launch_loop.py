"""Per-launch cost: many small kernels on one stream, timed on the host.

    launch_loop.py [--launches N] [--rounds R]

Allocates two 1 MiB float32 tensors and launches `torch.add(a, b, out=a)` N times per round,
synchronizing at the end of each round; prints `launch_us=` (the median over rounds of wall
microseconds per launch) and `launches_per_s=`. Under gmux every launch passes the shim's
working-set prediction and residency check, so the difference from a native run is gmux's
per-launch cost.
"""

import argparse
import statistics
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--launches", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    x = torch.zeros(1 << 18, device="cuda")
    y = torch.ones(1 << 18, device="cuda")
    for _ in range(1000):
        torch.add(x, y, out=x)
    torch.cuda.synchronize()
    per = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(a.launches):
            torch.add(x, y, out=x)
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) / a.launches * 1e6)
    us = statistics.median(per)
    want = 1000 + a.rounds * a.launches
    ok = int(x[0].item()) == want
    print(f"launch_us={us:.3f} launches_per_s={1e6 / us:.0f} verify={'ok' if ok else 'mismatch'}")


if __name__ == "__main__":
    main()
