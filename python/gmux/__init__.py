"""Watch and steer the tenants of gmuxd, the gmux GPU-sharing daemon.

Every function talks to the daemon over its unix socket, as the ``gmux`` command does,
and sees what the calling user may see: their own tenants, or all of them for the
daemon's owner and root. The objects returned are the JSON of ``gmux ps --json``,
``gmux get --json`` and ``gmux events --json`` (docs/observability.md).
"""

from __future__ import annotations

import json
import os
import socket as _socket
import stat
import struct
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

from .jobs import JobError, job, job_begin, job_end, jobs_tracked, ping

__all__ = [
    "GmuxError",
    "daemon_sockets",
    "run_dir",
    "socket_path",
    "status",
    "tenants",
    "get",
    "set",
    "events",
    "watch",
    "current",
    "on_pressure",
    "torch_empty_cache_on_pressure",
    "Watcher",
    "job",
    "job_begin",
    "job_end",
    "jobs_tracked",
    "ping",
    "JobError",
]

Event = Dict[str, Any]


class GmuxError(RuntimeError):
    """A request failed: the daemon is not there, or refused it (the message says why
    and what to do)."""


def run_dir() -> str:
    """The directory of the daemons' sockets, one per GPU named by its UUID:
    ``$GMUX_RUN_DIR``, else ``/run/gmux`` for root, ``$XDG_RUNTIME_DIR/gmux``, or
    ``$TMPDIR/gmux-UID``."""
    if os.environ.get("GMUX_RUN_DIR"):
        return os.environ["GMUX_RUN_DIR"]
    uid = os.geteuid()
    if uid == 0:
        return "/run/gmux"
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "gmux")
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", f"gmux-{uid}")


def daemon_sockets() -> List[str]:
    """Every daemon's socket, as ``gmux ps`` finds them: ``$GMUX_SOCKET`` alone when
    set, else each socket in :func:`run_dir` a daemon answers on (one that ended may
    leave its socket), by name."""
    if os.environ.get("GMUX_SOCKET"):
        return [os.environ["GMUX_SOCKET"]]
    d = run_dir()
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return []
    return [p for p in (os.path.join(d, n) for n in names if n.endswith(".sock")) if stat.S_ISSOCK(os.lstat(p).st_mode) and _answers(p)]


def _answers(path: str) -> bool:
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def socket_path() -> str:
    """The one daemon's socket, as the ``gmux`` command finds it: ``$GMUX_SOCKET``,
    else the only socket in :func:`run_dir`. With none, or the daemons of several GPUs,
    :class:`GmuxError` says what to do."""
    found = daemon_sockets()
    if len(found) == 1:
        return found[0]
    if not found:
        raise GmuxError(f"gmuxd is not running (no socket in {run_dir()}); start it with `gmux daemon` (or any `gmux run`), or point GMUX_SOCKET at its socket")
    raise GmuxError(f"daemons of {len(found)} GPUs run in {run_dir()}; pick one with socket= or GMUX_SOCKET={found[0]}")


def _connect(path: Optional[str]) -> _socket.socket:
    path = path or socket_path()
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError as e:
        s.close()
        raise GmuxError(f"gmuxd is not running at {path} ({e.strerror}); start it with `gmux daemon` (or any `gmux run`)") from None
    # Whoever listens on the socket learns what is sent to it: only this user's daemon
    # or root's is trusted, as the gmux command does.
    creds = s.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    if uid not in (os.geteuid(), 0):
        s.close()
        raise GmuxError(f"{path} is served by uid {uid}, not by you or root; not talking to it (check GMUX_SOCKET)")
    return s


class _Stream:
    """The lines a streaming request gets after the daemon's first answer; ``close()``
    ends it from any thread."""

    def __init__(self, req: Dict[str, Any], path: Optional[str]):
        self._socket = _connect(path)
        self._socket.sendall((json.dumps(req) + "\n").encode())
        self._file = self._socket.makefile("r", encoding="utf-8")
        first = self._file.readline()
        try:
            reply = json.loads(first)
        except ValueError:
            self.close()
            raise GmuxError(f"gmuxd answered {first.strip()!r}; is it the same version as this module?") from None
        if not reply.get("ok"):
            self.close()
            raise GmuxError(reply.get("text") or "the daemon refused the request")
        self.text: str = reply.get("text", "")

    def __iter__(self) -> Iterator[Event]:
        for line in self._file:
            yield json.loads(line)

    def close(self) -> None:
        try:
            self._socket.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()


def _request(req: Dict[str, Any], path: Optional[str]) -> str:
    s = _Stream(req, path)
    s.close()
    return s.text


def status(socket: Optional[str] = None) -> Dict[str, Any]:
    """The daemon and the tenants you may read, as ``gmux ps --json``."""
    return json.loads(_request({"op": "ps", "json": True}, socket))


def tenants(socket: Optional[str] = None) -> List[Dict[str, Any]]:
    """The live tenants you may read: name, state, memory, counters and pressure."""
    return status(socket)["tenants"]


def get(tenant: str, knob: Optional[str] = None, socket: Optional[str] = None) -> Union[str, Dict[str, Any]]:
    """A knob of ``tenant`` (its text, or an object for ``ggroup.stat``,
    ``gmem.pressure`` and ``gmem.events``), or all its knobs as a dict when ``knob`` is
    None."""
    req: Dict[str, Any] = {"op": "get", "tenant": tenant, "json": True}
    if knob is not None:
        req["knob"] = knob
    knobs = json.loads(_request(req, socket))
    return knobs[knob] if knob is not None else knobs


def set(tenant: str, knob: str, value: Union[str, int], socket: Optional[str] = None) -> str:  # noqa: A001
    """Sets a knob (the daemon's owner or root only); returns the daemon's warning, if
    any, e.g. that a limit is below what the tenant's largest command needed."""
    return _request({"op": "set", "tenant": tenant, "knob": knob, "value": str(value)}, socket)


def events(tenant: Optional[str] = None, socket: Optional[str] = None) -> Iterator[Event]:
    """The daemon's events as they happen (of ``tenant`` alone, if given): an endless
    iterator of dicts with ``at``, ``event`` and ``tenant``, or, when this reader fell
    behind and some were lost, ``at`` and ``lost`` (and ``count`` for the daemon's
    owner and root)."""
    req: Dict[str, Any] = {"op": "events"}
    if tenant is not None:
        req["tenant"] = tenant
    return iter(_Stream(req, socket))


def watch(
    tenant: str,
    *,
    pressure_above: Optional[float] = None,
    kind: str = "some",
    window: int = 10,
    limit_below_held: bool = False,
    socket: Optional[str] = None,
) -> Iterator[Event]:
    """An event each time ``tenant``'s pressure (``kind``, averaged over ``window``
    seconds: 10, 60 or 300) rises above ``pressure_above`` percent, or, with
    ``limit_below_held``, its ``gmem.limit.high`` falls below what it holds."""
    if (pressure_above is None) == (not limit_below_held):
        raise ValueError("give pressure_above=PERCENT or limit_below_held=True, not both")
    if limit_below_held:
        trigger: Dict[str, Any] = {"when": "limit_below_held"}
    else:
        trigger = {"when": "pressure_above", "kind": kind, "window": window, "percent": float(pressure_above)}
    return iter(_watch(tenant, trigger, socket))


def _watch(tenant: str, trigger: Dict[str, Any], socket: Optional[str]) -> _Stream:
    return _Stream({"op": "watch", "tenant": tenant, "trigger": trigger}, socket)


def current(socket: Optional[str] = None) -> Optional[str]:
    """The tenant of this process under ``gmux run``: the one the daemon lists it in,
    else the one it will join (``$GMUX_TENANT``); None when not run under gmux."""
    if not os.environ.get("GMUX_DAEMON") and not os.environ.get("GMUX_TENANT"):
        return None
    try:
        for t in tenants(socket):
            if os.getpid() in t["pids"]:
                return t["name"]
    except GmuxError:
        pass
    return os.environ.get("GMUX_TENANT")


class Watcher:
    """A background thread that calls a function on each event of a ``watch``; stop it
    with ``stop()``. ``error`` holds what ended it early, if anything did."""

    def __init__(self, stream: _Stream, callback: Callable[[Event], Any]):
        self._stream = stream
        self._callback = callback
        self.error: Optional[BaseException] = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gmux-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._stream:
                if self._stopped.is_set():
                    return
                self._callback(event)
        except BaseException as e:  # noqa: BLE001 - kept for the owner to see
            if not self._stopped.is_set():
                self.error = e

    def stop(self, timeout: float = 5.0) -> None:
        """Ends the watch: its connection closes, the callback is not called again, and
        the thread has ended when this returns (or ``timeout`` seconds have passed)."""
        self._stopped.set()
        self._stream.close()
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        """Whether it still watches."""
        return self._thread.is_alive()


def on_pressure(
    callback: Callable[[Event], Any],
    avg10: Optional[float] = None,
    avg60: Optional[float] = None,
    avg300: Optional[float] = None,
    *,
    kind: str = "some",
    tenant: Optional[str] = None,
    socket: Optional[str] = None,
) -> Watcher:
    """Calls ``callback(event)`` in a background thread each time the pressure of
    ``tenant`` (default: this process's, ``current()``) over one window rises above its
    percentage: give one of ``avg10``, ``avg60`` or ``avg300``."""
    given = [(w, p) for w, p in ((10, avg10), (60, avg60), (300, avg300)) if p is not None]
    if len(given) != 1:
        raise ValueError("give one threshold: avg10=, avg60= or avg300= (a percentage)")
    name = tenant or current(socket)
    if name is None:
        raise GmuxError("this process is not run under `gmux run`; name the tenant with tenant=")
    window, percent = given[0]
    trigger = {"when": "pressure_above", "kind": kind, "window": window, "percent": float(percent)}
    return Watcher(_watch(name, trigger, socket), callback)


def torch_empty_cache_on_pressure(avg10: float = 20.0, extra: Optional[Callable[[Event], Any]] = None, **kw: Any) -> Watcher:
    """Gives PyTorch's cached GPU memory back (``torch.cuda.empty_cache()``) each time
    this process's pressure rises above ``avg10`` percent, then calls ``extra(event)``
    if given (shrink a KV pool, drop a cache)."""
    import torch  # imported here: the rest of the module does not need it

    def give_back(event: Event) -> None:
        torch.cuda.empty_cache()
        if extra is not None:
            extra(event)

    return on_pressure(give_back, avg10=avg10, **kw)
