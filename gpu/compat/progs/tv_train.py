"""torchvision CNN / ViT training steps (forward + backward + optimizer) with random weights.

    tv_train.py --model resnet50 --precision fp32|fp16|bf16 [--channels-last]
                [--batch 32] [--size 160] [--steps 3]

fp16 runs under autocast with a GradScaler, bf16 under autocast. ViT attention uses the
math backend of scaled_dot_product_attention (the fused backwards are not deterministic).
Saves the losses, the last step's logits, two gradients and a checksum of the weights.
"""

import argparse
import contextlib

import common


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=160)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    a = p.parse_args()

    torch = common.torch_setup()
    import torchvision
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = common.device()
    batch = common.pick(a.batch, 2)
    size = common.pick(a.size, 64)
    kwargs = {"weights": None}
    if a.model.startswith("vit"):
        kwargs["image_size"] = size
    torch.manual_seed(common.SEED)
    model = torchvision.models.get_model(a.model, **kwargs).to(dev).train()
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[a.precision]
    scaler = torch.amp.GradScaler(dev) if a.precision == "fp16" else None

    g = common.cpu_generator(torch)
    images = torch.randn(a.steps, batch, 3, size, size, generator=g)
    labels = torch.randint(0, 1000, (a.steps, batch), generator=g)

    losses = []
    first_param = next(model.parameters())
    last_param = list(model.parameters())[-2]  # the classifier's weight
    with sdpa_kernel(SDPBackend.MATH):
        for step in range(a.steps):
            x = images[step].to(dev).contiguous(memory_format=fmt)
            y = labels[step].to(dev)
            amp = torch.autocast(dev, dtype=dtype) if dtype is not None else contextlib.nullcontext()
            with amp:
                logits = model(x)
                loss = torch.nn.functional.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            losses.append(loss.item())
            common.kv(f"loss{step}", f"{losses[-1]:.6f}")
    checksum = sum(p.detach().double().sum() for p in model.parameters())
    common.save(
        {
            "losses": losses,
            "logits": logits.float(),
            "grad_first": first_param.grad,
            "grad_last": last_param.grad,
            "param_checksum": checksum,
        }
    )
    common.finish(torch)


if __name__ == "__main__":
    main()
