"""Unmodified PyTorch workloads for checking gmux on a real GPU.

    torch_check.py --model resnet50 --mode check --out F     8 inference batches; saves the logits
    torch_check.py --model transformer --mode check --out F  30 training steps; saves losses + params
    torch_check.py --model resnet50 --mode bench --iters N   inference throughput

Everything is seeded and deterministic (cuDNN deterministic, deterministic algorithms,
no TF32, math attention), so two native runs should agree bit for bit and a run under
gmux should agree with them. Results are printed as key=value lines.
"""

import argparse
import os
import sys
import time
import warnings

# Must be set before CUDA/cuBLAS is initialised for deterministic cuBLAS.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

BATCH = 64
SEED = 1234
DEVICE = "cuda"  # --device cpu runs the same code without a GPU (a dry run of this script)


def kv(key, value):
    print(f"{key}={value}", flush=True)


def make_deterministic():
    torch.manual_seed(SEED)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)
    fp32_ieee()


def fp32_ieee():
    """TF32 off: float32 matmuls and convolutions in full IEEE precision."""
    # The legacy setters also update the newer fp32_precision state
    # consistently; setting only the new per-op API leaves the legacy cuDNN flag at
    # True, which PyTorch >= 2.9 may reject later as a "mix of legacy and new APIs".
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy setters warn about deprecation
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        except (AttributeError, RuntimeError):
            torch.backends.cuda.matmul.fp32_precision = "ieee"
            torch.backends.cudnn.conv.fp32_precision = "ieee"
            torch.backends.cudnn.rnn.fp32_precision = "ieee"


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def print_footprint():
    on_gpu = DEVICE == "cuda"
    kv("footprint_bytes", torch.cuda.max_memory_reserved() if on_gpu else 0)
    kv("max_allocated_bytes", torch.cuda.max_memory_allocated() if on_gpu else 0)


# ---------------------------------------------------------------- resnet50


def resnet50():
    import torchvision

    torch.manual_seed(SEED)
    model = torchvision.models.resnet50(weights=None)
    return model.eval().to(DEVICE)


def random_images(n_batches, generator):
    """CPU-generated batches, so the inputs do not depend on the GPU's RNG."""
    return [torch.randn(BATCH, 3, 224, 224, generator=generator) for _ in range(n_batches)]


def resnet50_check(out):
    model = resnet50()
    g = torch.Generator().manual_seed(SEED)
    logits = []
    t0 = time.perf_counter()
    with torch.no_grad():
        for x in random_images(8, g):
            logits.append(model(x.to(DEVICE)).cpu())
    sync()
    kv("time_s", f"{time.perf_counter() - t0:.3f}")
    torch.save({"logits": torch.stack(logits)}, out)
    kv("saved", out)
    print_footprint()


def resnet50_bench(iters):
    model = resnet50()
    x = random_images(1, torch.Generator().manual_seed(SEED))[0].to(DEVICE)
    timed = DEVICE == "cuda"
    with torch.no_grad():
        for _ in range(10):
            model(x)
        sync()
        if timed:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        if timed:
            start.record()
        for _ in range(iters):
            model(x)
        if timed:
            end.record()
            end.synchronize()
        wall_s = time.perf_counter() - t0
    event_s = start.elapsed_time(end) / 1000.0 if timed else wall_s
    kv("iters", iters)
    kv("batch", BATCH)
    kv("images_per_s", f"{iters * BATCH / event_s:.2f}")
    kv("wall_images_per_s", f"{iters * BATCH / wall_s:.2f}")
    print_footprint()


# ---------------------------------------------------------------- transformer

VOCAB, D_MODEL, HEADS, LAYERS, SEQ, TBATCH, STEPS = 8000, 512, 8, 6, 256, 32, 30


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Embedding(SEQ, D_MODEL)
        layer = nn.TransformerEncoderLayer(
            D_MODEL, HEADS, dim_feedforward=4 * D_MODEL, dropout=0.1, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, VOCAB)
        mask = nn.Transformer.generate_square_subsequent_mask(SEQ)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, tokens):
        pos = torch.arange(tokens.size(1), device=tokens.device)
        h = self.tok(tokens) + self.pos(pos)
        h = self.encoder(h, mask=self.causal_mask, is_causal=True)
        return self.head(h)


def transformer_check(out):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(SEED)
    model = TinyLM().to(DEVICE).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(SEED)
    data = torch.randint(0, VOCAB, (STEPS, TBATCH, SEQ + 1), generator=g)
    losses = []
    t0 = time.perf_counter()
    # The math backend is deterministic; the fused attention backwards need not be.
    with sdpa_kernel(SDPBackend.MATH):
        for step in range(STEPS):
            batch = data[step].to(DEVICE)
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    sync()
    kv("time_s", f"{time.perf_counter() - t0:.3f}")
    kv("first_loss", f"{losses[0]:.6f}")
    kv("last_loss", f"{losses[-1]:.6f}")
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    torch.save({"losses": losses, "state_dict": state}, out)
    kv("saved", out)
    print_footprint()


# ---------------------------------------------------------------- main


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", choices=["resnet50", "transformer"], required=True)
    p.add_argument("--mode", choices=["check", "bench"], required=True)
    p.add_argument("--out", help="torch.save file (check mode)")
    p.add_argument("--iters", type=int, default=50, help="timed iterations (bench mode)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.mode == "check" and not a.out:
        p.error("--mode check needs --out")
    if a.mode == "bench" and a.model != "resnet50":
        p.error("bench mode is for resnet50 only")
    global DEVICE
    DEVICE = a.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("error=no CUDA device", flush=True)
        return 1

    make_deterministic()
    kv("model", a.model)
    kv("mode", a.mode)
    name = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu"
    kv("device", name.replace(" ", "_"))
    if a.mode == "bench":
        resnet50_bench(a.iters)
    elif a.model == "resnet50":
        resnet50_check(a.out)
    else:
        transformer_check(a.out)
    kv("status", "ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
