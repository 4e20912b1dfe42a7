"""GPT-2 (transformers, random weights) greedy generation.

    gpt2_generate.py [--static] [--new-tokens 96] [--batch 16] [--prompt 64]

Without --static, the default dynamic KV cache. With --static, `cache_implementation=
"static"`: transformers allocates a StaticCache and, on a CUDA device, compiles the
decoding forward with torch.compile(mode="reduce-overhead"), i.e. replays it as CUDA
graphs. Saves the generated token ids and, per step, the largest logit of each sequence.
"""

import argparse

import common


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--static", action="store_true")
    p.add_argument("--new-tokens", type=int, default=96)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--prompt", type=int, default=64)
    a = p.parse_args()

    torch = common.torch_setup()
    dev = common.device()
    cfg = common.gpt2_config(n_layer=12, vocab=32000, dropout=0.0, init=0.2)
    model = common.gpt2_model(torch, cfg, attn="eager" if not a.static else "sdpa").eval()
    batch, prompt, new = common.pick(a.batch, 2), common.pick(a.prompt, 8), common.pick(a.new_tokens, 8)
    g = common.cpu_generator(torch)
    # Token 0 is the end-of-sequence token: prompts avoid it, and min_new_tokens keeps
    # every sequence going to the full length.
    ids = torch.randint(1, cfg.vocab_size, (batch, prompt), generator=g).to(dev)
    mask = torch.ones_like(ids)
    kwargs = dict(
        attention_mask=mask,
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
        pad_token_id=0,
        return_dict_in_generate=True,
        output_scores=True,
    )
    if a.static:
        kwargs["cache_implementation"] = "static"
    with torch.no_grad():
        out = model.generate(ids, **kwargs)
    seqs = out.sequences
    scores = torch.stack([s.float().max(dim=-1).values for s in out.scores], dim=1)  # [batch, new]
    common.kv("generated", f"{tuple(seqs.shape)}")
    common.kv("first_tokens", seqs[0, prompt : prompt + 8].tolist())
    common.save({"sequences": seqs, "max_scores": scores, "last_scores0": out.scores[-1][0].float()})
    common.finish(torch)


if __name__ == "__main__":
    main()
