"""Real-program tenants for multi-tenant benchmarks: LLM decoding, DNN training and
fine-tuning, each counting its units of work inside a shared measurement window.

    workload.py --kind llm-decode [--layers 36 --width 1280 --heads 20] [--batch 8 --new-tokens 32 --prompt 64]
    workload.py --kind train-resnet50 [--batch 128]
    workload.py --kind train-vit [--batch 64]
    workload.py --kind finetune-gpt2 [--layers 24 --width 1024 --heads 16] [--batch 4 --seq 512]
    workload.py --kind llm-decode --layers 2 --width 64 --heads 4 --batch 2 --device cpu --duration 2   # dry run

llm-decode: a GPT-2-shaped model from transformers with random weights (GPT-2 large by
default: 774M parameters, 3.1 GB in fp32), greedy `generate` of --new-tokens tokens at
--batch from random prompts of --prompt tokens, in a loop. One unit is one token of one
sequence; a logits processor synchronizes after each decoding step (the prompt's prefill
included) and counts the step's --batch tokens if it ends inside the window (a whole
`generate` is too coarse a unit under memory pressure), and a stopping criterion ends a
`generate` once the window is over or a SIGTERM came. The KV cache grows with every
step and the kernels' grids with it: the command stream varies, as real decoding does.

train-resnet50, train-vit: torchvision ResNet-50 / ViT-B/16, random weights, SGD with
momentum on one synthetic batch of 224x224 images made once; one unit is one sample.

finetune-gpt2: GPT-2-shaped causal LM (GPT-2 medium by default), AdamW on random token
sequences; one unit is one sequence.

TF32 is off. Every iteration (decoding step) ends with a synchronize. Reported (key=value
lines and, with --out, one JSON object): units, units_per_s (over the window), unit,
footprint_bytes (torch.cuda.max_memory_reserved()), and the window's fields.
"""

import argparse
import os
import sys
import time

# tenant first: it installs the SIGTERM handler before the slow `import torch`.
from tenant import Report, Window, footprint, open_device, window_args

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_check as tc  # noqa: E402

SEED = 1234


def gpt2(a, dropout, init):
    """A GPT-2-shaped causal LM with random weights (nothing is downloaded), configured as
    the compatibility corpus's programs are."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "compat", "progs"))
    import common
    from transformers import GPT2LMHeadModel

    config = common.gpt2_config(n_layer=a.layers, n_embd=a.width, n_head=a.heads, vocab=a.vocab, dropout=dropout, init=init)
    torch.manual_seed(SEED)
    # Made on the device: initializing 774M parameters on the CPU takes 20 s.
    with torch.device(tc.DEVICE):
        return GPT2LMHeadModel(config)


def llm_decode(a, window, count):
    """Setup, then a loop of `generate` calls; `count(n)` after every decoding step."""
    from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

    # With the default initializer range of 0.02 a random model repeats one token.
    model = gpt2(a, 0.0, 0.2).eval()
    g = torch.Generator().manual_seed(SEED)
    prompts = torch.randint(1, a.vocab, (a.batch, a.prompt), generator=g).to(tc.DEVICE)

    class Step:
        """A logits processor that marks the end of each decoding step."""

        def __call__(self, input_ids, scores):
            tc.sync()
            count(a.batch)
            return scores

    class Over(StoppingCriteria):
        """Ends a `generate` once the window is over (or a signal came)."""

        def __call__(self, input_ids, scores, **kwargs):
            over = window.start != float("inf") and window.over(time.monotonic())
            return torch.full((input_ids.shape[0],), over, dtype=torch.bool, device=input_ids.device)

    kwargs = dict(
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=a.new_tokens,
        min_new_tokens=a.new_tokens,
        do_sample=False,
        pad_token_id=0,
        logits_processor=LogitsProcessorList([Step()]),
        stopping_criteria=StoppingCriteriaList([Over()]),
    )
    with torch.no_grad():
        model.generate(prompts, **kwargs)  # warm-up, before the window
        yield
        while True:
            model.generate(prompts, **kwargs)
            yield


def train(loss, opt, batch, count):
    """Training steps forever: forward (`loss()`), backward, optimizer step, synchronize."""
    while True:
        value = loss()
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()
        tc.sync()
        count(batch)
        yield


def train_vision(a, window, count):
    import torchvision

    torch.manual_seed(SEED)
    make = torchvision.models.resnet50 if a.kind == "train-resnet50" else torchvision.models.vit_b_16
    model = make(weights=None).to(tc.DEVICE).train()
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(a.batch, 3, 224, 224, generator=g).to(tc.DEVICE)
    y = torch.randint(0, 1000, (a.batch,), generator=g).to(tc.DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return train(lambda: F.cross_entropy(model(x), y), opt, a.batch, count)


def finetune_gpt2(a, window, count):
    model = gpt2(a, 0.1, 0.02).train()
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(1, a.vocab, (a.batch, a.seq), generator=g).to(tc.DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    return train(lambda: model(ids, labels=ids).loss, opt, a.batch, count)


KINDS = {
    "llm-decode": (llm_decode, "token"),
    "train-resnet50": (train_vision, "sample"),
    "train-vit": (train_vision, "sample"),
    "finetune-gpt2": (finetune_gpt2, "sequence"),
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kind", choices=sorted(KINDS), required=True)
    p.add_argument("--batch", type=int, help="sequences or images per iteration (default: per kind)")
    p.add_argument("--layers", type=int, help="GPT-2 layers (llm-decode 36, finetune-gpt2 24)")
    p.add_argument("--width", type=int, help="GPT-2 width (llm-decode 1280, finetune-gpt2 1024)")
    p.add_argument("--heads", type=int, help="GPT-2 heads (llm-decode 20, finetune-gpt2 16)")
    p.add_argument("--vocab", type=int, default=50257, help="GPT-2 vocabulary")
    p.add_argument("--new-tokens", type=int, default=32, help="llm-decode: tokens per generate")
    p.add_argument("--prompt", type=int, default=64, help="llm-decode: prompt tokens")
    p.add_argument("--seq", type=int, default=512, help="finetune-gpt2: tokens per sequence")
    window_args(p)
    a = p.parse_args()
    large = a.kind == "llm-decode"
    a.layers = a.layers or (36 if large else 24)
    a.width = a.width or (1280 if large else 1024)
    a.heads = a.heads or (20 if large else 16)
    a.batch = a.batch or {"llm-decode": 8, "train-resnet50": 128, "train-vit": 64, "finetune-gpt2": 4}[a.kind]
    run, unit = KINDS[a.kind]
    window = Window(a)
    report = Report(kind=a.kind, unit=unit, batch=a.batch)
    if a.kind in ("llm-decode", "finetune-gpt2"):
        report.update(layers=a.layers, width=a.width, heads=a.heads, vocab=a.vocab)
    if a.kind == "llm-decode":
        report.update(prompt=a.prompt, new_tokens=a.new_tokens)
    if a.kind == "finetune-gpt2":
        report.update(seq=a.seq)
    if not open_device(a, report):
        return 1
    tc.fp32_ieee()
    torch.backends.cudnn.benchmark = False

    units = [0]

    def count(n):
        t = time.monotonic()
        if window.inside(t) and t <= window.stop_t:
            units[0] += n

    report["first_iter_s"] = None
    with window.setup():
        window.check()
        t0 = time.monotonic()
        loop = run(a, window, count)
        next(loop)  # setup and the first iteration
        report["first_iter_s"] = time.monotonic() - t0
        window.begin()
    marked = tc.DEVICE != "cuda"
    while not window.over(time.monotonic()):
        if not marked and time.monotonic() >= window.start:
            torch.cuda.profiler.start()  # marks the first iteration from the window's opening in a trace gmux records
            marked = True
        next(loop)

    report["units"] = units[0]
    window.fields(report)
    seconds = report["seconds"]
    report["units_per_s"] = units[0] / seconds if seconds > 0 else 0.0
    footprint(report)
    report.emit(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
