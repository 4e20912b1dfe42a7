"""Real-time tenant: ResNet-50 inference at a fixed request rate, open loop.

    rt_infer.py --duration 30 [--rate 40] [--batch 8] [--kv-gib 0] [--start-at T] [--out F]
    rt_infer.py --duration 3 --rate 2 --batch 1 --device cpu   # dry run without a GPU

Requests are due every 1/rate seconds on a grid anchored at the window's start (requests
before it are the warm-up). For each request the script sleeps until its due time (never
earlier; no sleep once it is behind), runs one forward pass of a preallocated float32 batch
and torch.cuda.synchronize(), and takes latency = completion - due, so queueing behind
earlier requests counts. Requests that complete inside [start_at, start_at + duration]
are reported: requests, p50_ms, p90_ms, p99_ms, max_ms, mean_ms, and late (started more
than one period after due). missed counts the requests due in [start_at, start_at + duration)
that did not complete inside the window. Model from torch_check.resnet50 (needs torchvision, random
weights); eval mode, cudnn.benchmark off, TF32 off.

With --kv-gib G the tenant also keeps a G GiB pool, as a server keeps its KV cache, and
each request reads all of it after the forward pass: a working set of the model and the
pool, which others' memory use can push out between requests.
"""

import argparse
import math
import sys
import time

# tenant first: it installs the SIGTERM handler before the slow `import torch`.
from tenant import Report, Window, footprint, open_device, percentile, window_args

import torch  # noqa: E402

import torch_check as tc  # noqa: E402

WARMUP_PASSES = 5


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rate", type=float, default=40.0, help="requests per second")
    p.add_argument("--batch", type=int, default=8, help="images per request")
    p.add_argument("--kv-gib", type=float, default=0.0, help="a pool each request reads, GiB")
    window_args(p)
    a = p.parse_args()
    window = Window(a)
    report = Report(model="resnet50", batch=a.batch, rate=a.rate, kv_gib=a.kv_gib)
    if not open_device(a, report):
        return 1
    torch.backends.cudnn.benchmark = False
    tc.fp32_ieee()

    period = 1.0 / a.rate
    latencies, late, on_grid, i = [], 0, 0, None
    with torch.inference_mode():
        with window.setup():
            window.check()
            model = tc.resnet50()  # seeded, eval mode, on tc.DEVICE
            g = torch.Generator().manual_seed(tc.SEED)
            x = torch.randn(a.batch, 3, 224, 224, generator=g).to(tc.DEVICE)
            kv = torch.ones(int(a.kv_gib * 2**30) // 4, device=tc.DEVICE) if a.kv_gib > 0 else None

            def serve():
                model(x)
                if kv is not None:
                    kv.sum()

            for _ in range(WARMUP_PASSES):
                serve()
            tc.sync()
            window.begin()

        while not window.stopped:
            if i is None:  # the first request: the next due time on the grid
                i = math.ceil((time.monotonic() - window.start) * a.rate)
            due = window.start + i * period
            if due >= window.end:
                break
            while (now := time.monotonic()) < due:
                time.sleep(due - now)
            serve()
            tc.sync()
            done = time.monotonic()
            if window.inside(done):
                latencies.append(done - due)
                late += now - due > period
                on_grid += i >= 0
            if window.over(done):
                break
            i += 1

    # missed: requests due inside the measured part of the window that did not complete in it.
    limit = min(window.end, window.stop_t)
    n_due = sum(window.start + j * period < limit for j in range(int(a.duration * a.rate) + 2))
    report["requests"] = len(latencies)
    report["missed"] = max(0, n_due - on_grid)
    report["late"] = late
    latencies.sort()
    ms = [1000.0 * v for v in latencies]
    for name, q in (("p50_ms", 50), ("p90_ms", 90), ("p99_ms", 99)):
        report[name] = percentile(ms, q)
    report["max_ms"] = ms[-1] if ms else None
    report["mean_ms"] = sum(ms) / len(ms) if ms else None
    window.fields(report)
    footprint(report)
    report.emit(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
