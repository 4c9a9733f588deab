"""Bounded logs while the broker is unreachable: the pure core (no clock, no I/O, no logging calls).

:class:`OutageLog` turns the client libraries' stream of connection errors (aiokafka logs one per retry of
every fetch, metadata refresh and heartbeat: 90-250 lines/s per service) into a few lines: the first error
of an outage is one WARNING that names the broker, the error and a hint; the errors after it are counted
and summarised at most once per ``interval_s`` (how many, since when, the last one); one INFO line says
when the broker answers again. An outage that starts within ``interval_s`` of the last line (a
flapping broker, or a client's late retry just after it came back) starts silently and is summarised at
the next tick (or not at all if it ends before), so the outages cost at most one WARNING and one INFO line
per ``interval_s``, whatever the error rate. :class:`Repeats` bounds every other repeated client-library line: one per key per
``interval_s``, the next one saying how many were suppressed.

The shell that feeds them (a logging filter and a reachability probe) is
:mod:`streamgrpo.topics.broker_logs`. What is not covered: deciding *that* the broker is down (the shell
classifies log lines) or *whether* it answers again (the shell probes it).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

#: How much of one client error a summary line quotes.
QUOTE_CHARS = 300


@dataclass(frozen=True)
class Line:
    """One line to log: a ``logging`` level and its text."""

    level: int
    text: str


def _quote(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= QUOTE_CHARS else one[:QUOTE_CHARS] + "..."


def _clock(epoch_s: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(epoch_s))


@dataclass
class OutageLog:
    """Outage state of one broker address; times are epoch seconds given by the caller."""

    broker: str
    interval_s: float = 30.0
    hint: str = "is it running, and is [kafka] bootstrap right?"
    since: float | None = None  # start of the current outage; None while the broker is reachable
    announced: bool = False  # a line of the current outage was logged
    suppressed: int = 0  # client errors since the last line
    total: int = 0  # client errors of the current outage
    last_error: str = ""
    last_line_at: float = float("-inf")  # the last line of any outage

    @property
    def down(self) -> bool:
        return self.since is not None

    def error(self, now: float, text: str) -> Line | None:
        """A connection error: starts an outage or is counted in the current one; returns the line to log, if
        any. An outage starting within ``interval_s`` of the last line starts silently (a flapping broker)."""
        if self.since is not None:
            return self.consequence(now, text)
        self.since, self.total, self.suppressed, self.last_error = now, 1, 1, _quote(text)
        self.announced = False
        if now - self.last_line_at < self.interval_s:
            return None
        self.announced, self.suppressed, self.last_line_at = True, 0, now
        return Line(logging.WARNING, f"Kafka broker {self.broker} unreachable: {self.last_error} -- {self.hint} "
                    f"Retrying with backoff; the service resumes when it answers (further client errors are "
                    f"summarised every {self.interval_s:g} s)")

    def consequence(self, now: float, text: str) -> Line | None:
        """Any client error while the broker is unreachable: counted; a summary once per ``interval_s``.
        Ignored (None) while it is reachable: the caller logs it as it is."""
        if self.since is None:
            return None
        self.suppressed += 1
        self.total += 1
        self.last_error = _quote(text)
        if now - self.last_line_at < self.interval_s:
            return None
        line = Line(logging.WARNING, f"Kafka broker {self.broker} unreachable since {_clock(self.since)} "
                    f"({now - self.since:.0f} s): {self.suppressed} client error(s) suppressed in the last "
                    f"{min(now - self.last_line_at, now - self.since):.0f} s; last: {self.last_error}")
        self.announced, self.suppressed, self.last_line_at = True, 0, now
        return line

    def reachable(self, now: float) -> Line | None:
        """The broker answered: ends the outage; one INFO line if the outage was logged."""
        if self.since is None:
            return None
        since, announced, total = self.since, self.announced, self.total
        self.since, self.announced, self.suppressed, self.total = None, False, 0, 0
        if not announced:
            return None
        self.last_line_at = now
        return Line(logging.INFO, f"Kafka broker {self.broker} reachable again after {now - since:.0f} s "
                    f"unreachable (since {_clock(since)}; {total} client error(s) in all)")


@dataclass
class Repeats:
    """At most one line per key per ``interval_s``; keys beyond ``max_keys`` forget the oldest."""

    interval_s: float = 30.0
    max_keys: int = 256
    _seen: OrderedDict[Hashable, list[float]] = field(default_factory=OrderedDict)  # key -> [last line at, suppressed]

    def admit(self, key: Hashable, now: float) -> int | None:
        """None: suppress this line. Else log it, noting the returned count of lines suppressed since the last."""
        entry = self._seen.get(key)
        if entry is not None and now - entry[0] < self.interval_s:
            entry[1] += 1
            return None
        suppressed = int(entry[1]) if entry is not None else 0
        self._seen[key] = [now, 0]
        self._seen.move_to_end(key)
        while len(self._seen) > self.max_keys:
            self._seen.popitem(last=False)
        return suppressed
