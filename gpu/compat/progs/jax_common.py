"""JAX set-up shared by the JAX programs: no preallocation (the default BFC allocator
grows as needed), deterministic XLA GPU ops, no autotuning (which picks kernels by timing,
so two runs could pick different ones). Must be imported before jax."""

import os
import sys

import common

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
_flags = os.environ.get("XLA_FLAGS", "")
for _f in ("--xla_gpu_deterministic_ops=true", "--xla_gpu_autotune_level=0"):
    if _f.split("=")[0] not in _flags:
        _flags += " " + _f
os.environ["XLA_FLAGS"] = _flags.strip()
if not common.on_gpu():
    os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402


def setup():
    dev = jax.devices()[0]
    common.kv("jax_device", f"{dev.platform}:{getattr(dev, 'device_kind', '?')}".replace(" ", "_"))
    if common.on_gpu() and dev.platform != "gpu":
        print(f"error=JAX runs on {dev.platform}, not on the GPU", flush=True)
        sys.exit(3)
    return jax
