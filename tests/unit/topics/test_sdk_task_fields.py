"""The SDK refuses bad task fields with an error naming the field, never rewriting them (issue 24, finding 8).

Each case is what the campaign sent: ``group_size=0`` became 2 (the producer's default),
``ground_truths="144"`` became ['1', '4', '4'], ``None`` became "None", a 300 KB question was
reported published and later dead-lettered by the fan-out's limit, metadata 100k deep raised a
RecursionError, a task_id with path traversal and a bidi override was accepted.
"""

from __future__ import annotations

from typing import Any

import pytest

from streamgrpo.avro.codec import Codec
from streamgrpo.config import KafkaSettings
from streamgrpo.errors import StreamGRPOError
from streamgrpo.streams.fanout import check_task
from streamgrpo.tasks.datasets import TaskRow
from streamgrpo.topics.limits import MAX_TASK_BYTES
from streamgrpo.topics.sdk import TaskProducer, TaskValidationError, encode_row, make_task


def _deep(n: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(n):
        value = {"k": value}
    return value


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"ground_truths": "144"}, "ground_truths"), ({"ground_truths": ["144", None]}, r"ground_truths\[1\]"),
     ({"ground_truths": [144]}, r"ground_truths\[0\]"), ({"ground_truths": {"a": "b"}}, "ground_truths"),
     ({"question": None}, "question"), ({"question": "x" * 300_000}, "bytes encoded"),
     ({"metadata": {"a": None}}, "metadata"), ({"metadata": _deep(100_000)}, "metadata"),
     ({"metadata": ["a"]}, "metadata"), ({"task_id": "../../etc/passwd\u202e"}, "task_id"),
     ({"task_id": "a/b"}, "task_id"), ({"task_id": "a..b"}, "task_id"), ({"task_id": "x" * 200}, "task_id"),
     ({"task_id": "t\n1"}, "task_id"), ({"task_id": ""}, "task_id"), ({"task_id": 7}, "task_id"),
     ({"group_size": 0}, "group_size"), ({"source": None}, "source")],
)
def test_bad_fields_are_errors_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"question": "What is 12 squared?", "source": "s", "group_size": 4,
                            "ground_truths": ["144"], **kwargs}
    with pytest.raises(TaskValidationError, match=field) as info:
        make_task(args.pop("question"), **args)
    assert isinstance(info.value, StreamGRPOError)


def test_good_fields_are_kept_as_given() -> None:
    task = make_task("What is 12 squared?", source="s", group_size=1, ground_truths=("144", "12^2"),
                     metadata={"id": "7"}, task_id="gsm8k:train-7_a.b")
    assert (task.ground_truths, task.metadata, task.envelope.task_id) == (["144", "12^2"], {"id": "7"},
                                                                         "gsm8k:train-7_a.b")


def test_the_size_limit_is_the_fan_outs() -> None:
    # the largest question make_task accepts is one the fan-out accepts, and a byte more is refused by both
    codec, low, high = Codec(), 1, MAX_TASK_BYTES
    while low < high:  # largest accepted question length
        mid = (low + high + 1) // 2
        try:
            make_task("q" * mid, source="s", group_size=2)
            low = mid
        except TaskValidationError:
            high = mid - 1
    task = make_task("q" * low, source="s", group_size=2)
    assert check_task(task, len(codec.encode(task))) is None
    with pytest.raises(TaskValidationError):
        make_task("q" * (low + 1), source="s", group_size=2)


def test_a_submit_file_row_over_the_fan_out_limit_is_rejected_before_publishing() -> None:
    row = TaskRow(question="x" * 300_000, ground_truths=["1"], source="s", metadata={})
    with pytest.raises(TaskValidationError, match="bytes encoded"):
        encode_row(1, row, Codec(), KafkaSettings(), group_size=2, source=None, max_bytes=1_000_000)


def test_task_producer_submit_honours_group_size_zero_as_an_error() -> None:
    tp = TaskProducer(KafkaSettings(bootstrap="127.0.0.1:9"), source="s", group_size=2)
    with pytest.raises(TaskValidationError, match="group_size"):
        tp.submit("q?", ground_truths=["1"], group_size=0)
    with pytest.raises(TaskValidationError, match="ground_truths"):
        tp.submit("q?", ground_truths="144")
    tp.close()
