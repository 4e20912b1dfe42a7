"""GPT-2 (transformers, random weights from a config) training steps.

    gpt2_train.py [--steps 5] [--batch 8] [--seq 256]

8 layers, 768 wide, 16384-token vocabulary (about 70 M parameters), eager attention,
dropout 0.1 (seeded), AdamW. Saves the losses, the last step's logits of the first
sequence, the gradients of the token embedding and of the last MLP and a checksum of
the weights. The runner also starts it under PYTORCH_CUDA_ALLOC_CONF settings.
"""

import argparse

import common


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    a = p.parse_args()

    torch = common.torch_setup()
    dev = common.device()
    cfg = common.gpt2_config()
    model = common.gpt2_model(torch, cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    batch, seq = common.pick(a.batch, 2), common.pick(a.seq, 32)
    g = common.cpu_generator(torch)
    data = torch.randint(0, cfg.vocab_size, (a.steps, batch, seq), generator=g)

    losses = []
    for step in range(a.steps):
        ids = data[step].to(dev)
        out = model(input_ids=ids, labels=ids)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(out.loss.item())
        common.kv(f"loss{step}", f"{losses[-1]:.6f}")
    block = model.transformer.h[-1]
    checksum = sum(p.detach().double().sum() for p in model.parameters())
    common.save(
        {
            "losses": losses,
            "logits0": out.logits[0].float(),
            "grad_wte": model.transformer.wte.weight.grad,
            "grad_mlp": block.mlp.c_fc.weight.grad,
            "param_checksum": checksum,
        }
    )
    common.finish(torch)


if __name__ == "__main__":
    main()
