"""GPT-2 greedy decoding with a static KV cache, one decode step captured as a CUDA graph.

    gpt2_static_cudagraph.py [--batch 8] [--prompt 32] [--new-tokens 96]

The model is transformers' GPT2LMHeadModel (random weights, 12 layers, 768 wide); the
decode step runs its modules (embeddings, ln_1, c_attn, c_proj, MLP, ln_f, lm_head) with
attention over preallocated key/value tensors of the full length, indexed by a position
held in a device tensor, so that the same graph serves every position. The step is
captured once with torch.cuda.graph (after warm-up on a side stream) and replayed for the
prompt and for every new token. At the end the whole sequence goes through the model's
own forward once, and the program prints how many greedy tokens that forward agrees with,
and the time per step of the loop over the prompt and the new tokens.
Saves the generated ids, per-step largest logits, the last logits and the forward's ids.
"""

import argparse
import math
import time

import common


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=96)
    a = p.parse_args()

    torch = common.torch_setup()
    dev = common.device()
    cfg = common.gpt2_config(n_layer=12, vocab=32000, dropout=0.0, init=0.2)
    model = common.gpt2_model(torch, cfg).eval()
    tr = model.transformer
    B, P, N = common.pick(a.batch, 2), common.pick(a.prompt, 8), common.pick(a.new_tokens, 8)
    T = P + N
    L, H, E = cfg.n_layer, cfg.n_head, cfg.n_embd
    D = E // H

    g = common.cpu_generator(torch)
    prompts = torch.randint(1, cfg.vocab_size, (B, P), generator=g).to(dev)

    # Static state: the caches, the input token, the position, the outputs.
    keys = torch.zeros(L, B, H, T, D, device=dev)
    values = torch.zeros(L, B, H, T, D, device=dev)
    tok = torch.zeros(B, dtype=torch.long, device=dev)
    pos = torch.zeros((), dtype=torch.long, device=dev)
    slots = torch.arange(T, device=dev)

    def step():
        h = tr.wte(tok) + tr.wpe(pos)  # [B, E]
        here = (slots == pos).view(T, 1)  # the slot this step writes
        future = slots > pos  # slots not written yet
        for i, block in enumerate(tr.h):
            x = block.ln_1(h)
            q, k, v = block.attn.c_attn(x).split(E, dim=-1)
            q, k, v = (t.view(B, H, 1, D) for t in (q, k, v))
            # Written with torch.where rather than index_copy_: no sort, no host sync,
            # nothing that could break the capture.
            keys[i].copy_(torch.where(here, k, keys[i]))
            values[i].copy_(torch.where(here, v, values[i]))
            s = (q @ keys[i].transpose(-1, -2)) / math.sqrt(D)  # [B, H, 1, T]
            s = s.masked_fill(future, float("-inf"))
            o = torch.softmax(s, dim=-1) @ values[i]  # [B, H, 1, D]
            h = h + block.attn.c_proj(o.reshape(B, E))
            h = h + block.mlp(block.ln_2(h))
        logits = model.lm_head(tr.ln_f(h))
        return logits, logits.argmax(dim=-1)

    with torch.no_grad():
        if common.on_gpu():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out_logits, out_next = step()
            keys.zero_()
            values.zero_()

            def run():
                graph.replay()
                return out_logits, out_next

            common.kv("cuda_graph", "captured")
        else:
            run = step

        generated, max_logits = [], []
        current = prompts[:, 0]
        if common.on_gpu():
            torch.cuda.synchronize()
        started = time.perf_counter()
        for t in range(T - 1):
            tok.copy_(current)
            pos.fill_(t)
            logits, nxt = run()
            if t + 1 < P:
                current = prompts[:, t + 1]
            else:
                current = nxt.clone()
                generated.append(current)
                max_logits.append(logits.max(dim=-1).values.clone())
        if common.on_gpu():
            torch.cuda.synchronize()
        common.kv("decode_ms_per_step", f"{(time.perf_counter() - started) * 1e3 / (T - 1):.4f}")
        last_logits = logits[0].clone()
        ids = torch.stack(generated, dim=1)  # [B, N]

        # The model's own forward over the whole sequence, for comparison.
        full = torch.cat([prompts, ids], dim=1)
        ref = model(input_ids=full[:, :-1]).logits[:, P - 1 :].argmax(dim=-1)
        agree = (ref == ids).float().mean().item()
    common.kv("generated", f"{tuple(ids.shape)}")
    common.kv("first_tokens", ids[0, :8].tolist())
    common.kv("agree_with_forward", f"{agree:.4f}")
    common.save(
        {
            "ids": ids,
            "max_logits": torch.stack(max_logits, dim=1),
            "last_logits0": last_logits,
            "forward_ids": ref,
        }
    )
    common.finish(torch)


if __name__ == "__main__":
    main()
