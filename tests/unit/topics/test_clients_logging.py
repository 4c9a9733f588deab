"""librdkafka's own log lines go through Python logging (logger ``librdkafka``), never raw to stderr.

A real confluent-kafka consumer, built from :func:`client_config`, is pointed at a closed loopback port in a
fresh interpreter: librdkafka reports the refused connections. Before the fix its default log callback printed
them as ``%3|<time>|FAIL|...`` lines straight to stderr, among the CLI's own output (``make run`` showed a
``%6|...|BGQUEUE|...`` line the same way).
"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
from streamgrpo.log import setup_logging
setup_logging("INFO")
from confluent_kafka import Consumer
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.broker import free_port
from streamgrpo.topics.clients import client_config
c = Consumer(client_config(KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}"), **{"group.id": "log-test"}))
c.subscribe(["tasks"])
for _ in range(6):
    c.poll(0.5)
c.close()
"""


def test_librdkafka_lines_reach_python_logging_not_raw_stderr() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    raw = [ln for ln in out.splitlines() if ln.startswith("%") and "|" in ln]
    assert raw == [], f"raw librdkafka lines: {raw}"
    assert any(" librdkafka: FAIL " in ln and "Connection refused" in ln for ln in out.splitlines()), out
