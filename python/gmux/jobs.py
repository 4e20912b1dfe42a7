"""Mark a serving application's requests as jobs: ``with gmux.job("resnet50"):``.

The marks go to gmuxd through the functions of ``libgmux.so``, which ``gmux run`` loads
into the process (``include/gmux.h``), and from there over a shared-memory channel;
``gmux ps --json`` shows each tenant's jobs. A process not run under gmux, or run with
``--standalone``, marks nothing and loses nothing: :func:`job` does nothing there.
"""

from __future__ import annotations

import ctypes
import math
import threading
import warnings
from typing import Optional

__all__ = ["job", "job_begin", "job_end", "ping", "jobs_tracked", "JobError"]

OK = 0
UNTRACKED = 1
EINVAL = -22
EAGAIN = -11
ECHANNEL = -32
ETIMEDOUT = -110
EINTERNAL = -14

_WHY = {
    EAGAIN: "gmuxd is behind and its channel is full; the begin was dropped",
    ECHANNEL: "the channel to gmuxd could not be opened or broke (run with GMUX_LOG=info to see why); asked again a second later",
    EINTERNAL: "gmux failed inside (run with GMUX_LOG=info to see where)",
}


class JobError(ValueError):
    """A mark gmux cannot take: a name that is not text, or a negative estimate."""


class _Shim:
    """The functions of libgmux.so, when the process has it loaded."""

    def __init__(self) -> None:
        try:
            me = ctypes.CDLL(None)
            self.begin = me.gmux_job_begin
            self.end = me.gmux_job_end
            self.ping = me.gmux_ping
        except (OSError, AttributeError):
            self.begin = self.end = self.ping = None
            return
        self.begin.argtypes = [ctypes.c_char_p, ctypes.c_double, ctypes.POINTER(ctypes.c_uint64)]
        self.begin.restype = ctypes.c_int
        self.end.argtypes = [ctypes.c_uint64]
        self.end.restype = ctypes.c_int
        self.ping.argtypes = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64)]
        self.ping.restype = ctypes.c_int


_shim: Optional[_Shim] = None
_lock = threading.Lock()
_warned = set()


def _functions() -> _Shim:
    global _shim
    with _lock:
        if _shim is None:
            _shim = _Shim()
        return _shim


def _result(r: int, what: str) -> bool:
    """Whether the mark was sent; warns once per kind of failure."""
    if r in (OK, UNTRACKED):
        return r == OK
    if r == EINVAL:
        raise JobError(f"{what}: gmux refused the arguments")
    if r not in _warned:
        _warned.add(r)
        warnings.warn(f"gmux: {what}: {_WHY.get(r, f'error {r}')}", RuntimeWarning, stacklevel=3)
    return False


def jobs_tracked() -> bool:
    """Whether this process has gmux's functions: it runs under ``gmux run``. Its marks
    are sent once it has used the GPU under a daemon (not with ``--standalone``)."""
    return _functions().begin is not None


def job_begin(name: str, expected_ms: float = 0.0) -> int:
    """A job of kind ``name`` begins (40 bytes of it are kept); ``expected_ms`` is the
    application's estimate of its GPU time. Returns the job's number for
    :func:`job_end`: 0 where the begin was not sent (outside gmux, or the channel full),
    which :func:`job_end` ignores."""
    if not isinstance(name, str):
        raise JobError(f"a job's name is text, not {type(name).__name__}")
    try:
        encoded = name.encode()
    except UnicodeEncodeError as e:
        raise JobError(f"a job's name must be valid UTF-8 text: {e}") from None
    if b"\0" in encoded:
        raise JobError("a job's name may not hold a NUL character")
    if not (isinstance(expected_ms, (int, float)) and expected_ms >= 0 and math.isfinite(expected_ms)):
        raise JobError(f"expected_ms must be a finite number of milliseconds >= 0, not {expected_ms!r}")
    f = _functions()
    if f.begin is None:
        return 0
    number = ctypes.c_uint64(0)
    _result(f.begin(encoded, float(expected_ms), ctypes.byref(number)), f"gmux_job_begin({name!r})")
    return number.value


def job_end(number: int) -> None:
    """Job ``number`` (from :func:`job_begin`) ended."""
    f = _functions()
    if f.end is None or number == 0:
        return
    _result(f.end(number), f"gmux_job_end({number})")


class job:  # noqa: N801 (used as ``with gmux.job(...)``)
    """``with gmux.job("bert", expected_ms=12):`` marks the block as one job."""

    def __init__(self, name: str, expected_ms: float = 0.0):
        self.name = name
        self.expected_ms = expected_ms
        self.number = 0

    def __enter__(self) -> "job":
        self.number = job_begin(self.name, self.expected_ms)
        return self

    def __exit__(self, *exc: object) -> None:
        job_end(self.number)


def ping(timeout_us: int = 1_000_000) -> Optional[float]:
    """One round trip through gmuxd's dispatcher, in microseconds (``None`` where the
    process is not under gmux, or the daemon did not answer in time)."""
    f = _functions()
    if f.ping is None:
        return None
    ns = ctypes.c_uint64(0)
    r = f.ping(int(timeout_us), ctypes.byref(ns))
    return ns.value / 1e3 if r == OK else None
