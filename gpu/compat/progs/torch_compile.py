"""torch.compile (Inductor, Triton kernels) of a small transformer: training then inference.

    torch_compile.py --mode default|reduce-overhead [--steps 4]

A 4-layer pre-norm transformer (512 wide, 2048 MLP, 8 heads, vocabulary 8192, sequence
256, batch 16) built from plain torch.nn modules; the model is compiled with the given
mode and trained for a few AdamW steps, then 4 inference batches run through a second
compiled copy in eval mode. reduce-overhead replays both as CUDA graphs (cudagraph trees).
The runner gives every run of a program the same TORCHINDUCTOR_CACHE_DIR, so runs after
the first reuse the first's kernels and autotuning choices. Saves losses, inference
logits and the final weights' checksum.
"""

import argparse

import common


def build(torch, vocab, width, heads, layers, seq):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.ln2 = nn.LayerNorm(width)
            self.fc1 = nn.Linear(width, 4 * width)
            self.fc2 = nn.Linear(4 * width, width)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, -1))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, width)
            self.pos = nn.Embedding(seq, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab)

        def forward(self, ids):
            x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return LM()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["default", "reduce-overhead"], required=True)
    p.add_argument("--steps", type=int, default=4)
    a = p.parse_args()

    torch = common.torch_setup()
    import torch._inductor.config as inductor_config

    inductor_config.deterministic = True  # no on-device benchmarking that changes numerics
    inductor_config.fallback_random = True
    dev = common.device()
    vocab, width, heads, layers, seq, batch = common.pick((8192, 512, 8, 4, 256, 16), (256, 32, 2, 1, 16, 2))
    torch.manual_seed(common.SEED)
    model = build(torch, vocab, width, heads, layers, seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = common.cpu_generator(torch)
    data = torch.randint(0, vocab, (a.steps + 4, batch, seq + 1), generator=g)

    train_step = torch.compile(model, mode=a.mode)
    losses = []
    graphs = common.on_gpu() and a.mode == "reduce-overhead"
    for step in range(a.steps):
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        ids = data[step].to(dev)
        logits = train_step(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        common.kv(f"loss{step}", f"{losses[-1]:.6f}")

    model.eval()
    infer = torch.compile(model, mode=a.mode)
    outs = []
    with torch.no_grad():
        for i in range(4):
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            outs.append(infer(data[a.steps + i, :, :-1].to(dev))[:, -1].float().clone())
    checksum = sum(p.detach().double().sum() for p in model.parameters())
    common.save({"losses": losses, "last_logits": torch.stack(outs), "param_checksum": checksum})
    common.finish(torch)


if __name__ == "__main__":
    main()
