"""Deterministic PyTorch DDP training on several GPUs (NCCL), for scripts/gpu-multi.sh:

    torchrun --standalone --nproc_per_node=2 gpu/ddp_train.py --steps 30 --out losses.jsonl

The model is a pre-norm residual MLP stack (no attention, no embedding: every op used
has a deterministic CUDA kernel): Linear(features -> width), `depth` blocks of
LayerNorm -> Linear(width -> 4 width) -> GELU -> Linear(4 width -> width) added back,
LayerNorm, Linear(width -> classes). The defaults (width 2048, depth 6, 1024 features
and classes) give 206 M float32 parameters. Per GPU that is about 0.82 GB each of
parameters, gradients and DDP's gradient buckets, 1.65 GB of Adam state, and about
2 GB of activations at --batch 4096: measured on two lent H200s on 2026-11-27 (torch 2.11,
NCCL 2.28, `bash scripts/gpu-multi.sh ddp`),
5.70 GB allocated at the peak and 7.3 GiB reserved by PyTorch's caching allocator per
rank (6.6 GiB under gmux, NCCL_P2P_DISABLE=1), 116 ms a step (plain FP32, TF32 off; ~5 TFLOP
per GPU), 30 steps in ~5 s after ~15 s of start-up.

Data is synthetic, made on the GPU from a generator seeded per rank: inputs x ~ N(0, 1),
labels the argmax of x times a fixed random "teacher" matrix (the same on every rank),
so the loss falls as it trains. Nothing is downloaded.

Bitwise reproducibility: fixed seeds, torch.use_deterministic_algorithms(True),
CUBLAS_WORKSPACE_CONFIG=:4096:8 (set here before torch is imported unless already set),
cuDNN deterministic and not benchmarking, TF32 off. NCCL's all-reduce of two ranks adds
each element of one rank to the other's once, and IEEE addition is commutative, so the
sums do not depend on which algorithm, protocol or transport (P2P, SHM) NCCL picks; with
more than two ranks the order of the additions may depend on them.

Rank 0 writes one JSON line per step to --out: {"step": i, "loss": float, "loss_hex":
float.hex(loss), "loss_mean_hex": the loss averaged over the ranks (all-reduce), "step_s":
seconds}, then one line {"final": true, "param_sum_hex": ..., "ranks_agree": bool}: the
sum of all parameters in float64, and whether every rank's sum is the same. At the end
every rank prints `ddp: rank R peak_reserved_bytes=B peak_allocated_bytes=A`, and rank 0
`ddp: done steps=S`.
"""

import argparse
import json
import os
import sys
import time

# Before torch (and so CUDA and NCCL) is loaded: cuBLAS's deterministic workspace, and
# NVLink SHARP off (NCCL's NVLS multicast memory is not for processes under gmux).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


class Block(nn.Module):
    """x + Linear(GELU(Linear(LayerNorm(x))))."""

    def __init__(self, width, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, features, width, depth, classes):
        super().__init__()
        self.inp = nn.Linear(features, width)
        self.blocks = nn.ModuleList(Block(width, 4 * width) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", required=True, help="JSON lines of the losses (rank 0 writes it)")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--features", type=int, default=1024)
    p.add_argument("--classes", type=int, default=1024)
    p.add_argument("--batch", type=int, default=4096, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args()


def deterministic(seed):
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(seed)  # every device's generator too


def main():
    a = parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # The device first, before anything touches CUDA (the process group included).
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    dist.init_process_group(backend="nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    deterministic(a.seed)

    # The same initial parameters on every rank (DDP also broadcasts rank 0's).
    with torch.device(dev):
        net = Net(a.features, a.width, a.depth, a.classes)
    params = sum(p.numel() for p in net.parameters())
    model = DDP(net, device_ids=[local_rank], output_device=local_rank)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)

    teacher_gen = torch.Generator(device=dev)
    teacher_gen.manual_seed(a.seed + 1)
    teacher = torch.randn((a.features, a.classes), generator=teacher_gen, device=dev) / a.features**0.5
    data_gen = torch.Generator(device=dev)
    data_gen.manual_seed(a.seed + 7919 * (rank + 1))

    if rank == 0:
        nccl = torch.cuda.nccl.version()
        nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        print(
            f"ddp: world={world} params={params} width={a.width} depth={a.depth} batch={a.batch}/rank steps={a.steps} "
            f"torch={torch.__version__} nccl={nccl} device={torch.cuda.get_device_name(dev)}",
            flush=True,
        )
    out = open(a.out, "w") if rank == 0 else None
    t_start = time.perf_counter()
    for step in range(a.steps):
        t0 = time.perf_counter()
        x = torch.randn((a.batch, a.features), generator=data_gen, device=dev)
        y = (x @ teacher).argmax(dim=1)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        value, mean_value = loss.item(), mean.item()
        dt = time.perf_counter() - t0
        if out is not None:
            row = {"step": step, "loss": value, "loss_hex": value.hex(), "loss_mean_hex": mean_value.hex(), "step_s": round(dt, 4)}
            out.write(json.dumps(row) + "\n")
            out.flush()
            if step % 10 == 0 or step == a.steps - 1:
                print(f"ddp: step {step} loss={value:.6f} ({value.hex()}) {dt * 1e3:.0f} ms", flush=True)

    torch.cuda.synchronize(dev)
    train_s = time.perf_counter() - t_start
    # Every rank's parameters must be the same: their float64 sums, gathered.
    with torch.no_grad():
        s = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1)
    sums = [torch.zeros_like(s) for _ in range(world)]
    dist.all_gather(sums, s)
    sums = [t.item() for t in sums]
    if out is not None:
        out.write(json.dumps({"final": True, "param_sum_hex": sums[0].hex(), "ranks_agree": len(set(sums)) == 1}) + "\n")
        out.close()
    print(
        f"ddp: rank {rank} peak_reserved_bytes={torch.cuda.max_memory_reserved(dev)} "
        f"peak_allocated_bytes={torch.cuda.max_memory_allocated(dev)} train_s={train_s:.2f}",
        flush=True,
    )
    dist.barrier()
    if rank == 0:
        print(f"ddp: done steps={a.steps} ranks_agree={len(set(sums)) == 1}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
