"""Model-parallel training in one process over two GPUs, as PyTorch's model-parallel
tutorial does it: the first half of a transformer's layers on cuda:0, the second half and
the head on cuda:1, the activations copied from one to the other in every forward pass
and the gradients back in every backward pass. Bitwise deterministic, so that a run under
gmux can be compared with a native one step by step.

    python3 gpu/model_parallel.py --steps 20 --out losses.jsonl

Writes one JSON line per step (the loss and its bits), then a final line with the sum of
each device's parameters (bits) and `peak_reserved_bytes` of each device; prints
`device D peak_reserved_bytes=N` for each.
"""

import argparse
import json
import os
import struct

import torch
from torch import nn

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def bits(x):
    return struct.pack(">f", float(x)).hex()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=1536)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    if torch.cuda.device_count() < 2:
        raise SystemExit(f"model_parallel: needs 2 GPUs, torch sees {torch.cuda.device_count()}")
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    d0, d1 = torch.device("cuda:0"), torch.device("cuda:1")

    def layer():
        return nn.TransformerEncoderLayer(a.width, a.width // 128, 4 * a.width, dropout=0.0, batch_first=True, norm_first=True)

    half = a.layers // 2
    first = nn.Sequential(nn.Embedding(a.vocab, a.width), *[layer() for _ in range(half)]).to(d0)
    second = nn.Sequential(*[layer() for _ in range(a.layers - half)], nn.LayerNorm(a.width), nn.Linear(a.width, a.vocab)).to(d1)
    params = list(first.parameters()) + list(second.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    gen = torch.Generator().manual_seed(1)
    with open(a.out, "w") as out:
        for step in range(a.steps):
            tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)
            x, y = tokens[:, :-1].to(d0), tokens[:, 1:].to(d1)
            h = first(x).to(d1)
            loss = nn.functional.cross_entropy(second(h).reshape(-1, a.vocab), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            v = loss.item()
            out.write(json.dumps({"step": step, "loss": v, "loss_hex": bits(v)}) + "\n")
            out.flush()
            print(f"step {step} loss {v:.6f}", flush=True)
        sums = [bits(sum(float(q.double().sum()) for q in m.parameters())) for m in (first, second)]
        peaks = [torch.cuda.max_memory_reserved(d) for d in (d0, d1)]
        out.write(json.dumps({"final": True, "param_sum_hex": sums, "peak_reserved_bytes": peaks}) + "\n")
    for d, b in enumerate(peaks):
        print(f"device {d} peak_reserved_bytes={b}")


if __name__ == "__main__":
    main()
