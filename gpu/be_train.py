"""Best-effort tenant: ResNet-50 training in a loop, as fast as it is let run.

    be_train.py --duration 30 [--batch 64] [--extra-gib G --touch-every 10] [--start-at T] [--out F]
    be_train.py --duration 3 --warmup 1 --batch 2 --extra-gib 0.01 --device cpu   # dry run

SGD (lr 0.01, momentum 0.9) on one synthetic float32 batch of 224x224 images and labels made
once on the GPU; TF32 off. Each iteration (forward, loss, backward, step) ends with
torch.cuda.synchronize(); iterations that complete inside [start_at, start_at + duration]
are reported as iters and iters_per_s, with footprint_bytes = torch.cuda.max_memory_reserved().
--extra-gib G adds an idle float32 tensor of G GiB (zero-filled) that is touched with
x.add_(1) every --touch-every iterations, to put pressure on device memory.
Model from torch_check.resnet50 (needs torchvision, random weights).
"""

import argparse
import sys
import time

# tenant first: it installs the SIGTERM handler before the slow `import torch`.
from tenant import Report, Window, footprint, open_device, window_args

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_check as tc  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, default=64, help="images per iteration")
    p.add_argument("--extra-gib", type=float, default=0.0, help="extra idle tensor, GiB")
    p.add_argument("--touch-every", type=int, default=10, help="iterations between touches")
    window_args(p)
    a = p.parse_args()
    window = Window(a)
    report = Report(model="resnet50", batch=a.batch, extra_gib=a.extra_gib)
    if not open_device(a, report):
        return 1
    torch.backends.cudnn.benchmark = False
    tc.fp32_ieee()

    extra_numel = int(a.extra_gib * 2**30) // 4
    report.update(extra_bytes=extra_numel * 4, first_iter_s=None)
    loss, done, iters, touches = None, 0, 0, 0
    with window.setup():
        window.check()
        t0 = time.monotonic()
        model = tc.resnet50().train()  # seeded; tc.resnet50 returns it in eval mode
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(a.batch, 3, 224, 224, device=tc.DEVICE)
        y = torch.randint(0, 1000, (a.batch,), device=tc.DEVICE)
        extra = torch.zeros(extra_numel, device=tc.DEVICE) if extra_numel else None

        def step():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        loss = step()
        tc.sync()
        done = 1
        report["first_iter_s"] = time.monotonic() - t0
        window.begin()

    while not window.stopped:
        loss = step()
        done += 1
        if extra is not None and done % a.touch_every == 0:
            extra.add_(1)
            touches += 1
        tc.sync()
        t = time.monotonic()
        if window.inside(t):
            iters += 1
        if window.over(t):
            break

    report["iters"] = iters
    window.fields(report)
    seconds = report["seconds"]
    report["iters_per_s"] = iters / seconds if seconds > 0 else 0.0
    report["touches"] = touches
    report["last_loss"] = loss.item() if loss is not None else None
    footprint(report)
    report.emit(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
