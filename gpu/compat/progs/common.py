"""Helpers shared by the Python programs of the compatibility corpus.

Every program writes the arrays that matter to the path in GMUX_COMPAT_OUT as an .npz
(written to a temporary name and renamed, so a program that dies leaves no result) and
prints key=value lines: time_s, the framework's own peak memory where it has one, and
status=ok last.

GMUX_COMPAT_DEVICE=cpu runs a program's logic on the CPU with small sizes (a dry run on a
machine without a GPU; the parts that need CUDA are skipped there). It is not used on the
GPU machine.
"""

import os
import sys
import time
import warnings

# Deterministic cuBLAS; must be in the environment before cuBLAS is initialised.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
# Inductor (torch.compile, also when transformers compiles for a static cache): no
# on-device benchmarking that changes numerics. Read when torch._inductor is imported.
os.environ.setdefault("TORCHINDUCTOR_DETERMINISTIC", "1")

SEED = 1234
T0 = time.perf_counter()


def kv(key, value):
    print(f"{key}={value}", flush=True)


def device():
    return os.environ.get("GMUX_COMPAT_DEVICE", "cuda")


def on_gpu():
    return device() == "cuda"


def small():
    """True for the CPU dry run: programs shrink their sizes."""
    return not on_gpu()


def pick(gpu_value, cpu_value):
    return cpu_value if small() else gpu_value


def fp32_ieee(torch):
    """TF32 off: float32 matmuls and convolutions in full IEEE precision."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy setters warn about deprecation
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        except (AttributeError, RuntimeError):
            torch.backends.cuda.matmul.fp32_precision = "ieee"
            torch.backends.cudnn.conv.fp32_precision = "ieee"
            torch.backends.cudnn.rnn.fp32_precision = "ieee"


def torch_setup(deterministic=True):
    """Imports torch, seeds it and turns on deterministic algorithms; returns the module.

    Deterministic algorithms are on with warn_only=True: an op without a deterministic
    implementation warns on stderr instead of failing, and the runner's two native runs
    show whether it mattered.
    """
    import torch

    if on_gpu() and not torch.cuda.is_available():
        print("error=no CUDA device visible to torch", flush=True)
        sys.exit(3)
    torch.manual_seed(SEED)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    fp32_ieee(torch)
    if on_gpu():
        kv("device", torch.cuda.get_device_name(0).replace(" ", "_"))
    return torch


def cpu_generator(torch, seed=SEED):
    """Inputs are drawn on the CPU so they do not depend on the GPU's RNG."""
    return torch.Generator().manual_seed(seed)


def to_numpy(value):
    """numpy array of a tensor (bfloat16 as float32, which is exact), list or number."""
    import numpy as np

    if hasattr(value, "detach"):  # a torch tensor
        import torch

        t = value.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.cpu().contiguous().numpy()
    if type(value).__module__.startswith("cupy"):  # a CuPy array
        return value.get()
    return np.asarray(value)


def save(arrays):
    """Writes {name: array} to GMUX_COMPAT_OUT (.npz). Without the variable, saves nothing."""
    import numpy as np

    path = os.environ.get("GMUX_COMPAT_OUT")
    out = {k: to_numpy(v) for k, v in arrays.items()}
    for k, v in out.items():
        if v.dtype == object:
            raise TypeError(f"result {k} is not a numeric array")
    if not path:
        kv("saved", "nothing (GMUX_COMPAT_OUT unset)")
        return
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        np.savez(f, **out)
    os.replace(tmp, path)
    kv("saved", f"{path} arrays={len(out)}")


def torch_peak(torch):
    if on_gpu() and torch.cuda.is_initialized():
        kv("torch_max_reserved_bytes", torch.cuda.max_memory_reserved())
        kv("torch_max_allocated_bytes", torch.cuda.max_memory_allocated())


def finish(torch=None):
    if torch is not None:
        if on_gpu():
            torch.cuda.synchronize()
        torch_peak(torch)
    kv("time_s", f"{time.perf_counter() - T0:.3f}")
    kv("status", "ok")


def gpt2_config(n_layer=8, n_embd=768, n_head=12, vocab=16384, positions=1024, dropout=0.1, init=0.02):
    """A GPT-2 configuration for random weights (nothing is downloaded). Generation uses
    init=0.2: with the default 0.02 a random model repeats one token."""
    from transformers import GPT2Config

    if small():
        n_layer, n_embd, n_head, vocab, positions = 2, 64, 4, 512, 256
    return GPT2Config(
        vocab_size=vocab,
        n_positions=positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        initializer_range=init,
    )


def gpt2_model(torch, config, attn="eager"):
    """GPT2LMHeadModel with random weights from a fixed seed, eager attention by default
    (deterministic backward)."""
    from transformers import GPT2LMHeadModel

    torch.manual_seed(SEED)
    try:
        model = GPT2LMHeadModel._from_config(config, attn_implementation=attn)
    except (TypeError, ValueError):
        config._attn_implementation = attn
        model = GPT2LMHeadModel(config)
    return model.to(device())
