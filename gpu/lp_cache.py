"""Low-priority tenant with a cache it can give back: a KV-cache-like pool of tensors,
and steps that each read one block of it, as fast as it is let run.

    lp_cache.py --duration 30 [--pool-gib 12] [--block-mib 64] [--cooperate [--regrow-after 10]] [--start-at T] [--out F]
    lp_cache.py --duration 3 --warmup 1 --pool-gib 0.05 --block-mib 4 --device cpu   # dry run

Each step is a matmul of a 1024x1024 float32 matrix with 1024 rows of one pool block
(picked round robin), then torch.cuda.synchronize(). Steps that complete inside
[start_at, start_at + duration] are reported as steps and steps_per_s, with the pool's
smallest and final size in blocks.

With --cooperate it watches its own tenant's events through the gmux Python module
(`python/` of this repository): each time the daemon begins giving it less than it holds
(`gmem.events` swap, someone else needs the memory), it drops half its pool and runs
torch.cuda.empty_cache(), so that the memory goes back without being copied out. After
--regrow-after seconds (10) without such an event it grows back by one block per second
(each growth is an allocation, counted as grows). Without --cooperate it keeps its whole
pool, and gmux evicts what the others need.
"""

import argparse
import os
import sys
import threading
import time

# tenant first: it installs the SIGTERM handler before the slow `import torch`.
from tenant import Report, Window, footprint, open_device, window_args

import torch  # noqa: E402

import torch_check as tc  # noqa: E402


class Pool:
    """The blocks; the event thread asks it to shrink, the main loop does it."""

    def __init__(self, blocks, block_numel, regrow_after):
        self.block_numel = block_numel
        self.regrow_after = regrow_after
        self.full = blocks
        self.blocks = [torch.zeros(block_numel, device=tc.DEVICE) for _ in range(blocks)]
        self.smallest = blocks
        self.shrinks = 0
        self.grows = 0
        self.asked = threading.Event()
        self.last_ask = 0.0
        self.grown_at = 0.0

    def ask_shrink(self, _event=None):
        self.last_ask = time.monotonic()
        self.asked.set()

    def tend(self):
        """Shrinks by half if asked, else grows back by a block a second once calm."""
        now = time.monotonic()
        if self.asked.is_set():
            self.asked.clear()
            keep = max(1, len(self.blocks) // 2)
            del self.blocks[keep:]
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self.shrinks += 1
            self.smallest = min(self.smallest, len(self.blocks))
            self.grown_at = now
        elif len(self.blocks) < self.full and now - self.last_ask > self.regrow_after and now - self.grown_at >= 1.0:
            self.blocks.append(torch.zeros(self.block_numel, device=tc.DEVICE))
            self.grows += 1
            self.grown_at = now


def watch_own_swaps(pool):
    """Calls pool.ask_shrink on each `gmem.events` swap of this process's tenant."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import gmux

    tenant = gmux.current()
    if tenant is None:
        raise SystemExit("lp_cache.py --cooperate: run it under `gmux run` (no tenant to watch)")

    def follow():
        for e in gmux.events(tenant):
            if e.get("event") == "memory" and e.get("counter") == "swap":
                pool.ask_shrink(e)

    threading.Thread(target=follow, name="gmux-events", daemon=True).start()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pool-gib", type=float, default=12.0, help="the cache, GiB")
    p.add_argument("--block-mib", type=int, default=64, help="one block of it, MiB")
    p.add_argument("--cooperate", action="store_true", help="give blocks back on gmux swap events")
    p.add_argument("--regrow-after", type=float, default=10.0, help="seconds without an event before growing back")
    window_args(p)
    a = p.parse_args()
    window = Window(a)
    report = Report(model="lp_cache", pool_gib=a.pool_gib, block_mib=a.block_mib, cooperate=a.cooperate)
    if not open_device(a, report):
        return 1
    tc.fp32_ieee()
    block_numel = a.block_mib * 2**20 // 4
    blocks = max(1, int(a.pool_gib * 1024) // a.block_mib)
    rows = min(1024, block_numel // 1024)
    steps, done = 0, 0
    with window.setup():
        window.check()
        pool = Pool(blocks, block_numel, a.regrow_after)
        w = torch.randn(1024, 1024, device=tc.DEVICE)
        if a.cooperate:
            # The tenant exists once the first CUDA call has registered this process.
            tc.sync()
            watch_own_swaps(pool)
        tc.sync()
        window.begin()

    while not window.stopped:
        pool.tend()
        block = pool.blocks[done % len(pool.blocks)]
        (block[: rows * 1024].view(rows, 1024) @ w).sum()
        done += 1
        tc.sync()
        t = time.monotonic()
        if window.inside(t):
            steps += 1
        if window.over(t):
            break

    report["steps"] = steps
    window.fields(report)
    seconds = report["seconds"]
    report["steps_per_s"] = steps / seconds if seconds > 0 else 0.0
    report["blocks"] = blocks
    report["smallest_blocks"] = pool.smallest
    report["final_blocks"] = len(pool.blocks)
    report["shrinks"] = pool.shrinks
    report["grows"] = pool.grows
    footprint(report)
    report.emit(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
