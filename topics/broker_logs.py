"""Bounded, rate-limited client logs while the broker is unreachable: the one place for both client libraries.

:func:`watch` (called by each service's CLI once logging is set up) puts one :class:`BrokerLogFilter` in
front of every handler of the root logger. It reads what the Kafka clients log at WARNING and above:
aiokafka (every group consumer and log follower, and Faust's consumers and producers), librdkafka (the
confluent-kafka producers and admin clients, through the ``librdkafka`` logger of
:mod:`~streamgrpo.topics.clients`), Faust/mode and asyncio:

- a connection error (:data:`CONNECTION`) starts or continues an outage of the configured broker
  (:class:`~streamgrpo.topics.outage.OutageLog`): the first one is logged as one WARNING with the broker
  address and a hint, the rest are counted and summarised at most once per ``[kafka]
  outage_log_interval_s`` ("unreachable since ..."), and every other aiokafka, librdkafka and Faust
  transport line of the outage is counted with them (they are its consequences);
- while an outage lasts, a probe thread asks the broker for metadata every few seconds; the first answer
  logs one INFO line ("reachable again after N s") and ends the outage;
- any other line repeated by those libraries is logged at most once per interval and key (logger and
  message, numbers masked), with the count suppressed since (:class:`~streamgrpo.topics.outage.Repeats`).

The clients themselves keep retrying with their own backoff (aiokafka retries fetches, metadata, heartbeats
and commits until the broker answers; librdkafka reconnects with exponential backoff): this module changes
what is logged, not what is retried. The lines it writes pass the handler's
:class:`~streamgrpo.log.RedactingFilter` after it (registered secrets masked); the SASL password is never
in them. What is not covered: records below WARNING (the CLI keeps these libraries at WARNING), lines
written to stderr without logging, and outages of brokers other than the bootstrap one (the probe asks the
cluster through the bootstrap servers).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

from streamgrpo.config import KafkaSettings
from streamgrpo.topics.errors import BrokerError
from streamgrpo.topics.outage import Line, OutageLog, Repeats

log = logging.getLogger(__name__)

#: Loggers of the Kafka clients (Faust's transport included: its "no fetch request for N s" errors per
#: partition): while the broker is unreachable, all they say is a consequence.
CLIENT_LOGGERS = ("aiokafka", "kafka", "librdkafka", "faust.transport")
#: The rest of Faust and mode, and asyncio (where a client task's unretrieved error surfaces): only their
#: connection errors count as the outage; their other lines (an agent's crash) are rate-limited, never counted.
OTHER_LOGGERS = ("faust", "mode", "asyncio")
#: What aiokafka, librdkafka and Faust log when a broker cannot be reached (case-insensitive search).
CONNECTION = re.compile(
    r"unable connect|unable to (request|update) metadata|connect call failed|connection refused|connection reset"
    r"|connection (was )?(closed|lost|aborted)|disconnected|broken pipe|nodenotready|node not ready|kafkaconnectionerror"
    r"|brokers? (are|is) down|transport failure|requesttimedout|request timed out|failed fetch (messages|offsets)"
    r"|group coordinator (request failed|not available)|coordinator.*dead|heartbeat (session expired|send request"
    r" failed|failed)|failed to resolve|name or service not known|no route to host|network is unreachable",
    re.IGNORECASE,
)
#: Lines that match :data:`CONNECTION` but report a group's state, not an unreachable broker: aiokafka's
#: "Heartbeat failed for group G because it is rebalancing" on every member during a normal rebalance, and its
#: "Heartbeat failed: local member_id was not recognized" after a member's session ran out.
NOT_AN_OUTAGE = re.compile(r"because it is rebalancing|member_id was not recognized", re.IGNORECASE)
#: Numbers (offsets, ids, milliseconds) do not make a repeated line new.
_DIGITS = re.compile(r"\d+")
#: Attribute holding the filter's verdict on a record it has seen.
_VERDICT = "_streamgrpo_broker_verdict"
#: The name under which the filter's own lines appear.
LOGGER_NAME = "streamgrpo.topics.broker"


def _library(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _rewrite(record: logging.LogRecord, line: Line) -> None:
    record.msg, record.args = line.text, ()
    record.levelno, record.levelname = line.level, logging.getLevelName(line.level)
    record.name = LOGGER_NAME
    record.exc_info, record.exc_text, record.stack_info = None, None, None


class BrokerLogFilter(logging.Filter):
    """Feeds client-library records to the pure :class:`OutageLog` / :class:`Repeats`; see the module docstring."""

    def __init__(self, outage: OutageLog, repeats: Repeats, *, on_outage: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.outage = outage
        self.repeats = repeats
        self.on_outage = on_outage
        self.clock = clock
        self.lock = threading.Lock()  # librdkafka's lines, the probe thread and the event loop

    def filter(self, record: logging.LogRecord) -> bool:
        seen = getattr(record, _VERDICT, None)  # one filter in front of several handlers: one verdict per record
        if seen is not None:
            return bool(seen)
        verdict = self._judge(record)
        setattr(record, _VERDICT, verdict)
        return verdict

    def _judge(self, record: logging.LogRecord) -> bool:
        client = _library(record.name, CLIENT_LOGGERS)
        if record.levelno < logging.WARNING or not (client or _library(record.name, OTHER_LOGGERS)):
            return True
        try:
            text = record.getMessage()
        except (TypeError, ValueError):  # a malformed record: the handler reports it, as without this filter
            return True
        with self.lock:
            now, was_down = self.clock(), self.outage.down
            if CONNECTION.search(text) and not NOT_AN_OUTAGE.search(text):
                line = self.outage.error(now, text)
            elif client and was_down:
                line = self.outage.consequence(now, text)
            else:
                return self._repeat(record, now)
            started = not was_down and self.outage.down
        if started:
            self.on_outage()
        if line is None:
            return False
        _rewrite(record, line)
        return True

    def _repeat(self, record: logging.LogRecord, now: float) -> bool:
        suppressed = self.repeats.admit((record.name, _DIGITS.sub("#", record.getMessage())[:200]), now)
        if suppressed is None:
            return False
        if suppressed:
            record.msg, record.args = f"{record.getMessage()} ({suppressed} similar line(s) suppressed)", ()
        return True

    def reachable(self) -> None:
        """The broker answered: log the recovery line (if the outage was logged) under :data:`LOGGER_NAME`."""
        with self.lock:
            line = self.outage.reachable(self.clock())
        if line is not None:
            logging.getLogger(LOGGER_NAME).log(line.level, line.text)


def answers(kafka: KafkaSettings, timeout_s: float = 2.0) -> bool:
    """True when the cluster answers a metadata request (with the service's own security settings; silent)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from streamgrpo.topics.clients import client_config

    cfg = client_config(kafka, log_level=0, **{"socket.timeout.ms": int(timeout_s * 1000)})
    try:
        AdminClient(cfg).list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return True


class Probe:
    """While an outage lasts, asks the broker every ``period_s`` whether it answers; ends the outage when it does.
    One daemon thread, started at the first outage, that only waits while the broker is reachable."""

    def __init__(self, filt: BrokerLogFilter, check: Callable[[], bool], period_s: float) -> None:
        self.filter = filt
        self.check = check
        self.period_s = period_s
        self.stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the probe thread unless it runs (called when an outage starts)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="broker-probe", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(self.period_s):
            if self.filter.outage.down and self.check():
                self.filter.reachable()


def _resolved(kafka: KafkaSettings) -> KafkaSettings:
    """``kafka`` with its bootstrap resolved now (the clients of this process resolved theirs at start)."""
    if kafka.bootstrap:
        return kafka
    from streamgrpo.topics.clients import bootstrap

    try:
        return kafka.model_copy(update={"bootstrap": bootstrap(kafka)})
    except BrokerError:
        return kafka


def watch(kafka: KafkaSettings, handlers: list[logging.Handler] | None = None) -> BrokerLogFilter:
    """Install the filter in front of ``handlers`` (default: the root logger's); replaces one installed before.
    Logging configuration: call from a CLI only."""
    kafka = _resolved(kafka)
    interval = kafka.outage_log_interval_s
    filt = BrokerLogFilter(OutageLog(kafka.bootstrap or "(embedded broker)", interval), Repeats(interval))
    if kafka.bootstrap:
        probe = Probe(filt, lambda: answers(kafka), period_s=min(5.0, interval))
        filt.on_outage = probe.start
    for handler in handlers if handlers is not None else logging.getLogger().handlers:
        handler.filters[:] = [f for f in handler.filters if not isinstance(f, BrokerLogFilter)]
        handler.filters.insert(0, filt)  # before the RedactingFilter: what it writes is redacted too
    return filt
