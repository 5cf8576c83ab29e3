"""``--ray-address`` checked before any work, and Ray joined without flooding the terminal.

A Ray head answers gRPC (HTTP/2) on its GCS port (6379) and its client port (``ray://``, 10001):
:func:`check_address` opens a TCP connection and sends HTTP/2's connection preface, and a head
answers with a SETTINGS frame at once. Anything else (nothing listening, a firewall that swallows
the packets, a port of another program) is one line naming the flag within
:data:`CONNECT_TIMEOUT` seconds, where Ray itself would retry for minutes and print its
``gcs_client.cc`` errors meanwhile. :func:`quiet_init` joins with Ray's own log lines (its C++ core
writes them to file descriptor 2) kept off the terminal; a failure is one line naming the flag.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CONNECT_TIMEOUT = 5.0  # seconds to reach --ray-address before giving up (Ray itself retries for minutes)
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + an empty SETTINGS
SETTINGS_FRAME = 0x04  # the HTTP/2 frame type a gRPC server answers the preface with


def host_and_port(address: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``ray://HOST:PORT`` as (host, port); a ValueError naming ``ray_address`` else."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"ray_address={address!r} is not allowed; expected auto, HOST:PORT or ray://HOST:PORT")
    return host.strip("[]"), int(port)


def check_address(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Raise unless ``address`` accepts a TCP connection and answers as a gRPC server (a Ray head)
    within ``timeout`` seconds."""
    host, port = host_and_port(address)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise ValueError(
            f"ray_address={address!r} could not be reached within {timeout:g} s ({exc.strerror or exc}); "
            "is the Ray head running there?"
        ) from None
    with sock:
        try:
            sock.sendall(PREFACE)
            frame: bytes | None = sock.recv(9)
        except OSError:  # a timeout, or the other end closed on the preface
            frame = None
    if not frame or len(frame) < 4 or frame[3] != SETTINGS_FRAME:
        how = "did not answer" if not frame else "answered"
        raise ValueError(
            f"ray_address={address!r} is not allowed: it accepts connections but {how} as a Ray head does (gRPC) "
            f"within {timeout:g} s; expected the address `ray start --head` printed (HOST:6379, or ray://HOST:10001)"
        )


@contextmanager
def _fd2_off() -> Iterator[None]:
    """File descriptor 2 (where Ray's C++ core logs) to /dev/null for the block (the processes a
    local Ray starts meanwhile write their own log files; nothing piles up in a file of ours)."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def quiet_init(ray: Any, address: str | None, **kwargs: Any) -> None:
    """``ray.init(address=address, **kwargs)`` with Ray's own lines kept off the terminal; a
    failure is one ValueError naming ``ray_address`` (or the local Ray) and Ray's reason."""
    with _fd2_off():
        try:
            ray.init(address=address, **kwargs) if address else ray.init(**kwargs)
            return
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ... : all one line here
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    where = f"ray_address={address!r}" if address else "a local Ray (--workers)"
    raise ValueError(f"{where}: Ray could not start or join the cluster ({reason})")
