"""Runs a PyTorch script with every aten operation's tensors written to stderr, for
comparing gmux's predicted working sets with the bytes the tensors span.

    GMUX_DEBUG=working-sets gmux run --standalone -- python3 gpu/ws_trace.py SCRIPT [ARGS...]

Around each operation it writes `gmux-op-begin<TAB>OP<TAB>RANGES` (the tensors of its
arguments) and `gmux-op-end<TAB>OP<TAB>RANGES` (the tensors it returned), RANGES being
`ADDRESS:BYTES,...`: the first byte of each CUDA tensor and the bytes from there to
its last element (its span: a view of a larger storage spans only what it reaches).
The shim's `gmux-ws` lines for the kernels an operation launches fall between the two;
gpu/ws_compare.py joins them. Operations inside CUDA graphs and torch.compile'd code are
not seen, so traced programs should not use them.
"""

import os
import runpy
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def span(t):
    """Bytes from a tensor's first element to the end of its last one."""
    if t.numel() == 0:
        return 0
    last = sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))
    return (last + 1) * t.element_size()


def ranges(objs):
    out = []
    for x in tree_flatten(objs)[0]:
        if isinstance(x, torch.Tensor) and x.is_cuda and x.numel() and x.layout == torch.strided:
            out.append(f"{x.data_ptr():#x}:{span(x)}")
    return ",".join(out)


class Trace(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        os.write(2, f"gmux-op-begin\t{func}\t{ranges((args, kwargs))}\n".encode())
        out = func(*args, **kwargs)
        os.write(2, f"gmux-op-end\t{func}\t{ranges(out)}\n".encode())
        return out


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: ws_trace.py SCRIPT [ARGS...]")
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    with Trace():
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
