"""What the probes in this folder share: the driver's entry points through ctypes, and a
process that keeps the link busy with copies both ways."""

import ctypes as C
import signal


def cuda():
    """A caller of libcuda's entry points by name, with a current context (torch's
    primary one); a call that fails raises with its name and result."""
    import torch

    torch.zeros(1, device="cuda")
    lib = C.CDLL("libcuda.so.1")

    def call(name, *args):
        r = getattr(lib, name)(*args)
        if r != 0:
            raise RuntimeError(f"{name} failed: CUresult {r}")

    return call


def load(start, stop, gib):
    """Copies `gib` each way, over and over, between `start` and `stop` being set (a
    process of its own, as an evicting tenant is)."""
    signal.alarm(280)
    import torch

    n = int(gib * (1 << 30))
    h1 = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    h2 = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    d1 = torch.empty(n, dtype=torch.uint8, device="cuda")
    d2 = torch.empty(n, dtype=torch.uint8, device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    start.wait()
    while not stop.is_set():
        with torch.cuda.stream(s1):
            d1.copy_(h1, non_blocking=True)
        with torch.cuda.stream(s2):
            h2.copy_(d2, non_blocking=True)
        torch.cuda.synchronize()
