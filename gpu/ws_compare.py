"""Predicted working sets against the bytes the kernels' tensors span, per kernel class.

    python3 gpu/ws_compare.py [--json OUT] [--label NAME] LOG...

Each LOG is the stderr of a run of gpu/ws_trace.py under `GMUX_DEBUG=working-sets`
(see there). A kernel belongs to the operation whose begin and end lines enclose its
`gmux-ws` line. Each pointer parameter that falls in an allocation is matched to the
operation's tensor that holds it; the pointers that match none (a library's workspace,
say) are left out of both sides and counted apart. Per kernel:

  tensor bytes     the union of the matched tensors' spans
  predicted bytes  the allocations (as the program asked for them) that the matched
                   pointers fall in: what gmux counts the kernel's working set in
  resident bytes   the whole chunks gmux makes resident for the launch (every pointer,
                   and what the allocations refer to)

and per kernel class the median and 95th percentile of predicted / tensor bytes, and the
ratio of the sums. Prints a Markdown table.
"""

import argparse
import json
import re
import statistics
import sys

CLASSES = [
    ("attention", r"flash|fmha|attention|sdpa|cutlass.*attn"),
    ("gemm", r"gemm|nvjet|sm\d+_xmma_gemm|cublas|cutlass.*(mm|matmul)|splitK|dot"),
    ("convolution", r"conv|implicit|winograd|fprop|dgrad|wgrad|xmma_fprop|cudnn"),
    ("normalization", r"norm"),
    ("softmax", r"softmax"),
    ("reduction", r"reduce|sum|mean|argmax|max_|min_|cross_entropy|nll"),
    ("index / gather / scatter", r"index|gather|scatter|embedding|take"),
    ("concatenation", r"cat|stack"),
    ("optimizer", r"multi_tensor|foreach|adam|sgd"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|where|fill|copy"),
]


def kernel_class(name):
    low = name.lower()
    for cls, pat in CLASSES:
        if re.search(pat, low):
            return cls
    return "other"


def parse_ranges(text):
    out = []
    for item in filter(None, text.split(",")):
        a, n = item.split(":")
        out.append((int(a, 16), int(n)))
    return out


def union(intervals):
    total, end = 0, -1
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def kernels(lines):
    """(name, hits, resident, tensors) for each kernel launched inside an operation."""
    begin, pending = None, []
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        tag = parts[0]
        if tag == "gmux-op-begin" and len(parts) == 3:
            begin, pending = parse_ranges(parts[2]), []
        elif tag == "gmux-ws" and len(parts) == 4 and begin is not None:
            hits = []
            for h in filter(None, parts[2].split(",")):
                p, base, n = h.split(":")
                hits.append((int(p, 16), int(base, 16), int(n)))
            pending.append((parts[1], hits, int(parts[3])))
        elif tag == "gmux-op-end" and len(parts) == 3 and begin is not None:
            tensors = begin + parse_ranges(parts[2])
            for name, hits, resident in pending:
                yield name, hits, resident, tensors
            begin, pending = None, []


def measure(name, hits, resident, tensors):
    matched_regions, spans, other = {}, [], {}
    for p, base, n in hits:
        holders = [(a, s) for a, s in tensors if a <= p < a + max(s, 1)]
        if not holders:
            other[base] = n
            continue
        a, s = max(holders, key=lambda t: t[1])
        spans.append((a, a + s))
        matched_regions[base] = n
    if not spans:
        return None
    return {
        "kernel": name,
        "class": kernel_class(name),
        "tensor": union(spans),
        "predicted": sum(matched_regions.values()),
        "resident": resident,
        "other": sum(other.values()),
    }


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def summarize(rows):
    by = {}
    for r in rows:
        by.setdefault(r["class"], []).append(r)
    out = []
    for cls in sorted(by, key=lambda c: -len(by[c])) + ["all"]:
        rs = rows if cls == "all" else by[cls]
        ratios = [r["predicted"] / r["tensor"] for r in rs if r["tensor"]]
        res = [r["resident"] / r["tensor"] for r in rs if r["tensor"]]
        if not ratios:
            continue
        out.append({
            "class": cls,
            "kernels": len(rs),
            "median": statistics.median(ratios),
            "p95": pct(ratios, 0.95),
            "sum_ratio": sum(r["predicted"] for r in rs) / max(1, sum(r["tensor"] for r in rs)),
            "resident_sum_ratio": sum(r["resident"] for r in rs) / max(1, sum(r["tensor"] for r in rs)),
            "resident_median": statistics.median(res),
            "unmatched_share": sum(r["other"] for r in rs) / max(1, sum(r["other"] + r["predicted"] for r in rs)),
        })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--json")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    rows = []
    for path in a.logs:
        with open(path, errors="replace") as f:
            for k in kernels(f):
                m = measure(*k)
                if m:
                    rows.append(m)
    if not rows:
        sys.exit("ws_compare: no kernel inside a traced operation (run under GMUX_DEBUG=working-sets with ws_trace.py)")
    table = summarize(rows)
    print(f"{a.label} ({len(a.logs)} runs, {len(rows)} kernel launches)")
    print("| kernel class | launches | predicted / tensor bytes: median | P95 | sums | resident chunks / tensor bytes: median | sums |")
    print("|---|---|---|---|---|---|---|")
    for t in table:
        print(f"| {t['class']} | {t['kernels']} | {t['median']:.2f} | {t['p95']:.2f} | {t['sum_ratio']:.2f} | {t['resident_median']:.2f} | {t['resident_sum_ratio']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"label": a.label, "logs": a.logs, "classes": table}, f, indent=1)


if __name__ == "__main__":
    main()
