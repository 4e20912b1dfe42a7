"""scaled_dot_product_attention forward in fp16 and bf16 on each backend.

    sdpa_attention.py

Queries, keys and values of [8, 16, 2048, 64] (fp16 and bf16), causal and not, through
the flash, memory-efficient, cuDNN and math backends (each forced with sdpa_kernel; a
backend that refuses the inputs is skipped and named), plus a multi-head attention
module in eval mode. Forward passes only, which are deterministic on each backend.
Saves every 8th query row of each output.
"""

import common


def main():
    torch = common.torch_setup()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = common.device()
    F = torch.nn.functional
    b, h, t, d = common.pick((8, 16, 2048, 64), (1, 2, 32, 16))
    g = common.cpu_generator(torch)
    q, k, v = (torch.randn(b, h, t, d, generator=g) for _ in range(3))
    results = {}
    backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }
    for dtype in (torch.float16, torch.bfloat16):
        qd, kd, vd = (x.to(dev, dtype) for x in (q, k, v))
        for name, backend in backends.items():
            for causal in (False, True):
                # The math backend materializes the attention matrix: run it on 2 batches.
                n = 2 if name == "math" else b
                key = f"{name}_{str(dtype).split('.')[-1]}_{'causal' if causal else 'full'}"
                try:
                    with sdpa_kernel(backend):
                        out = F.scaled_dot_product_attention(qd[:n], kd[:n], vd[:n], is_causal=causal)
                except RuntimeError as e:
                    if not any(m in str(e) for m in ("No available kernel", "No viable backend")):
                        raise
                    common.kv(f"skipped_{key}", str(e).splitlines()[0][:80].replace(" ", "_"))
                    continue
                results[key] = out[:, :, ::8].clone()  # every 8th query row is saved
    torch.manual_seed(common.SEED)
    mha = torch.nn.MultiheadAttention(h * d, h, batch_first=True).to(dev).eval()
    x = torch.randn(b, t // 4, h * d, generator=g).to(dev)
    with torch.no_grad():
        results["mha"] = mha(x, x, x, need_weights=False)[0]
    common.kv("outputs", len(results))
    common.save(results)
    common.finish(torch)


if __name__ == "__main__":
    main()
