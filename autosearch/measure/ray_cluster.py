"""Starting or joining the Ray cluster the device pool runs on, and leaving it.

Without an address the pool starts a private single-node Ray on loopback, sized to this machine, with a
token of its own; with one (``"auto"``, ``"HOST:PORT"``) it joins that cluster. A connection this
process already has is used as it is, and left open.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Iterator
from typing import Any

import ray

from autosearch.errors import UserError, last_line
from autosearch.frontend.target import host_cores

log = logging.getLogger(__name__)

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@contextlib.contextmanager
def keep_loopback() -> Iterator[None]:
    """Keep a single-machine cluster on 127.0.0.1 while this process starts or joins it.

    Ray (2.60) replaces 127.0.0.1 by the machine's external address (so other machines could join),
    and its servers then listen on every interface. Its own switch for single-machine platforms keeps
    loopback; it is a private constant, so if it is gone we only warn.
    """
    try:
        from ray._private import ray_constants
    except ImportError:  # pragma: no cover - Ray moved it
        ray_constants = None
    if ray_constants is None or not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        log.warning("cannot keep Ray on loopback with this Ray version: it may listen on all interfaces")
        yield
        return
    old = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old


def _ephemeral_token() -> None:
    """A per-process token for the private embedded cluster, unless the user configured one.

    Ray 2.60 turns token auth on for ``ray.init()`` clusters and would otherwise write a token to
    ``~/.ray/auth_token``, which later ``ray start`` calls on this machine then pick up.
    """
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    if os.path.exists(os.path.join(os.path.expanduser("~"), ".ray", "auth_token")):
        return
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return host in _LOOPBACK


ANSWER_TIMEOUT = 10.0  # seconds a cluster's head has to accept a TCP connection before joining it is given up


def _require_answer(address: str) -> None:
    """A ``HOST:PORT`` (or ``ray://HOST:PORT``) that accepts no connection fails in seconds, in one line: Ray's own
    join retries an unreachable head for minutes, printing its client's warnings. ``auto`` and other forms are
    left to Ray."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=ANSWER_TIMEOUT).close()
    except OSError as exc:
        raise UserError(f"cannot join the Ray cluster at {address!r}: {host}:{port} does not answer "
                        f"({exc.strerror or type(exc).__name__})") from exc


def connect(address: str | None, *, key: str, num_devices: int | None, init_kwargs: dict[str, Any]) -> bool:
    """Start (``address=None``: one node on loopback advertising ``num_devices`` units of ``key``, default 1)
    or join a cluster; True if this call connected, so the caller should :func:`disconnect` when done."""
    if ray.is_initialized():
        log.info("using the Ray connection this process already has")
        return False
    kwargs: dict[str, Any] = {"log_to_driver": False}
    if address is None:
        _ephemeral_token()
        kwargs.update(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                      num_cpus=host_cores(), resources={key: num_devices or 1})
    else:
        _require_answer(address)
        kwargs["address"] = address
    kwargs.update(init_kwargs)
    loopback = address is None or _is_loopback(address)
    try:
        with keep_loopback() if loopback else contextlib.nullcontext():
            ray.init(**kwargs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        where = "a local Ray instance" if address is None else f"the Ray cluster at {address!r}"
        raise UserError(f"cannot start or join {where}: {last_line(exc)}") from exc
    log.info("Ray %s: %s", "started on loopback" if address is None else f"joined at {address}",
             ray.cluster_resources())
    return True


def disconnect() -> None:
    """Leave the cluster (and stop it, if this process started it)."""
    if ray.is_initialized():
        ray.shutdown()


def require_local_cuda() -> None:
    """An embedded pool measures on this machine: its TVM must have the CUDA runtime."""
    import tvm

    if not tvm.runtime.enabled("cuda"):
        raise UserError(
            "target cuda: this machine's TVM has no CUDA runtime (tvm.runtime.enabled('cuda') is False; the "
            "PyPI apache-tvm wheel is CPU-only). Install a TVM built with USE_CUDA=ON, or join a cluster of "
            "GPU machines with --ray-address."
        )


def require_gpu_nodes(key: str) -> None:
    """Some live node must advertise both the device key and a GPU."""
    ok = [n for n in ray.nodes()
          if n.get("Alive") and n["Resources"].get(key, 0) >= 1 and n["Resources"].get("GPU", 0) >= 1]
    if not ok:
        raise UserError(f"no node advertises both the resource {key!r} and a GPU: start GPU machines with "
                        f"ray start --address <head> --num-gpus 1 --resources '{{\"{key}\": 1}}'")


def first_line(exc: BaseException) -> str:
    """``Type: first line`` of a Ray error (its message goes on with the remote traceback)."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500]
