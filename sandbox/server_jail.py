"""A bubblewrap jail for the stdio MCP servers a rollout worker starts (issue 38, finding 9).

A stdio MCP server is a program the operator configured, not LLM-written code, but it must not read the worker's
secrets: run as the worker's child it could read ``OPENAI_API_KEY`` and the judge's key from
``/proc/<worker pid>/environ`` and every file of the worker's home. :func:`server_argv` wraps its command in
``bwrap`` with:

- **namespaces**: user (no capabilities: ``--cap-drop ALL``; no further user namespaces), pid with a fresh
  ``/proc`` (only the server's own processes: no other process's environ, cmdline or open files), ipc, uts,
  cgroup, and network unless the server's ``network`` setting is on (then the host's network, and
  /etc/resolv.conf, hosts, nsswitch.conf and the CA certificates, read-only);
- **filesystem**: an empty root; read-only ``/usr`` (and the /bin, /lib... links), ``/etc/alternatives``, the
  interpreter's installation when the command is a Python, the executable's folder otherwise, every argument that
  names an existing path, and the server's ``read_paths``; a fresh tmpfs ``/tmp`` (also HOME and the working
  directory); a minimal ``/dev``. No home directory, no project but what is named, no /sys;
- **environment**: cleared; PATH, LANG, HOME=TMPDIR=/tmp and the server's own ``env`` entries only;
- **lifetime**: ``--die-with-parent`` and a new session: the server dies with the worker.

:func:`check_server_jail` runs ``/usr/bin/true`` through the same jail at start: bwrap fails (and says why) when a
namespace cannot be made or a path cannot be bound.

What is NOT covered: a seccomp filter and rlimits (the python sandbox has them; a server is trusted code), the
server's uid (the worker's own, mapped in the user namespace, with no capability), what it can reach over the
network when ``network`` is on (the worker's local services included).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from streamgrpo.sandbox.errors import SandboxUnavailableError
from streamgrpo.sandbox.jail import GRANT_HINT, MIN_BWRAP, bwrap_version, host_dirs, interpreter_dirs

NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf", "/etc/ssl",
                 "/etc/ca-certificates", "/etc/pki")
CHECK_S = 30.0


def _resolve(bwrap: str) -> str:
    found = shutil.which(bwrap)
    if found is None:
        raise SandboxUnavailableError(f"bubblewrap ({bwrap!r}) is not installed. {GRANT_HINT}")
    if bwrap_version(found) < MIN_BWRAP:
        raise SandboxUnavailableError(f"bubblewrap {'.'.join(map(str, MIN_BWRAP))} or newer is needed; {found} is older")
    return found


def _program_paths(command: Sequence[str]) -> tuple[list[str], list[str]]:
    """The command with path arguments made absolute, and the paths to bind read-only for it."""
    exe = shutil.which(command[0])
    if exe is None:
        raise SandboxUnavailableError(f"the MCP server's command {command[0]!r} is not found on PATH")
    binds: list[str] = []
    if os.path.basename(os.path.realpath(exe)).startswith("python"):
        binds += interpreter_dirs(exe)
    binds.append(os.path.dirname(os.path.realpath(exe)))
    argv = [os.path.abspath(exe)]
    for arg in command[1:]:
        if os.path.exists(arg):
            arg = os.path.abspath(arg)
            binds.append(os.path.realpath(arg))
        argv.append(arg)
    return argv, binds


def server_argv(command: Sequence[str], env: Mapping[str, str], *, bwrap: str = "bwrap", network: bool = False,
                read_paths: Sequence[str | Path] = ()) -> list[str]:
    """The full argv that runs ``command`` in the server jail (see the module docstring); raises
    SandboxUnavailableError when bwrap or the command is missing."""
    found = _resolve(bwrap)
    program, binds = _program_paths(command)
    argv = [found, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
            "--disable-userns", "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
            "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp"]
    if not network:
        argv.append("--unshare-net")
    for path, target in host_dirs():
        argv += ["--symlink", target, path] if target is not None else ["--ro-bind", path, path]
    extra = [*binds, *(str(p) for p in read_paths), *(NETWORK_FILES if network else ())]
    for path in dict.fromkeys(extra):
        if not path.startswith("/usr/") and path != "/usr":
            argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *program]


def check_server_jail(argv: Sequence[str]) -> None:
    """Run ``/usr/bin/true`` through the jail of ``argv`` (a :func:`server_argv` result); raises
    SandboxUnavailableError with bwrap's own reason when the jail cannot be set up."""
    cut = list(argv).index("--")
    try:
        proc = subprocess.run([*argv[:cut], "--", "/usr/bin/true"], capture_output=True, text=True,  # noqa: S603
                              timeout=CHECK_S, stdin=subprocess.DEVNULL, env={})
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailableError(f"the MCP server jail did not run: {exc}. {GRANT_HINT}") from exc
    if proc.returncode != 0:
        line = next((ln for ln in proc.stderr.splitlines() if ln.startswith("bwrap:")), proc.stderr.strip()[:300])
        raise SandboxUnavailableError(f"bubblewrap could not set up the MCP server jail ({line}). {GRANT_HINT}")
