"""One serving tenant of `gmux bench serving`: a torchvision model (random weights,
float32, inference) answering requests that arrive open-loop, with lognormal gaps.

    serve_load.py --model resnet18 --batch 1 --rate 50 --sigma 1.5 --duration 20 [--start-at T] [--out F]
    serve_load.py --calibrate [--out F]      # each model of MODELS alone: its time per request

Requests are served one at a time, in arrival order: a request that arrives while an
earlier one runs waits for it, and its latency (completion - arrival) counts the wait.
Each request is one `gmux.job` named after the model (a no-op outside gmux). The gaps
between arrivals are lognormal with mean 1/rate and shape --sigma, from a generator
seeded with --seed, so every system sees the same arrivals.

Reported for the requests that arrive inside the window: arrived, requests (completed
inside it), missed (not), p50_ms, p99_ms, mean_ms, max_ms, req_per_s, and latencies_ms
(at most 5,000, evenly spaced). --calibrate reports service_ms per model: the median of 20 requests
after 5 warm-ups, each model alone.
"""

import argparse
import math
import os
import random
import sys
import time

from tenant import Report, Window, footprint, open_device, percentile, window_args

import torch  # noqa: E402
import torchvision  # noqa: E402

import torch_check as tc  # noqa: E402

try:
    import gmux
except ImportError:  # not installed: the repository's copy
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import gmux

# name: (constructor, batch, kind). Short requests take 1.5-4 ms alone on an H200, long
# ones about ten times as long.
MODELS = {
    "resnet18": (torchvision.models.resnet18, 1, "short"),
    "mobilenet_v3_small": (torchvision.models.mobilenet_v3_small, 1, "short"),
    "squeezenet1_1": (torchvision.models.squeezenet1_1, 1, "short"),
    "resnet50": (torchvision.models.resnet50, 128, "long"),
    "vit_b_16": (torchvision.models.vit_b_16, 32, "long"),
    "vgg16": (torchvision.models.vgg16, 64, "long"),
}
MAX_LATENCIES = 5_000


def build(name, batch):
    torch.manual_seed(tc.SEED)
    model = MODELS[name][0]().eval().to(tc.DEVICE)
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(tc.SEED)).to(tc.DEVICE)
    return model, x


def calibrate(a):
    report = Report()
    if not open_device(a, report):
        return 1
    with torch.inference_mode():
        for name, (_, batch, kind) in MODELS.items():
            model, x = build(name, batch)
            for _ in range(5):
                model(x)
            tc.sync()
            took = []
            for _ in range(20):
                t = time.perf_counter()
                model(x)
                tc.sync()
                took.append((time.perf_counter() - t) * 1e3)
            report[f"{name}.service_ms"] = sorted(took)[len(took) // 2]
            report[f"{name}.batch"] = batch
            report[f"{name}.kind"] = kind
            del model, x
    report.emit(a.out)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calibrate", action="store_true")
    p.add_argument("--model", choices=sorted(MODELS))
    p.add_argument("--batch", type=int)
    p.add_argument("--rate", type=float, help="requests per second, on average")
    p.add_argument("--sigma", type=float, default=1.5, help="shape of the lognormal gaps")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--expected-ms", type=float, default=0.0, help="the estimate each job carries")
    window_args(p)
    a = p.parse_args()
    if a.calibrate:
        return calibrate(a)
    if not (a.model and a.rate and a.rate > 0):
        p.error("--model and a positive --rate are needed (or --calibrate)")
    batch = a.batch or MODELS[a.model][1]
    window = Window(a)
    report = Report(model=a.model, batch=batch, rate=a.rate, sigma=a.sigma, kind=MODELS[a.model][2])
    if not open_device(a, report):
        return 1
    tc.fp32_ieee()
    gaps = random.Random(a.seed)
    mu = math.log(1.0 / a.rate) - a.sigma**2 / 2  # mean gap 1/rate
    latencies, arrived, missed = [], 0, 0
    with torch.inference_mode():
        with window.setup():
            window.check()
            model, x = build(a.model, batch)
            for _ in range(5):
                model(x)
            tc.sync()
            window.begin()
        due = time.monotonic()
        while not window.stopped:
            due += gaps.lognormvariate(mu, a.sigma)
            if due > window.end:
                break
            while (now := time.monotonic()) < due:
                time.sleep(min(due - now, 0.05))
                if window.stopped:
                    break
            with gmux.job(a.model, expected_ms=a.expected_ms):
                model(x)
                tc.sync()
            done = time.monotonic()
            if window.inside(due):
                arrived += 1
                if done <= window.end:
                    latencies.append(done - due)
                else:
                    missed += 1
            if window.over(done):
                break
    # Arrivals inside the window never started: the queue left at its end.
    due += gaps.lognormvariate(mu, a.sigma)
    while due <= window.end and not window.stopped:
        if due >= window.start:
            arrived += 1
            missed += 1
        due += gaps.lognormvariate(mu, a.sigma)
    ms = sorted(1000.0 * v for v in latencies)
    report["arrived"] = arrived
    report["requests"] = len(ms)
    report["missed"] = missed
    for name, q in (("p50_ms", 50), ("p99_ms", 99)):
        report[name] = percentile(ms, q)
    report["mean_ms"] = sum(ms) / len(ms) if ms else None
    report["max_ms"] = ms[-1] if ms else None
    window.fields(report)
    report["req_per_s"] = len(ms) / window.seconds() if window.seconds() > 0 else 0.0
    report["latencies_ms"] = ms[:: max(1, math.ceil(len(ms) / MAX_LATENCIES))]
    footprint(report)
    report.emit(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
