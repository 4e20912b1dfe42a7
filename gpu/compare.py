"""Compare two torch.save files written by torch_check.py.

    compare.py A B

Walks both objects (dicts, lists, tensors, numbers) and prints
    identical=1 max_abs_diff=0.0
or
    identical=0 max_abs_diff=<x> max_rel=<y>
where max_rel is the largest, over all tensors (a list of numbers counts as one),
of max|a-b| / max|a|. "identical" means bit for bit (NaNs included). A second line
says how many tensors differ and which differs most. Exits 0 either way; 2 when a
file cannot be read.
"""

import sys

import torch


def flatten(obj, path="", out=None):
    """{path: tensor} for every tensor or list of numbers inside obj."""
    out = {} if out is None else out
    if isinstance(obj, torch.Tensor):
        out[path] = obj.detach().cpu()
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            flatten(obj[k], f"{path}/{k}", out)
    elif isinstance(obj, (list, tuple)) and all(isinstance(x, (int, float)) for x in obj):
        out[path] = torch.tensor(obj, dtype=torch.float64)
    elif isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            flatten(x, f"{path}[{i}]", out)
    elif isinstance(obj, (int, float)):
        out[path] = torch.tensor([obj], dtype=torch.float64)
    else:
        raise TypeError(f"{path}: cannot compare a {type(obj).__name__}")
    return out


def bitwise_equal(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a, b = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
    if a.numel() == 0:
        return True
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def diff(a, b):
    """(max |a-b|, max |a-b| / max |a|) in float64; inf where shapes differ."""
    if a.shape != b.shape:
        return float("inf"), float("inf")
    if a.numel() == 0:
        return 0.0, 0.0
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    d = (a64 - b64).abs()
    d = torch.where(torch.isnan(a64) & torch.isnan(b64), torch.zeros_like(d), d)
    d = torch.nan_to_num(d, nan=float("inf"))
    abs_diff = d.max().item()
    scale = a64.abs().nan_to_num(nan=0.0, posinf=0.0).max().item()
    rel = abs_diff / scale if scale > 0 else (0.0 if abs_diff == 0 else float("inf"))
    return abs_diff, rel


def load(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 -- any failure to read is reported the same way
        print(f"error=cannot load {path}: {e}", flush=True)
        sys.exit(2)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    a, b = flatten(load(sys.argv[1])), flatten(load(sys.argv[2]))
    if a.keys() != b.keys():
        only = sorted(a.keys() ^ b.keys())
        print(f"identical=0 max_abs_diff=inf max_rel=inf")
        print(f"tensors={len(a)} differing=keys only_in_one={','.join(only[:5])}")
        return 0
    max_abs, max_rel, differing, worst = 0.0, 0.0, 0, ""
    for key in a:
        if bitwise_equal(a[key], b[key]):
            continue
        differing += 1
        d, r = diff(a[key], b[key])
        if d >= max_abs:
            worst = key
        max_abs, max_rel = max(max_abs, d), max(max_rel, r)
    if differing == 0:
        print("identical=1 max_abs_diff=0.0")
    else:
        print(f"identical=0 max_abs_diff={max_abs:.6g} max_rel={max_rel:.6g}")
    print(f"tensors={len(a)} differing={differing} worst={worst or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
