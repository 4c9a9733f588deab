"""The pure core of the bounded broker-outage logs (:mod:`streamgrpo.topics.outage`): what a flood of client
errors, a flapping broker and repeated library lines become, on a simulated clock."""

from __future__ import annotations

import logging

from streamgrpo.topics.outage import QUOTE_CHARS, OutageLog, Repeats

T0 = 1_700_000_000.0  # 22:13:20 UTC
ERROR = "Failed fetch messages from 0: NodeNotReadyError: Attempt to send a request to node which is not ready (node id 0)."


def test_a_flood_of_errors_is_one_warning_one_summary_per_interval_and_one_info_line() -> None:
    out = OutageLog("10.0.0.7:9092", interval_s=30.0)
    lines = []
    for i in range(250 * 120):  # 250 errors/s for 2 minutes: the reported flood
        line = out.error(T0 + i / 250, ERROR) if i % 2 else out.consequence(T0 + i / 250, "Heartbeat failed")
        lines += [line] if line else []
    recovered = out.reachable(T0 + 125.0)
    assert recovered is not None and not out.down
    lines.append(recovered)
    assert [ln.level for ln in lines] == [logging.WARNING] * 4 + [logging.INFO]
    first, *summaries, last = (ln.text for ln in lines)
    assert "10.0.0.7:9092 unreachable: Failed fetch messages" in first and "bootstrap" in first
    assert all("unreachable since 22:13:20 UTC" in s for s in summaries)
    # the first error (i=1) opened the outage; the next 30 s of them (i=2..7501, the last one included) are counted
    assert "7500 client error(s) suppressed in the last 30 s" in summaries[0]
    assert "reachable again after 125 s" in last and "29999 client error(s) in all" in last


def test_a_flapping_broker_costs_at_most_one_warning_per_interval_and_one_info_per_outage() -> None:
    out = OutageLog("b:9092", interval_s=30.0)
    lines = []
    for second in range(600):  # down and back every other second for 10 minutes
        t = T0 + second
        line = out.error(t, ERROR) if second % 2 == 0 else out.reachable(t)
        lines += [line] if line else []
    warnings = [ln for ln in lines if ln.level == logging.WARNING]
    infos = [ln for ln in lines if ln.level == logging.INFO]
    assert len(infos) == len(warnings)  # each outage that was said ends with one line
    assert 600 / 30 / 2 <= len(warnings) <= 600 / 30 + 1  # still said, about every interval


def test_nothing_is_said_while_the_broker_is_reachable() -> None:
    out = OutageLog("b:9092")
    assert out.consequence(T0, "Topic x not found in cluster metadata") is None
    assert out.reachable(T0) is None and not out.down


def test_a_late_client_error_right_after_recovery_starts_a_silent_outage_summarised_at_the_next_tick() -> None:
    out = OutageLog("b:9092", interval_s=10.0)
    assert out.error(T0, ERROR) is not None
    assert out.reachable(T0 + 20) is not None
    assert out.error(T0 + 21, ERROR) is None  # a retry in flight when the broker came back: no new first line
    assert out.reachable(T0 + 22) is None  # nothing was said of it, so its end is not announced either
    assert out.error(T0 + 23, ERROR) is None and out.consequence(T0 + 25, ERROR) is None
    tick = out.consequence(T0 + 30.5, ERROR)
    assert tick is not None and "3 client error(s) suppressed" in tick.text


def test_a_quoted_error_is_one_bounded_line() -> None:
    out = OutageLog("b:9092")
    line = out.error(T0, "connection refused\n" + "x" * 5000)
    assert line is not None and "\n" not in line.text and len(line.text) < QUOTE_CHARS + 400


def test_repeats_let_one_line_per_key_and_interval_through_and_count_the_rest() -> None:
    rep = Repeats(interval_s=5.0, max_keys=2)
    admitted = [rep.admit("a", T0 + i * 0.1) for i in range(100)]  # 10 s at 10 lines/s
    assert admitted.count(None) == 98 and [a for a in admitted if a is not None] == [0, 49]
    assert rep.admit("b", T0) == 0 and rep.admit("c", T0) == 0  # "a" forgotten beyond max_keys
    assert rep.admit("a", T0 + 10.05) == 0 and len(rep._seen) == 2
