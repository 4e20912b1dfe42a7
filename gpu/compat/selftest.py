"""Tests of run.py that need no GPU: `python3 gpu/compat/run.py --self-test`.

Unit tests of size parsing, the summary line, limits, classification, result comparison,
nvidia-smi parsing and part assignment; a check of the program table; then two end-to-end
runs of the runner against stand-ins: a fake `gmux` (run / daemon / stop / ps), a fake
`nvidia-smi` and a stand-in program whose behaviour under a limit is chosen by its
argument (identical, oversize message, exit 86, wrong result, segfault, abort, hang,
refused call, missing result, over the limit, nondeterministic, a native failure, raw
results, no summary line). Prints `N passed, N failed` last; exits 1 on any failure.
"""

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import programs as corpus  # noqa: E402
import run  # noqa: E402

MIB = 1 << 20
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


# ---------------------------------------------------------------- unit tests


@test
def sizes():
    assert run.parse_size("0 B") == 0
    assert run.parse_size("4.0 KiB") == 4096
    assert run.parse_size("16.0 MiB") == 16 * MIB
    assert run.parse_size("1.25 GiB") == int(1.25 * (1 << 30))
    assert run.parse_size("70G") == 70 << 30
    assert run.parse_size("512M") == 512 * MIB
    assert run.parse_size("123") == 123
    assert run.parse_size("2.0 TiB") == 2 << 40
    for bad in ("", "x", "1.2.3 GiB", "5 QiB"):
        try:
            run.parse_size(bad)
        except (ValueError, KeyError):
            continue
        raise AssertionError(f"{bad!r} parsed")
    assert run.limit_arg(768 * MIB) == "768M"


@test
def summary_line_fields():
    line = ("gmux: limit 1.0 GiB, allocated 512.0 MiB, peak allocated 1.2 GiB, peak resident 900.0 MiB, "
            "commands 12 (0 waited for memory), evicted 0 (0 B), populated 3 (6.0 MiB)")
    assert run.summary_field(line, "peak allocated") == round(1.2 * (1 << 30))
    assert run.summary_field(line, "allocated") == 512 * MIB
    assert run.summary_field(line, "peak resident") == 900 * MIB
    assert run.summary_field(line, "limit") == 1 << 30
    err = "noise\n" + line + "\nmore\n"
    assert run.footprint_from_stderr(err) == (round(1.2 * (1 << 30)), "peak allocated")
    # Without `peak allocated`: the larger of `peak resident` and `allocated`.
    old = "gmux: limit 70.0 GiB, allocated 2.0 GiB, peak resident 1.5 GiB, commands 3"
    assert run.footprint_from_stderr(old) == (2 << 30, "peak resident/allocated")
    # Several summaries (child processes): the largest.
    two = old + "\ngmux: limit 70.0 GiB, allocated 0 B, peak allocated 4.0 KiB, peak resident 0 B\n"
    assert run.footprint_from_stderr(two)[0] == 2 << 30
    assert run.footprint_from_stderr("gmux: virtualizing device memory: limit 1.0 GiB\n") == (None, None)


@test
def limits():
    assert run.limit_for(100 * MIB, 25) == 64 * MIB  # at least 64 MiB
    assert run.limit_for(1000 * MIB, 50) == 500 * MIB
    assert run.limit_for(1001 * MIB, 50) == 502 * MIB  # 500.5 MiB rounded up to 2 MiB
    assert run.limit_for(3 << 30, 100) == 3 << 30
    assert run.limit_for(1, 100) == 64 * MIB
    for fp in (257 * MIB + 5, 4099 * MIB, 12345678901):
        for lv in (100, 50, 25):
            L = run.limit_for(fp, lv)
            assert L % (2 * MIB) == 0 and L >= fp * lv / 100 and L - fp * lv / 100 < 2 * MIB + 1 or L == 64 * MIB


@test
def classification():
    need = "gmux: kernel sgemm needs 1.2 GiB resident at once but the memory limit is 512.0 MiB; raise --mem-limit"
    c = run.classify
    assert c(0, False, "", "identical")[0] == "identical"
    assert c(0, False, "", "within-tol")[0] == "identical"
    assert c(0, False, need, "differs")[0] == "wrong"
    assert c(0, False, "", "missing")[0] == "wrong"
    assert c(1, False, need, "not compared")[0] == "clear-error"
    assert c(1, False, "Traceback\nRuntimeError: CUDA error: out of memory", "x")[0] == "crash"
    assert c(86, False, "", "x")[0] == "clear-error"
    assert c(-int(signal.SIGABRT), False, need, "x")[0] == "clear-error"
    assert c(-int(signal.SIGABRT), False, "", "x") == ("crash", "signal SIGABRT")
    assert c(-int(signal.SIGSEGV), False, need, "x") == ("crash", "signal SIGSEGV")
    assert c(-int(signal.SIGKILL), True, need, "x") == ("crash", "timeout")
    assert c(0, True, "", "identical") == ("crash", "timeout")
    refused = "gmux: cuStreamBeginCapture is not supported under gmux: capture records launches; it returns CUDA_ERROR_NOT_SUPPORTED"
    assert c(1, False, refused, "x")[0] == "refused"
    assert c(-11, False, refused, "x")[0] == "crash", "a fault is a crash whatever was refused before"
    # The relevant line: the oversize message first, then a refusal, then other gmux lines, else stderr's last line.
    info = "gmux: virtualizing device memory: limit 1.0 GiB, device 0 of 79.1 GiB free\ngmux: limit 1.0 GiB, allocated 3 B"
    assert run.relevant_line(info + "\n" + refused + "\n" + need) == need
    assert run.relevant_line(info + "\n" + refused) == refused
    assert run.relevant_line(info + "\ngmux: something odd\n") == "gmux: something odd"
    assert run.relevant_line(info + "\nTraceback\nValueError: boom\n") == "stderr: ValueError: boom"
    assert run.relevant_line("") == ""


def _npz(path, **arrays):
    import numpy as np

    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


@test
def comparison():
    import numpy as np

    d = tempfile.mkdtemp(prefix="compat-cmp-")
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    ids = np.arange(10, dtype=np.int64)
    a = _npz(f"{d}/a.npz", x=x, ids=ids)
    same = _npz(f"{d}/same.npz", x=x.copy(), ids=ids.copy())
    near = _npz(f"{d}/near.npz", x=x + np.float32(1e-6), ids=ids)
    far = _npz(f"{d}/far.npz", x=x + np.float32(1e-2), ids=ids)
    tok = _npz(f"{d}/tok.npz", x=x, ids=ids + 1)
    keys = _npz(f"{d}/keys.npz", x=x)
    nan_a = _npz(f"{d}/nan_a.npz", x=np.array([np.nan, 1.0]))
    nan_b = _npz(f"{d}/nan_b.npz", x=np.array([np.nan, 1.0]))
    nan_c = _npz(f"{d}/nan_c.npz", x=np.array([0.0, 1.0]))
    cmp = run.compare_results
    assert cmp(a, same, "py")["status"] == "identical"
    assert cmp(a, near, "py")["status"] == "differs"
    r = cmp(a, near, "py", (1e-5, 1e-5))
    assert r["status"] == "within-tol" and r["worst"] == "x" and 0 < r["max_abs"] < 1e-5
    assert cmp(a, far, "py", (1e-5, 1e-5))["status"] == "differs"
    assert cmp(a, tok, "py", (1.0, 1.0))["status"] == "differs"  # integers are exact whatever the tolerance
    assert cmp(a, keys, "py")["status"] == "differs"
    assert cmp(a, f"{d}/nothing.npz", "py")["status"] == "missing"
    open(f"{d}/junk.npz", "wb").write(b"not a zip")
    assert cmp(a, f"{d}/junk.npz", "py")["status"] == "unreadable"
    assert cmp(nan_a, nan_b, "py")["status"] == "identical"
    r = cmp(nan_a, nan_c, "py", (1e-3, 1e-3))
    assert r["status"] == "differs" and math.isinf(r["max_abs"])
    # Native run-to-run differences widen that array's tolerance to 10x.
    assert cmp(a, near, "py", None, {"x": 2e-7})["status"] == "within-tol"
    assert cmp(a, far, "py", None, {"x": 2e-7})["status"] == "differs"
    # Raw (C++) results: bytes.
    open(f"{d}/r1", "wb").write(b"abcdef")
    open(f"{d}/r2", "wb").write(b"abcdef")
    open(f"{d}/r3", "wb").write(b"abcXef")
    assert cmp(f"{d}/r1", f"{d}/r2", "cpp")["status"] == "identical"
    r = cmp(f"{d}/r1", f"{d}/r3", "cpp")
    assert r["status"] == "differs" and "byte 3" in r["detail"]


@test
def smi_parsing():
    assert run.parse_apps("1234, 2048\n99, 10\n[N/A], [N/A]\n\n1234, 2\n") == {1234: 2050, 99: 10}
    assert run.parse_apps("No running processes found") == {}
    assert run.parse_total("81559\n") == 81559
    assert run.parse_total("") is None
    kids = {1: [2, 3], 2: [4], 4: [5], 9: [10]}
    assert run.descendants(1, kids) == {1, 2, 3, 4, 5}
    assert run.descendants(9, kids) == {9, 10}
    here = run.children_map()
    assert os.getpid() in here.get(os.getppid(), []), "children_map misses this process"


@test
def parts():
    levels = [100, 50, 25]
    for m in (1, 2, 3, 4, 6):
        p = run.assign_parts(corpus.PROGRAMS, m, levels)
        assert set(p) == {x["name"] for x in corpus.PROGRAMS}
        assert set(p.values()) <= set(range(1, m + 1))
        assert p == run.assign_parts(list(reversed(corpus.PROGRAMS)), m, levels), "assignment depends on order"
        loads = [sum(run.estimate(x, levels) for x in corpus.PROGRAMS if p[x["name"]] == i) for i in range(1, m + 1)]
        biggest = max(run.estimate(x, levels) for x in corpus.PROGRAMS)
        assert max(loads) - min(loads) <= biggest + 1e-6, loads
    assert run.parse_part("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "x", "1-2"):
        try:
            run.parse_part(bad)
        except Exception:  # noqa: BLE001
            continue
        raise AssertionError(bad)


@test
def program_table():
    names = [p["name"] for p in corpus.PROGRAMS]
    assert len(names) == len(set(names)), "duplicate names"
    assert len(names) >= 30
    for p in corpus.PROGRAMS:
        assert p["kind"] in ("py", "cpp"), p
        assert p["tol"] is None or (len(p["tol"]) == 2 and all(t >= 0 for t in p["tol"])), p
        assert p["est"] > 0 and p["covers"], p
        if p["kind"] == "py":
            assert os.path.exists(os.path.join(HERE, "progs", p["cmd"][0])), p["cmd"][0]
        else:
            src = os.path.join(HERE, "cpp", p["cmd"][0] + ".cu")
            assert os.path.exists(src), src
    for g in corpus.TENANT_GROUPS:
        assert len(g) == 4 and set(g) <= set(names), g
    for f in sorted(os.listdir(os.path.join(HERE, "progs"))):
        if f.endswith(".py"):
            compile(open(os.path.join(HERE, "progs", f)).read(), f, "exec")
    used = {p["cmd"][0] for p in corpus.PROGRAMS if p["kind"] == "cpp"}
    have = {f[:-3] for f in os.listdir(os.path.join(HERE, "cpp")) if f.endswith(".cu")}
    assert used == have, f"cpp sources without a program or programs without a source: {used ^ have}"


# ---------------------------------------------------------------- end-to-end with stand-ins

FAKE_GMUX = r'''#!/usr/bin/env python3
import os, socket, sys, time
a = sys.argv[1:]
def size(t):
    u = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(t.rstrip("KMG")) * u[t[-1] if t[-1] in "KMG" else ""])
if a[0] == "run":
    i = a.index("--"); opts, cmd = a[1:i], a[i + 1:]
    env = dict(os.environ, GMUX_FAKE="1")
    if "--mem-limit" in opts:
        env["GMUX_MEM_LIMIT"] = str(size(opts[opts.index("--mem-limit") + 1]))
    if "--standalone" not in opts:
        sock = os.environ["GMUX_SOCKET"]
        assert os.path.exists(sock), "no daemon"
        env["GMUX_DAEMON"] = sock
        env["GMUX_MEM_LIMIT"] = open(sock + ".hbm").read()
        env["GMUX_TENANT"] = opts[opts.index("--tenant") + 1]
    os.execvpe(cmd[0], cmd, env)
elif a[0] == "daemon":
    sock = a[a.index("--socket") + 1]
    open(sock + ".hbm", "w").write(str(size(a[a.index("--hbm") + 1])))
    s = socket.socket(socket.AF_UNIX); s.bind(sock)
    while not os.path.exists(sock + ".stop"):
        time.sleep(0.05)
    os.remove(sock); os.remove(sock + ".stop")
    print("fake gmuxd: stopped")
elif a[0] == "stop":
    open(os.environ["GMUX_SOCKET"] + ".stop", "w").close()
elif a[0] == "ps":
    print("fake ps")
'''

FAKE_SMI = r'''#!/usr/bin/env python3
import glob, os, sys
rows = []
for f in glob.glob(os.environ["FAKE_SMI_DIR"] + "/*"):
    pid = int(os.path.basename(f))
    if os.path.exists(f"/proc/{pid}"):
        rows.append((pid, int(open(f).read() or 0)))
if any(x.startswith("--query-compute-apps") for x in sys.argv):
    for pid, mib in rows:
        print(f"{pid}, {mib}")
else:
    print(1000 + sum(m for _, m in rows))
'''

STANDIN = r'''#!/usr/bin/env python3
import os, signal, sys, time
import numpy as np
MIB = 1 << 20
mode = sys.argv[1]
under = os.environ.get("GMUX_FAKE") == "1"
limit = int(os.environ.get("GMUX_MEM_LIMIT", "0")) if under else None
FOOT = 256 * MIB
used = 400 + (2000 if mode == "overlimit" and under else min(limit or FOOT, FOOT) // MIB)
open(os.path.join(os.environ["FAKE_SMI_DIR"], str(os.getpid())), "w").write(str(used))
time.sleep(0.7)
def fmt(n):
    return f"{n / MIB:.1f} MiB"
def summary():
    over = f", commands over the limit 3 (at most {fmt(FOOT - limit)} of one mapped on the host)" if mode == "spilled" and limit < FOOT else ""
    if under and mode != "nosummary":
        print(f"gmux: limit {fmt(limit)}, allocated {fmt(FOOT)}, peak allocated {fmt(FOOT)}, peak resident {fmt(FOOT - MIB)}, commands 9{over}", file=sys.stderr)
def need(ws):
    print(f"gmux: kernel k needs {fmt(ws)} resident at once but the memory limit is {fmt(limit)}; raise --mem-limit", file=sys.stderr)
x = np.arange(16, dtype=np.float32)
if mode == "native_fail":
    print("boom", file=sys.stderr); sys.exit(3)
if mode == "tol":
    x = x + np.random.uniform(0, 1e-7, 16).astype(np.float32)
if mode == "nondet":
    x = np.random.uniform(0, 1, 16).astype(np.float32)
if under and mode == "oversize" and limit < 150 * MIB:
    need(150 * MIB); sys.exit(1)
if under and mode == "exit86" and limit < 200 * MIB:
    sys.exit(86)
if under and mode == "wrong" and limit < FOOT:
    x = x + 1
if under and mode == "segv" and limit <= 64 * MIB:
    need(100 * MIB); sys.stderr.flush(); os.kill(os.getpid(), signal.SIGSEGV)
if under and mode == "abort_clear" and limit < 150 * MIB:
    need(150 * MIB); sys.stderr.flush(); os.abort()
if under and mode == "hang" and limit < 100 * MIB:
    time.sleep(60)
if under and mode == "refused":
    print("gmux: cuStreamBeginCapture is not supported under gmux: capture; it returns CUDA_ERROR_NOT_SUPPORTED", file=sys.stderr)
    sys.exit(1)
summary()
if under and mode == "missing":
    sys.exit(0)
out = os.environ["GMUX_COMPAT_OUT"]
if mode == "raw":
    open(out, "wb").write(b"raw-result" * 3)
else:
    with open(out + ".tmp", "wb") as f:
        np.savez(f, x=x, ids=np.arange(4))
    os.replace(out + ".tmp", out)
print("status=ok")
'''

# mode -> expected class at fp, 100, 50, 25 (None: not run)
EXPECT = {
    "ok": ["identical"] * 4,
    "oversize": ["identical", "identical", "clear-error", "clear-error"],
    "exit86": ["identical", "identical", "clear-error", "clear-error"],
    "tol": ["identical"] * 4,
    "nondet": ["identical"] * 4,
    "wrong": ["identical", "identical", "wrong", "wrong"],
    "segv": ["identical", "identical", "identical", "crash"],
    "abort_clear": ["identical", "identical", "clear-error", "clear-error"],
    "hang": ["identical", "identical", "identical", "crash"],
    "refused": ["refused"] * 4,
    "missing": ["wrong"] * 4,
    "overlimit": ["identical"] * 4,
    "nosummary": ["identical"] * 4,
    "native_fail": [None] * 4,
    "raw": ["identical"] * 4,
    "spilled": ["identical"] * 4,
}


def _write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


def _setup(d):
    bin_dir, build, smi_dir = f"{d}/bin", f"{d}/build", f"{d}/smi"
    for x in (bin_dir, build, smi_dir):
        os.makedirs(x, exist_ok=True)
    _write_exe(f"{bin_dir}/gmux", FAKE_GMUX.replace("#!/usr/bin/env python3", "#!" + sys.executable))
    _write_exe(f"{bin_dir}/nvidia-smi", FAKE_SMI.replace("#!/usr/bin/env python3", "#!" + sys.executable))
    _write_exe(f"{d}/standin.py", STANDIN.replace("#!/usr/bin/env python3", "#!" + sys.executable))
    _write_exe(f"{build}/rawprog", f"#!/bin/sh\nexec {sys.executable} {d}/standin.py raw\n")
    table = []
    for mode in EXPECT:
        if mode == "raw":
            table.append({"name": "s_raw", "kind": "cpp", "cmd": ["rawprog"], "est": 1})
        else:
            tol = [1e-5, 1e-6] if mode == "tol" else None
            table.append({"name": f"s_{mode}", "kind": "py", "cmd": ["standin.py", mode], "tol": tol, "est": 1})
    with open(f"{d}/table.json", "w") as f:
        json.dump(table, f)
    os.environ["FAKE_SMI_DIR"] = smi_dir
    return bin_dir, build


def _runner(d, bin_dir, build, extra):
    argv = [sys.executable, os.path.join(HERE, "run.py"), "--gmux", f"{bin_dir}/gmux", "--smi", f"{bin_dir}/nvidia-smi",
            "--programs", f"{d}/table.json", "--progs", d, "--build", build, "--work", f"{d}/work", "--out", f"{d}/out",
            "--timeout", "6", "--min-run", "1", *extra]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError(f"run.py exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


@test
def end_to_end():
    d = tempfile.mkdtemp(prefix="compat-e2e-")
    bin_dir, build = _setup(d)
    out = _runner(d, bin_dir, build, ["--jobs", "4", "--tag", "e2e"])
    doc = json.load(open(f"{d}/out/e2e.json"))
    assert os.path.exists(f"{d}/out/e2e.txt") and os.path.exists(f"{d}/out/e2e-logs.tar.gz")
    progs = {p["name"]: p for p in doc["programs"]}
    got = {}
    for r in doc["runs"]:
        if r["level"] is not None:
            got[(r["program"], r["level"])] = r
    errors = []
    for mode, want in EXPECT.items():
        name = f"s_{mode}"
        for lv, cls in zip(["fp", 100, 50, 25], want):
            r = got.get((name, lv))
            have = r["class"] if r else None
            if have != cls:
                errors.append(f"{name} {lv}: {have} (want {cls}; {r and r['reason']} {r and r['line']})")
    assert not errors, "\n".join(errors)
    assert progs["s_native_fail"]["status"] == "native-failed", progs["s_native_fail"]
    assert "boom" in progs["s_native_fail"]["note"]
    assert progs["s_nondet"]["deterministic"] is False
    assert progs["s_tol"]["deterministic"] is True and progs["s_tol"]["bitwise_deterministic"] is False
    assert progs["s_ok"]["bitwise_deterministic"] is True
    assert progs["s_ok"]["footprint_bytes"] == 256 * MIB and progs["s_ok"]["footprint_source"] == "peak allocated"
    assert progs["s_nosummary"]["footprint_source"].startswith("native nvidia-smi"), progs["s_nosummary"]
    assert progs["s_nosummary"]["footprint_bytes"] == (656 - 512) * MIB
    assert got[("s_ok", 25)]["limit_bytes"] == 64 * MIB and got[("s_ok", 50)]["limit_bytes"] == 128 * MIB
    assert "s_ok l25" not in out
    assert got[("s_hang", 25)]["reason"] == "timeout"
    assert got[("s_segv", 25)]["reason"] == "signal SIGSEGV"
    assert got[("s_refused", 50)]["refused"] == ["cuStreamBeginCapture"]
    assert "needs 150.0 MiB" in got[("s_oversize", 25)]["line"]
    for lv in (100, 50, 25):
        assert got[("s_overlimit", lv)]["over_limit"] is True, got[("s_overlimit", lv)]
        assert got[("s_ok", lv)]["over_limit"] is False, got[("s_ok", lv)]
        assert got[("s_ok", lv)]["smi_source"] == "pid"
    assert got[("s_overlimit", "fp")]["over_limit"] is False
    assert (got[("s_spilled", 100)]["spilled"], got[("s_spilled", 50)]["spilled"]) == (0, 3)
    # The printed summary ends with the table and the odd runs.
    tail = out[out.index("== gmux compatibility corpus"):]
    assert "level" in tail and "over-limit" in tail and "s_wrong" in tail and "s_overlimit" in tail
    row = next(l for l in tail.splitlines() if l.startswith("25%"))
    assert row.split()[1] == str(sum(1 for m in EXPECT if m != "native_fail")), row
    assert row.split()[-1] == "1", f"one identical run with commands over the limit: {row}"
    assert any(l.split()[:3] == ["s_spilled", "25%", "3"] for l in tail.splitlines()), tail
    # A skipped budget: nothing runs, every program reported skipped, still a summary.
    out2 = _runner(d, bin_dir, build, ["--only", "s_ok,s_wrong", "--budget", "0.5", "--min-run", "5", "--tag", "skip"])
    doc2 = json.load(open(f"{d}/out/skip.json"))
    assert all(p["status"] == "skipped" for p in doc2["programs"]), doc2["programs"]
    assert "NOT RUN s_ok: skipped" in out2


@test
def tenants_end_to_end():
    d = tempfile.mkdtemp(prefix="compat-ten-")
    bin_dir, build = _setup(d)
    _runner(d, bin_dir, build, ["--tenants", "--only", "s_ok,s_wrong,s_tol,s_overlimit", "--jobs", "4"])
    doc = json.load(open(f"{d}/out/tenants.json"))
    g = doc["tenant_groups"][0]
    assert g["hbm_bytes"] == 512 * MIB, g  # half of 4 x 256 MiB
    assert g["daemon_exit"] == 0, g
    assert g["peak_mib"] is not None and g["peak_mib"] >= 4 * 400, g
    assert g["over_limit"] is True, g  # 2400 + 3 x 656 MiB > 512 + 4 x (400 + 64)
    runs = {r["program"]: r for r in doc["runs"] if r["level"] == "tenants"}
    assert set(runs) == {"s_ok", "s_wrong", "s_tol", "s_overlimit"}
    for name, r in runs.items():
        assert r["class"] == "identical", (name, r["class"], r["reason"], r["line"])
    assert runs["s_overlimit"]["over_limit"] is True and runs["s_ok"]["over_limit"] is False
    assert os.path.exists(f"{d}/work/logs/tenants1.daemon.log")


@test
def dry_run_and_list():
    p = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), "--dry-run", "--part", "1/4", "--work", tempfile.mkdtemp()],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "[dry-run]" in p.stdout and "--mem-limit 70G" in p.stdout and "<25% of footprint>" in p.stdout, p.stdout[-2000:]
    p = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), "--list", "--part", "1/4"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "part 4/4" in p.stdout, p.stdout + p.stderr
    union = set()
    for i in range(1, 5):
        q = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), "--print-cpp", "--part", f"{i}/4"], capture_output=True, text=True, timeout=60)
        assert q.returncode == 0, q.stderr
        union |= set(q.stdout.split())
    assert union == {p["cmd"][0] for p in corpus.PROGRAMS if p["kind"] == "cpp"}
    p = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), "--dry-run", "--tenants", "--work", tempfile.mkdtemp()],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "gmux daemon --hbm" in p.stdout and "--tenant" in p.stdout, p.stdout + p.stderr


def main():
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("selftest: run.py needs numpy (python3 -m pip install numpy)")
        print("0 passed, 1 failed")
        return 1
    passed = failed = 0
    for t in TESTS:
        try:
            t()
            passed += 1
            print(f"ok   {t.__name__}", flush=True)
        except Exception:  # noqa: BLE001 -- report every failure and go on
            failed += 1
            print(f"FAIL {t.__name__}\n{textwrap.indent(traceback.format_exc(), '     ')}", flush=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
