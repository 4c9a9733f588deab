"""A service started by `streamgrpo run` dies with its supervisor, even when the supervisor is SIGKILLed
(real processes: a supervisor process, its child, SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")

CHILD = ("import os, sys, time\n"
         "from streamgrpo.supervisor import die_with_supervisor\n"
         "die_with_supervisor()\n"
         "assert 'STREAMGRPO_SUPERVISOR_PID' not in os.environ  # grandchildren do not inherit it\n"
         "print('armed', flush=True)\n"
         "time.sleep(120)\n")
SUPERVISOR = ("import os, subprocess, sys, time\n"
              "env = dict(os.environ)\n"
              "if sys.argv[1] == 'set':\n"
              "    env['STREAMGRPO_SUPERVISOR_PID'] = str(os.getpid())\n"
              "child = subprocess.Popen([sys.executable, '-c', sys.argv[2]], env=env, stdout=subprocess.PIPE,\n"
              "                         text=True, start_new_session=True)\n"
              "assert child.stdout.readline().strip() == 'armed'\n"
              "print(child.pid, flush=True)\n"
              "time.sleep(120)\n")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _child_of_killed_supervisor(mode: str) -> int:
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISOR, mode, CHILD], stdout=subprocess.PIPE, text=True)
    assert sup.stdout is not None
    child = int(sup.stdout.readline())
    sup.send_signal(signal.SIGKILL)
    sup.wait()
    return child


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_a_service_dies_when_its_supervisor_is_killed() -> None:
    child = _child_of_killed_supervisor("set")
    assert _gone_within(child, 20), "the child outlived its SIGKILLed supervisor"


def test_without_the_variable_nothing_changes() -> None:
    child = _child_of_killed_supervisor("unset")
    try:
        assert not _gone_within(child, 2), "a process not started by run must not be tied to its parent"
    finally:
        os.kill(child, signal.SIGKILL)


BROKER_OWNER = ("import sys, time\n"
                "from pathlib import Path\n"
                "from streamgrpo.topics.broker import EmbeddedBroker\n"
                "broker = EmbeddedBroker(Path(sys.argv[1]), die_with_owner=sys.argv[2] == 'tied')\n"
                "broker.start()\n"
                "print(broker.proc.pid, flush=True)\n"
                "time.sleep(120)\n")


def _broker_of_killed_owner(tmp_path, mode: str) -> int:
    owner = subprocess.Popen([sys.executable, "-c", BROKER_OWNER, str(tmp_path), mode], stdout=subprocess.PIPE,
                             text=True)
    assert owner.stdout is not None
    broker = int(owner.stdout.readline())
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    return broker


def test_the_broker_run_starts_dies_with_run(tmp_path) -> None:
    broker = _broker_of_killed_owner(tmp_path, "tied")
    assert _gone_within(broker, 20), "the embedded broker outlived its SIGKILLed owner"


def test_a_detached_broker_outlives_its_starter(tmp_path) -> None:  # `streamgrpo broker up`
    broker = _broker_of_killed_owner(tmp_path, "detached")
    try:
        assert not _gone_within(broker, 2), "a broker not tied to its starter must keep running"
    finally:
        os.kill(broker, signal.SIGKILL)
