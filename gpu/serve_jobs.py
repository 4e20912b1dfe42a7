"""A serving loop that marks each request as a job with ``gmux.job``: torchvision
ResNet-18 at batch 1 ("small") and ResNet-50 at batch 16 ("large", every fourth
request), random weights, inference only.

    serve_jobs.py [--requests N] [--pings P]

Prints one line: the requests' time per kind (median, ms), and, under ``gmux run``,
the round trip of P pings through gmuxd's dispatcher and whether the daemon counted
the same jobs (``daemon=match``) as the loop marked. Natively, ``tracked=0`` and the
marks do nothing.
"""

import argparse
import os
import statistics
import time

import sys

import torch
import torchvision

try:
    import gmux
except ImportError:  # not installed: the repository's copy
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import gmux


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--pings", type=int, default=2000)
    a = p.parse_args()
    torch.manual_seed(0)
    kinds = {
        "small": (torchvision.models.resnet18().cuda().eval(), torch.randn(1, 3, 224, 224, device="cuda"), 2.0),
        "large": (torchvision.models.resnet50().cuda().eval(), torch.randn(16, 3, 224, 224, device="cuda"), 25.0),
    }
    took = {k: [] for k in kinds}
    with torch.no_grad():
        for k, (m, x, _) in kinds.items():  # warm-up, unmarked
            m(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(a.requests):
            name = "large" if i % 4 == 0 else "small"
            model, x, expected = kinds[name]
            t = time.perf_counter()
            with gmux.job(name, expected_ms=expected):
                model(x)
                torch.cuda.synchronize()
            took[name].append((time.perf_counter() - t) * 1e3)
        wall = time.perf_counter() - t0
    parts = [f"tracked={int(gmux.jobs_tracked())}", f"requests={a.requests}", f"req_per_s={a.requests / wall:.1f}"]
    parts += [f"{k}_p50_ms={statistics.median(v):.3f}" for k, v in took.items()]
    if gmux.jobs_tracked():
        rtt = sorted(r for r in (gmux.ping() for _ in range(a.pings)) if r is not None)
        if len(rtt) == a.pings:
            parts += [f"ping_p50_us={rtt[len(rtt) // 2]:.2f}", f"ping_p99_us={rtt[int(len(rtt) * 0.99)]:.2f}"]
        else:
            parts.append(f"pings_answered={len(rtt)}/{a.pings}")
        # The pings came after every mark, in the same ring: the daemon has taken them all.
        me = os.environ.get("GMUX_TENANT", "")
        jobs = next((t.get("jobs") for t in gmux.tenants() if t["name"] == me), None) or {}
        daemon = {k["name"]: k["done"] for k in jobs.get("kinds", [])}
        ok = daemon == {k: len(v) for k, v in took.items()} and jobs.get("running") == 0 and jobs.get("refused") == 0
        parts.append(f"daemon={'match' if ok else 'MISMATCH'}")
        parts += [f"daemon_{k}_mean_ms={m['mean_ms']:.3f}" for k in kinds for m in jobs.get("kinds", []) if m["name"] == k]
    print(" ".join(parts), flush=True)


if __name__ == "__main__":
    main()
