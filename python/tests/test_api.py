"""The gmux module against a real gmuxd with tenants on the CPU stand-in of the CUDA
driver. `cargo test -p gmux --test python` runs it with the paths of the build
(GMUX_BIN, GMUX_TEST_SHIM, GMUX_TEST_STANDIN, GMUX_TEST_APP)."""

import os
import subprocess
import sys
import threading
import time
import types

import pytest

import gmux

BIN = os.environ.get("GMUX_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="run through `cargo test -p gmux --test python`, which builds gmux and the stand-in")


def tenant_env(tmp_path, sock, name):
    """The environment of a tenant `name` of the daemon at `sock`, on the stand-in driver
    linked in `tmp_path`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GMUX_")}
    env.update(
        GMUX_SHIM=os.environ["GMUX_TEST_SHIM"],
        GMUX_CUDA_LIB=str(tmp_path / "libcuda.so.1"),
        LD_LIBRARY_PATH=str(tmp_path),
        GMUX_STANDIN_MEM=str(1 << 30),
        GMUX_SOCKET=sock,
        GMUX_TENANT=name,
    )
    return env


@pytest.fixture
def daemon(tmp_path):
    """A daemon of the test's own with a 64 MiB budget; yields its socket."""
    sock = str(tmp_path / "gpu0.sock")
    log = open(tmp_path / "daemon.log", "w")
    d = subprocess.Popen([BIN, "daemon", "--hbm", "64M", "--socket", sock], stdout=log, stderr=log)
    deadline = time.time() + 5
    while True:
        try:
            gmux.status(sock)
            break
        except gmux.GmuxError:
            assert time.time() < deadline, "the daemon did not start"
            time.sleep(0.02)
    os.symlink(os.environ["GMUX_TEST_STANDIN"], tmp_path / "libcuda.so.1")
    tenants = []

    def tenant(name, buffers=8):
        env = tenant_env(tmp_path, sock, name)
        args = [BIN, "run", "--", os.environ["GMUX_TEST_APP"], "loop", "--buffers", str(buffers), "--bytes", "4M", "--rounds", "1000000"]
        p = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tenants.append(p)
        deadline = time.time() + 20
        while not any(t["name"] == name and t["commands"] > 10 for t in gmux.tenants(sock)):
            assert time.time() < deadline, f"tenant {name} never ran"
            time.sleep(0.02)
        return p

    yield sock, tenant
    for p in tenants:
        p.kill()
        p.wait()
    d.kill()
    d.wait()


def test_tenants_and_knobs_read_and_write(daemon):
    sock, tenant = daemon
    tenant("a")
    [a] = gmux.tenants(sock)
    assert a["name"] == "a" and a["state"] == "running" and a["held"] == 32 << 20, a
    assert set(a["pressure"]) == {"some", "full"}
    assert gmux.status(sock)["budget"] == 64 << 20
    assert gmux.get("a", "gmem.limit.high", socket=sock) == "max"
    assert gmux.set("a", "gmem.limit.high", "16M", socket=sock) == ""
    assert gmux.get("a", "gmem.limit.high", socket=sock) == str(16 << 20)
    stat = gmux.get("a", "ggroup.stat", socket=sock)
    assert stat["submitted"] >= 10 and set(stat) == {"submitted", "finished", "bytes_h2d", "bytes_d2h", "switches"}, stat
    assert len(gmux.get("a", socket=sock)) == 10
    with pytest.raises(gmux.GmuxError, match="gmux ps"):
        gmux.get("nosuch", socket=sock)
    with pytest.raises(gmux.GmuxError, match="gmem.limit.high"):
        gmux.set("a", "gmem.limit", "1G", socket=sock)


def test_events_arrive_as_they_happen(daemon):
    sock, tenant = daemon
    seen = []
    stream = gmux.events(socket=sock)

    def read():
        for e in stream:
            seen.append(e)
            if e["event"] == "joined" and e["tenant"] == "b":
                return

    t = threading.Thread(target=read, daemon=True)
    t.start()
    time.sleep(0.2)
    tenant("b")
    t.join(20)
    assert seen and seen[-1]["event"] == "joined" and seen[-1]["tenant"] == "b", seen
    assert seen[-1]["at"].endswith("Z")
    only_b = gmux.events("b", socket=sock)
    gmux.set("b", "compute.freeze", 1, socket=sock)
    e = next(only_b)
    assert (e["event"], e["tenant"], e["knob"], e["value"]) == ("knob_set", "b", "compute.freeze", "1"), e


def test_on_pressure_calls_back_within_a_second_and_stops(daemon):
    sock, tenant = daemon
    tenant("c")
    heard = []
    w = gmux.on_pressure(lambda e: heard.append((time.time(), e)), avg10=5, tenant="c", socket=sock)
    time.sleep(0.2)
    # Held to 8 MiB, its 32 MiB loop waits for memory most of the time.
    gmux.set("c", "gmem.limit.high", "8M", socket=sock)
    deadline = time.time() + 20
    while not heard:
        assert time.time() < deadline, f"no pressure callback; pressure {gmux.get('c', 'gmem.pressure', socket=sock)}"
        time.sleep(0.01)
    _, e = heard[0]
    assert e["event"] == "pressure_above" and e["percent"] > 5 and e["window"] == 10, e
    w.stop()
    assert not w.alive and w.error is None
    with pytest.raises(ValueError, match="one threshold"):
        gmux.on_pressure(print, tenant="c", socket=sock)
    with pytest.raises(gmux.GmuxError, match="10, 60 or 300"):
        next(gmux.watch("c", pressure_above=5, window=30, socket=sock))


def test_torch_helper_empties_the_cache_on_pressure(daemon, monkeypatch):
    sock, tenant = daemon
    tenant("d")
    emptied = []
    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(empty_cache=lambda: emptied.append(time.time()))
    monkeypatch.setitem(sys.modules, "torch", fake)
    also = []
    w = gmux.torch_empty_cache_on_pressure(avg10=5, extra=also.append, tenant="d", socket=sock)
    gmux.set("d", "gmem.limit.high", "8M", socket=sock)
    deadline = time.time() + 20
    while not also:
        assert time.time() < deadline, "the helper was never called"
        time.sleep(0.01)
    assert emptied and also[0]["tenant"] == "d"
    w.stop()


def test_current_names_this_process_tenant_under_gmux_run(daemon, monkeypatch):
    sock, _ = daemon
    monkeypatch.delenv("GMUX_DAEMON", raising=False)
    monkeypatch.delenv("GMUX_TENANT", raising=False)
    assert gmux.current(sock) is None
    monkeypatch.setenv("GMUX_DAEMON", sock)
    monkeypatch.setenv("GMUX_TENANT", "mine")
    assert gmux.current(sock) == "mine", "not joined yet: the one it will join"


def test_a_missing_daemon_says_how_to_start_one(tmp_path):
    with pytest.raises(gmux.GmuxError, match="gmux daemon"):
        gmux.tenants(str(tmp_path / "none.sock"))


SERVING = r"""
import ctypes, sys, gmux
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), 1 << 20) == 0
assert gmux.jobs_tracked()
for i in range(20):
    with gmux.job("small" if i % 2 else "large", expected_ms=2 + i % 2):
        assert cuda.cuMemsetD32_v2(ptr, i, 1 << 18) == 0
rtt = gmux.ping()
assert rtt is not None and rtt > 0, rtt
print("ready", flush=True)
sys.stdin.read()
"""


def test_jobs_marked_in_python_reach_the_daemon(daemon, tmp_path):
    sock, _ = daemon
    env = tenant_env(tmp_path, sock, "py")
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(gmux.__file__)))
    p = subprocess.Popen([BIN, "run", "--", sys.executable, "-c", SERVING], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line == "ready\n", p.stderr.read() if p.poll() is not None else line
        jobs = next(t for t in gmux.tenants(sock) if t["name"] == "py")["jobs"]
        assert (jobs["done"], jobs["running"], jobs["refused"]) == (20, 0, 0), jobs
        kinds = {k["name"]: k for k in jobs["kinds"]}
        assert kinds["large"]["done"] == 10 and kinds["large"]["expected_ms"] == 2.0, jobs
        assert kinds["small"]["done"] == 10 and kinds["small"]["expected_ms"] == 3.0, jobs
    finally:
        p.stdin.close()
        p.wait(timeout=20)


def test_jobs_outside_gmux_mark_nothing_and_bad_marks_are_refused():
    assert not gmux.jobs_tracked()
    with gmux.job("anything", expected_ms=5) as j:
        pass
    assert j.number == 0 and gmux.ping() is None
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(gmux.JobError, match="expected_ms"):
            gmux.job_begin("x", bad)
    with pytest.raises(gmux.JobError, match="text"):
        gmux.job_begin(b"bytes")
    with pytest.raises(gmux.JobError, match="UTF-8"):
        gmux.job_begin("\ud800")
    with pytest.raises(gmux.JobError, match="NUL"):
        gmux.job_begin("a\0b")
