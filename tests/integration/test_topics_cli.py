"""The CLI as a user runs it: real processes, real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic

pytestmark = pytest.mark.broker


def cli(kafka: KafkaSettings, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STREAMGRPO_BOOTSTRAP=kafka.bootstrap or "", STREAMGRPO_KAFKA__TOPIC_PREFIX=kafka.topic_prefix)
    if home is not None:
        env["STREAMGRPO_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "streamgrpo.cli", *args], env=env, capture_output=True, text=True,
                          timeout=180)


def test_submit_builtin_then_tail(kafka_ns: KafkaSettings) -> None:
    proc = cli(kafka_ns, "submit", "builtin", "--group-size", "4", "--limit", "30")
    assert proc.returncode == 0, proc.stderr
    assert "published 30 task(s), rejected 0 row(s)" in proc.stdout
    tasks = [r.event for r in read_topic(kafka_ns, "tasks")]
    assert len(tasks) == 30 and all(t.group_size == 4 and t.ground_truths for t in tasks)
    proc = cli(kafka_ns, "tail", "tasks", "--from-beginning", "--limit", "5")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == 5
    assert all(line["type"] == "Task" and line["event"]["question"] for line in lines)


def test_submit_rejects_bad_rows_with_row_numbers_and_publishes_nothing(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    f = tmp_path / "tasks.jsonl"
    f.write_text(
        json.dumps({"question": "What is 2+2?", "answer": "4"}) + "\n"
        + json.dumps({"answer": "5"}) + "\n"  # row 2: no question
        + "{not json\n"  # row 3: broken line
        + json.dumps({"question": "Capital of France?", "ground_truths": ["Paris"]}) + "\n"
    )
    proc = cli(kafka_ns, "submit", str(f))
    assert proc.returncode != 0
    assert "row 2" in proc.stderr and "question" in proc.stderr
    assert "row 3" in proc.stderr
    assert "nothing was published" in proc.stderr
    assert read_topic(kafka_ns, "tasks") == []

    proc = cli(kafka_ns, "submit", str(f), "--skip-invalid")
    assert proc.returncode == 0, proc.stderr
    assert "published 2 task(s), rejected 2 row(s)" in proc.stdout
    report = [json.loads(line) for line in (tmp_path / "tasks.jsonl.rejected.jsonl").read_text().splitlines()]
    assert [r["row"] for r in report] == [2, 3]
    assert sorted(r.event.question for r in read_topic(kafka_ns, "tasks")) == ["Capital of France?", "What is 2+2?"]


def test_submit_deepmath_and_nq_parquet(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"question": ["Compute $\\frac{1}{2}+\\frac{1}{4}$."], "final_answer": ["\\frac{3}{4}"],
                             "difficulty": [2.5], "topic": ["Algebra"]}), tmp_path / "dm.parquet")
    pq.write_table(pa.table({"id": ["nq-1"], "question": ["who wrote hamlet"],
                             "golden_answers": [["William Shakespeare", "Shakespeare"]]}), tmp_path / "nq.parquet")
    assert cli(kafka_ns, "submit", str(tmp_path / "dm.parquet"), "--kind", "deepmath").returncode == 0
    assert cli(kafka_ns, "submit", str(tmp_path / "nq.parquet"), "--kind", "nq").returncode == 0
    by_source = {t.source: t for t in (r.event for r in read_topic(kafka_ns, "tasks"))}
    assert by_source["deepmath"].ground_truths == ["\\frac{3}{4}"]
    assert by_source["nq"].ground_truths == ["William Shakespeare", "Shakespeare"]


def test_broker_up_status_down(tmp_path: Path) -> None:
    kafka = KafkaSettings()
    up = cli(kafka, "broker", "up", home=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        assert "broker started: bootstrap 127.0.0.1:" in up.stdout
        again = cli(kafka, "broker", "up", home=tmp_path)
        assert "already running" in again.stdout
        status = cli(kafka, "broker", "status", home=tmp_path)
        assert status.returncode == 0 and ": up" in status.stdout
    finally:
        down = cli(kafka, "broker", "down", home=tmp_path)
    assert down.returncode == 0 and "stopped" in down.stdout
    status = cli(kafka, "broker", "status", home=tmp_path)
    assert status.returncode == 1


def test_commands_without_a_broker_say_what_to_do(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO")}
    env["STREAMGRPO_HOME"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "streamgrpo.cli", "topics", "list"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "streamgrpo broker up" in proc.stderr and "--bootstrap" in proc.stderr


# -- all-or-nothing submit: encoding, size, group size, file encoding --------------------------------
def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _report(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_submit_a_lone_surrogate_publishes_nothing_and_names_the_row(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    good = [{"question": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(2)]
    f = _jsonl(tmp_path / "t.jsonl", [*good, {"question": "Bad \ud800 text", "answer": "1"}])  # json escapes it
    assert "\\ud800" in f.read_text()
    proc = cli(kafka_ns, "submit", str(f))
    assert proc.returncode != 0
    assert "row 3: question: contains '\\ud800' at position 4, a lone UTF-16 surrogate" in proc.stderr
    assert "nothing was published" in proc.stderr and "Traceback" not in proc.stderr
    assert read_topic(kafka_ns, "tasks") == []
    proc = cli(kafka_ns, "submit", str(f), "--skip-invalid")
    assert proc.returncode == 0, proc.stderr
    assert "published 2 task(s), rejected 1 row(s)" in proc.stdout
    assert [r["row"] for r in _report(tmp_path / "t.jsonl.rejected.jsonl")] == [3]
    assert len(read_topic(kafka_ns, "tasks")) == 2


def test_submit_an_oversized_row_publishes_nothing_and_names_the_row(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    good = [{"question": f"What is {i}*2?", "answer": str(2 * i)} for i in range(5)]
    f = _jsonl(tmp_path / "t.jsonl", [*good, {"question": "x" * 1_000_000, "answer": "1"}])
    proc = cli(kafka_ns, "submit", str(f))
    assert proc.returncode != 0
    # the fan-out's limit (topics.limits.MAX_TASK_BYTES) is the tighter one: the row never reaches the topic's
    assert "row 6: the task is 1,000," in proc.stderr and "at most 262,144 are accepted" in proc.stderr
    assert "nothing was published" in proc.stderr
    assert read_topic(kafka_ns, "tasks") == []
    proc = cli(kafka_ns, "submit", str(f), "--skip-invalid")
    assert proc.returncode == 0, proc.stderr
    assert "published 5 task(s), rejected 1 row(s)" in proc.stdout
    assert [r["row"] for r in _report(tmp_path / "t.jsonl.rejected.jsonl")] == [6]
    assert sorted(r.event.question for r in read_topic(kafka_ns, "tasks")) == sorted(r["question"] for r in good)


def test_submit_honours_or_rejects_a_rows_own_group_size(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "t.jsonl", [
        {"question": "q1?", "answer": "1", "group_size": 3},
        {"question": "q2?", "answer": "2"},
        {"question": "q3?", "answer": "3", "group_size": 10**9},
        {"question": "q4?", "answer": "4", "group_size": "many"},
        {"question": "q5?", "answer": "5", "group_size": "16"},
    ])
    proc = cli(kafka_ns, "submit", str(f), "--group-size", "4")
    assert proc.returncode != 0
    assert "row 3: group_size: must be an integer from 1 to 256, got 1000000000" in proc.stderr
    assert "row 4: field 'group_size': must be an integer, got 'many'" in proc.stderr
    assert read_topic(kafka_ns, "tasks") == []
    proc = cli(kafka_ns, "submit", str(f), "--group-size", "4", "--skip-invalid")
    assert proc.returncode == 0, proc.stderr
    sizes = {t.question: t.group_size for t in (r.event for r in read_topic(kafka_ns, "tasks"))}
    assert sizes == {"q1?": 3, "q2?": 4, "q5?": 16}


def test_submit_a_non_utf8_file_is_a_clear_error(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    csv_file = tmp_path / "t.csv"
    csv_file.write_bytes("question,answer\nCaf\u00e9 au lait?,yes\n".encode("latin-1"))
    proc = cli(kafka_ns, "submit", str(csv_file))
    assert proc.returncode != 0
    assert "not UTF-8 text (byte 0xe9 at offset" in proc.stderr and "iconv" in proc.stderr
    assert "nothing was published" in proc.stderr and "Traceback" not in proc.stderr
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_bytes(b'{"question": "ok?", "answer": "1"}\n' + '{"question": "Caf\u00e9?", "answer": "2"}\n'.encode("latin-1"))
    proc = cli(kafka_ns, "submit", str(jsonl))
    assert proc.returncode != 0 and "row 2: field '<line>': not UTF-8 text" in proc.stderr
    assert read_topic(kafka_ns, "tasks") == []


def test_the_size_limit_is_the_topics_or_the_producers(kafka_ns: KafkaSettings) -> None:
    from streamgrpo.tasks.datasets import TaskRow
    from streamgrpo.topics.producer import EventProducer
    from streamgrpo.topics.sdk import PRODUCER_MAX_MESSAGE_BYTES, publish_rows, topic_max_message_bytes

    # The embedded broker reports no max.message.bytes: Kafka's default (1048588), capped by the producer's.
    assert topic_max_message_bytes(kafka_ns) == PRODUCER_MAX_MESSAGE_BYTES
    rows = [(1, TaskRow("short?", ["1"])), (2, TaskRow("y" * 3000, ["2"])), (3, TaskRow("fine?", ["3"]))]
    with EventProducer(kafka_ns, "test") as producer:
        report = publish_rows(rows, producer, group_size=2, max_message_bytes=2000)
        assert report.published == 0 and [n for n, _ in report.rejected] == [2]
        report = publish_rows(rows, producer, group_size=2, max_message_bytes=2000, skip_invalid=True)
    assert report.published == 2
    assert sorted(r.event.question for r in read_topic(kafka_ns, "tasks")) == ["fine?", "short?"]
