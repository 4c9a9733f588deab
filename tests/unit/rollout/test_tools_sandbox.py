"""The python sandbox: every attack is contained with a clear error, the caller is unharmed, and the
next normal call still works. Each test starts real child interpreters (about 0.1-0.3 s each)."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from streamgrpo.rollout.tools.config import SandboxSettings
from streamgrpo.rollout.tools.python_sandbox import PythonSandbox, run_sandboxed


@pytest.fixture
def limits(tmp_path: Path) -> SandboxSettings:
    root = tmp_path / "sbx"
    root.mkdir()
    return SandboxSettings(cpu_seconds=1, wall_seconds=5, memory_mb=256, tmp_root=root)


@pytest.fixture
def tool(limits: SandboxSettings) -> PythonSandbox:
    return PythonSandbox(limits)


def _alive_children_of(root: Path) -> list[int]:
    """Processes whose command line names our per-test temp root (the child's argv carries its workdir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(root).encode() in cmdline:
            found.append(int(entry.name))
    return found


def _assert_caller_unharmed(tool: PythonSandbox, limits: SandboxSettings, before: dict[str, object]) -> None:
    assert os.getpid() == before["pid"]
    assert os.getcwd() == before["cwd"]
    assert resource.getrlimit(resource.RLIMIT_AS) == before["rlimit_as"]
    assert resource.getrlimit(resource.RLIMIT_CPU) == before["rlimit_cpu"]
    assert limits.tmp_root is not None
    assert list(limits.tmp_root.iterdir()) == [], "the working directory must be deleted"
    assert _alive_children_of(limits.tmp_root) == [], "no sandbox process may survive the call"
    nxt = tool.run({"code": "print(2+2)"})
    assert nxt.error is None and nxt.output.strip() == "4"


@pytest.fixture
def before() -> dict[str, object]:
    return {"pid": os.getpid(), "cwd": os.getcwd(), "rlimit_as": resource.getrlimit(resource.RLIMIT_AS),
            "rlimit_cpu": resource.getrlimit(resource.RLIMIT_CPU)}


ATTACKS = {
    "fork_bomb": ("import os\nwhile True:\n    os.fork()\n", "process creation"),
    "fork_bomb_multiprocessing": (
        "import multiprocessing as mp\nwhile True:\n    mp.Process(target=print).start()\n", "process creation"),
    "os_system": ("import os\nos.system('echo pw' + 'ned')\n", "process creation"),
    "subprocess": ("import subprocess\nsubprocess.run(['echo', 'pw' + 'ned'])\n", "process creation"),
    "read_etc_passwd": ("print(open('/etc/passwd').read())\n", "reading /etc/passwd"),
    "socket_connect": ("import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 9))\n", "socket"),
    "socket_udp": ("import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 9))\n",
                   "socket"),
    "write_outside": ("open('/tmp/streamgrpo-sandbox-escape', 'w').write('x')\n", "writing /tmp/streamgrpo-sandbox-escape"),
    "ctypes_native_call": ("import ctypes\nctypes.CDLL(None).fork()\n", "ctypes"),
    "raise_rlimit": ("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (100, 100))\n", "resource.setrlimit"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_is_denied_with_a_clear_error(name: str, tool: PythonSandbox, limits: SandboxSettings,
                                             before: dict[str, object]) -> None:
    code, expected = ATTACKS[name]
    result = tool.run({"code": code})
    assert result.error is not None
    assert "[sandbox]" in result.error and expected in result.error
    assert "pwned" not in result.output
    _assert_caller_unharmed(tool, limits, before)
    assert not Path("/tmp/streamgrpo-sandbox-escape").exists()


def test_infinite_loop_is_killed_by_the_cpu_limit(tool: PythonSandbox, limits: SandboxSettings,
                                                  before: dict[str, object]) -> None:
    result = tool.run({"code": "while True:\n    pass\n"})
    assert result.error is not None
    assert "CPU time limit of 1s" in result.error or "wall-clock limit" in result.error
    _assert_caller_unharmed(tool, limits, before)


def test_sleeping_code_is_killed_by_the_wall_clock(limits: SandboxSettings, before: dict[str, object]) -> None:
    short = limits.model_copy(update={"wall_seconds": 1.0})
    tool = PythonSandbox(short)
    result = tool.run({"code": "import time\nprint('start', flush=True)\ntime.sleep(60)\n"})
    assert result.error == "killed: wall-clock limit of 1s exceeded"
    assert result.output.startswith("start")  # output produced before the kill is kept
    _assert_caller_unharmed(tool, short, before)


@pytest.mark.parametrize("code", ["x = bytearray(4 * 1024 ** 3)\n",
                                  "chunks = []\nwhile True:\n    chunks.append(' ' * 10 ** 7)\n"])
def test_memory_bomb_hits_the_memory_limit(code: str, tool: PythonSandbox, limits: SandboxSettings,
                                           before: dict[str, object]) -> None:
    result = tool.run({"code": code})
    assert result.error is not None and "MemoryError" in result.error and "256 MiB" in result.error
    _assert_caller_unharmed(tool, limits, before)


def test_normal_computation_and_files_in_its_own_directory(tool: PythonSandbox) -> None:
    code = (
        "import math, json\n"
        "with open('data.json', 'w') as fh:\n    json.dump({'n': math.factorial(10)}, fh)\n"
        "with open('data.json') as fh:\n    print(json.load(fh)['n'])\n"
    )
    result = tool.run({"code": code})
    assert result.error is None
    assert result.output.strip() == "3628800"


def test_environment_is_scrubbed(tool: PythonSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMGRPO_TEST_SECRET", "hunter2")
    result = tool.run({"code": "import os\nprint(sorted(os.environ))\nprint(os.environ.get('STREAMGRPO_TEST_SECRET'))"})
    assert result.error is None
    assert "hunter2" not in result.output
    assert "STREAMGRPO_TEST_SECRET" not in result.output


def test_huge_output_is_bounded_and_marked(limits: SandboxSettings) -> None:
    run = run_sandboxed("import sys\nfor _ in range(2000):\n    sys.stdout.write('x' * 10000)\n", limits)
    assert run.returncode == 0
    assert run.stdout_truncated and len(run.stdout) == limits.capture_bytes
    result = PythonSandbox(limits, max_output_chars=300).run({"code": "print('y' * 5000)"})
    assert result.truncated and len(result.output) == 300


def test_user_errors_show_the_user_traceback_only(tool: PythonSandbox) -> None:
    result = tool.run({"code": "def f():\n    return 1 / 0\nprint('before')\nf()\n"})
    assert result.error == "exit status 1: ZeroDivisionError: division by zero"
    assert result.output.startswith("before")
    assert 'File "main.py", line 2, in f' in result.output
    assert "_sandbox_child" not in result.output


def test_stdlib_and_installed_packages_are_importable(tool: PythonSandbox) -> None:
    result = tool.run({"code": "import fractions, asyncio, subprocess\nimport sympy\n"
                               "print(sympy.factorint(360), fractions.Fraction(3, 6))"})
    assert result.error is None, result.output
    assert result.output.strip() == "{2: 3, 3: 2, 5: 1} 1/2"


def test_bad_input_is_an_error_not_an_exception(tool: PythonSandbox) -> None:
    assert tool.run({}).error is not None and "code" in (tool.run({}).error or "")
    assert tool.run({"code": "   "}).error == "empty program; send Python code that prints its result"
    assert tool.run({"code": "print("}).error == "exit status 1: SyntaxError: '(' was never closed"


def _has_cap_sys_admin() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) & (1 << 21))
    return False


def test_network_namespace_when_permitted(limits: SandboxSettings) -> None:
    """``os.readlink`` is not audited, so the child can report its network namespace."""
    code = "import os\nprint(os.readlink('/proc/self/ns/net'))"
    ours = os.readlink("/proc/self/ns/net")
    shared = run_sandboxed(code, limits.model_copy(update={"isolate_network": False}))
    assert shared.stdout.strip() == ours
    if not _has_cap_sys_admin():
        pytest.skip("unshare(CLONE_NEWNET) needs CAP_SYS_ADMIN; the audit hook alone blocks sockets here")
    isolated = run_sandboxed(code, limits)
    assert isolated.returncode == 0 and isolated.stdout.strip().startswith("net:[")
    assert isolated.stdout.strip() != ours


def _readable_by_others(path: str) -> bool:
    p = Path(path).resolve()
    return all(os.stat(q).st_mode & 0o005 == 0o005 for q in [p, *p.parents])


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")
def test_run_as_uid_drops_privileges(limits: SandboxSettings) -> None:
    import sysconfig

    if not _readable_by_others(sysconfig.get_paths()["stdlib"]):
        pytest.skip("the interpreter is not readable by an unprivileged uid on this machine (e.g. under /root)")
    dropped = limits.model_copy(update={"run_as_uid": 65534})
    run = run_sandboxed("import os\nprint(os.getuid(), os.getgid())\nopen('f', 'w').write('x')", dropped)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "65534 65534"
