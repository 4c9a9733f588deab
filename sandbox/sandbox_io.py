"""Process I/O of one sandbox run: bounded pipe reading, the wall-clock kill, the file-count watch,
bwrap's status documents."""

from __future__ import annotations

import json
import os
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_GRACE_S = 1.0
#: How often the file-count watch looks at the jail's /tmp (seconds).
WATCH_S = 0.05


@dataclass(frozen=True)
class Pipes:
    """What one run printed, as kept, and whether it was cut short."""

    out: bytes
    err: bytes
    out_cut: bool
    err_cut: bool
    timed_out: bool
    killed_for: str | None  # what the watch reported ("files"), when it ended the run


def read_bounded(proc: subprocess.Popen[bytes], deadline: float, cap: int,
                 watch: Callable[[], str | None] | None = None) -> Pipes:
    """Read both pipes until EOF or ``deadline``; keep ``cap`` bytes of each. ``watch`` is asked every
    :data:`WATCH_S`; when it names a limit, the jail is killed."""
    assert proc.stdout is not None and proc.stderr is not None
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    cut = dict.fromkeys(bufs, False)
    timed_out, killed_for, next_watch = False, None, 0.0
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if timed_out or killed_for:
                    break  # grace period after the kill is over; leave the rest
                timed_out = True
                kill_group(proc)
                deadline = time.monotonic() + _GRACE_S
                continue
            now = time.monotonic()
            if watch is not None and killed_for is None and now >= next_watch:
                next_watch = now + WATCH_S
                if (killed_for := watch()) is not None:
                    kill_group(proc)
                    deadline = min(deadline, now + _GRACE_S)
            wait = remaining if watch is None or killed_for else max(0.0, min(remaining, next_watch - now))
            for key, _ in sel.select(timeout=wait):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                room = cap - len(bufs[key.fd])
                bufs[key.fd] += chunk[: max(0, room)]
                cut[key.fd] = cut[key.fd] or len(chunk) > room
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    return Pipes(bytes(bufs[out_fd]), bytes(bufs[err_fd]), cut[out_fd], cut[err_fd], timed_out, killed_for)


class FileWatch:
    """Counts the files (tmpfs inodes) in the jail's working directory from outside, through
    ``/proc/<jail pid>/root``: bwrap cannot cap a tmpfs's inodes, and each costs kernel memory no rlimit
    counts. The jail's tmpfs is told from the host's directory by its device and its size."""

    def __init__(self, pid: int, workdir: str, disk_bytes: int, limit: int) -> None:
        self.path = f"/proc/{pid}/root{workdir}"
        self.host_dev = os.stat(workdir).st_dev if os.path.exists(workdir) else -1
        self.disk_bytes, self.limit = disk_bytes, limit
        self.seen = False  # the jail's tmpfs was seen at least once

    def __call__(self) -> str | None:
        try:
            st = os.statvfs(self.path)
            dev = os.stat(self.path).st_dev
        except OSError:
            return None  # not started yet, or gone
        if dev == self.host_dev or st.f_blocks * st.f_frsize != self.disk_bytes:
            return None  # still the host's view (before bwrap's pivot_root)
        self.seen = True
        return "files" if st.f_files - st.f_ffree > self.limit else None


def wait_child_pid(status_fd: int, deadline: float) -> tuple[int | None, bytes]:
    """Read bwrap's --json-status-fd until its first document (``child-pid``, written right after bwrap
    clones the jail); returns the pid (None when bwrap wrote none) and the bytes read."""
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([status_fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(status_fd, 65536)
        if not chunk:
            break
        data += chunk
        try:
            doc, _ = json.JSONDecoder().raw_decode(data.decode("utf-8", "replace").lstrip())
        except ValueError:
            continue
        return (int(doc["child-pid"]) if isinstance(doc, dict) and "child-pid" in doc else None), data
    return None, data


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
