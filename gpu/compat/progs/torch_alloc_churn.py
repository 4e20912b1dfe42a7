"""PyTorch caching-allocator churn: many tensors of mixed sizes allocated, used, freed.

    torch_alloc_churn.py [--rounds 40]

Each round allocates a few dozen tensors from 4 KiB to 64 MiB (sizes from a seeded
generator), fills them from pinned host memory with non_blocking copies and on a second
stream, combines them, frees a random half, and every 8 rounds calls
torch.cuda.empty_cache() so that segments go back to the driver and come again. A set of
long-lived tensors (about 600 MiB) stays throughout. Saves a float64 checksum per round
and the long-lived tensors' sums.
"""

import argparse
import random

import common


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=40)
    a = p.parse_args()

    torch = common.torch_setup()
    dev = common.device()
    gpu = common.on_gpu()
    rng = random.Random(common.SEED)
    scale = common.pick(1, 1 / 256)
    side = torch.cuda.Stream() if gpu else None
    g = common.cpu_generator(torch)

    keep = [torch.randn(int(n * scale), generator=g).to(dev) for n in (64 << 20, 48 << 20, 32 << 20, 16 << 20)]
    live = []
    sums = []
    for r in range(a.rounds):
        for _ in range(rng.randint(16, 48)):
            elems = max(1024, int(2 ** rng.uniform(10, 24) * scale))  # 4 KiB .. 64 MiB of float32
            host = torch.arange(elems, dtype=torch.float32) * ((r % 7) + 1) / elems
            if gpu:
                host = host.pin_memory()
            t = host.to(dev, non_blocking=True)
            if gpu and rng.random() < 0.3:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    t.mul_(1.5).add_(0.25)
                torch.cuda.current_stream().wait_stream(side)
                t.record_stream(side)
            live.append(t)
        rng.shuffle(live)
        acc = torch.zeros((), dtype=torch.float64, device=dev)
        for i, t in enumerate(live):
            k = keep[i % len(keep)]
            n = min(t.numel(), k.numel())
            acc += (t[:n] * k[:n]).double().sum()
        sums.append(acc)
        live = live[: len(live) // 2]
        if r % 8 == 7:
            live.clear()
            if gpu:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
    common.kv("rounds", a.rounds)
    common.save({"round_sums": torch.stack(sums), "keep_sums": torch.stack([k.double().sum() for k in keep])})
    common.finish(torch)


if __name__ == "__main__":
    main()
