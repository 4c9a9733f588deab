"""Shared fixtures.

Broker: ``STREAMGRPO_TEST_BOOTSTRAP=host:port`` uses your own Kafka (bring-your-own broker);
otherwise one embedded Tansu broker is started for the whole session and stopped at the end (by
pid: never a broad pkill). Each test that needs isolation takes ``kafka_ns``: a unique topic
prefix with every catalog topic created under it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamgrpo.config import KafkaSettings


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaSettings]:
    external = os.environ.get("STREAMGRPO_TEST_BOOTSTRAP")
    if external:
        yield KafkaSettings(bootstrap=external)
        return
    # session_timeout_ms=3000: Tansu answers a group join after half the session timeout.
    from streamgrpo.topics.broker import EmbeddedBroker

    home = Path(tempfile.mkdtemp(prefix="streamgrpo-test-broker-"))
    with EmbeddedBroker(home) as broker:
        yield KafkaSettings(bootstrap=broker.bootstrap, session_timeout_ms=3000)


@pytest.fixture
def kafka_ns(kafka: KafkaSettings) -> KafkaSettings:
    """KafkaSettings with a unique topic prefix; every catalog topic exists under it."""
    from streamgrpo.topics.admin import ensure

    ns = kafka.model_copy(update={"topic_prefix": f"t{uuid.uuid4().hex[:10]}."})
    ensure(ns)
    return ns


@pytest.fixture(scope="session")
def streamgrpo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state directory (models cache is shared across sessions, see `model_cache`)."""
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="session")
def model_cache() -> Path:
    """Where the converted SmolLM2 lives between runs (converted once; ~40 s the first time): the services'
    own ``[loop] model_cache`` (``<STREAMGRPO_HOME>/models`` by default)."""
    from streamgrpo.config import LoopSettings, load

    path = load(LoopSettings, "loop").model_cache
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def run_process() -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose command line is a `streamgrpo ... run` (as `streamgrpo run`'s is): what run discovery
    (`streamgrpo.runs`) takes for a live run's owner."""
    from streamgrpo import runs

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "streamgrpo", "run"])
    deadline = time.monotonic() + 10
    while not runs.RunRecord("x", "", "", "", proc.pid, 0.0).live() and time.monotonic() < deadline:
        time.sleep(0.05)  # /proc/<pid>/cmdline shows the new command line a moment after exec
    yield proc
    proc.kill()
    proc.wait()
