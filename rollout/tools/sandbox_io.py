"""Process I/O of one sandbox run: bounded pipe reading, the wall-clock kill, bwrap's status documents."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from typing import Any

_GRACE_S = 1.0


def read_bounded(proc: subprocess.Popen[bytes], deadline: float, cap: int) -> tuple[bytes, bytes, bool, bool, bool]:
    """Read both pipes until EOF or ``deadline``; keep ``cap`` bytes of each. Returns
    (stdout, stderr, stdout_truncated, stderr_truncated, timed_out)."""
    assert proc.stdout is not None and proc.stderr is not None
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    cut = dict.fromkeys(bufs, False)
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if timed_out:
                    break  # grace period after the kill is over; leave the rest
                timed_out = True
                kill_group(proc)
                deadline = time.monotonic() + _GRACE_S
                continue
            for key, _ in sel.select(timeout=remaining):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                room = cap - len(bufs[key.fd])
                bufs[key.fd] += chunk[: max(0, room)]
                cut[key.fd] = cut[key.fd] or len(chunk) > room
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), cut[out_fd], cut[err_fd], timed_out


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL bwrap's process group (the jail's pid namespace dies with bwrap). Only called while
    bwrap is not yet reaped, so its pid (= the group id, a session leader) cannot have been reused."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def wait_exited(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait until bwrap has exited WITHOUT reaping it (WNOWAIT); False at the deadline."""
    while True:
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        if info is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def read_status(fd: int, data: bytes = b"") -> list[dict[str, Any]]:
    """The JSON documents bwrap wrote to --json-status-fd (after it exited); ``data``: bytes read before."""
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    docs, decoder, text, pos = [], json.JSONDecoder(), data.decode("utf-8", "replace"), 0
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        doc, pos = decoder.raw_decode(text, pos)
        docs.append(doc)
    return docs
