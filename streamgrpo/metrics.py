"""Prometheus metrics of every streamgrpo service: names, labels and bounds in ONE place.

Every metric a service exports is a :class:`MetricSpec` in :data:`METRICS` (declared below with
:func:`_counter`, :func:`_gauge`, :func:`_histogram`). Names follow the Prometheus conventions:
the ``streamgrpo_`` prefix, base units (``_seconds``, ``_records``, ``_ratio``), ``_total`` on
counters, and bounded label sets. A label either has a closed set of values (anything else is
recorded as ``"other"``) or an open set capped at ``max_values`` distinct values (later values
are recorded as ``"other"``), so no label can grow without bound; no label carries an id or an
adapter version (the version is a gauge's *value*: ``streamgrpo_adapter_version{role="primary"}``).

A service turns metrics on with one call in its command-line shell, and instruments with one line
per event::

    m = metrics.start("rollout", cfg.metrics_port)          # HTTP /metrics and /status
    m.inc(metrics.ROLLOUTS, status=completed.status.value)  # anywhere in the service
    with m.timer(metrics.JUDGE_DURATION, judge=name): ...

Library code that runs inside any service (the topic consumer and producer) uses
:func:`current`, which is a no-op :class:`Metrics` until :func:`start` ran in that process.

The HTTP endpoint serves ``/metrics`` (the text exposition format) and ``/status`` (JSON: service,
version, pid, start time, the last ERROR log record and WARNING/ERROR counts), which
``streamgrpo status`` reads. A port that is already taken is logged at WARNING and the service
runs on without an endpoint (several workers on one machine); ``metrics_port = 0`` turns it off.

``prometheus_client`` is imported only when a :class:`Metrics` is enabled: importing this module
(the floor package, reachable from the producer SDK) pulls nothing in.

What is covered: the catalogue, label bounding, the endpoint, reading an endpoint back
(:func:`read_endpoint`). What is not: multiprocess aggregation (each process serves its own
registry; Prometheus sums over pods), authentication of the endpoint (it exposes counters and the
last error line, never secrets: services do not log secrets).
"""

from __future__ import annotations

import enum
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

log = logging.getLogger(__name__)

OTHER = "other"
PREFIX = "streamgrpo_"
SERVICES = ("streams", "judge", "rollout", "trainer")
#: Default metrics port of each service (``[<service>] metrics_port``); distinct so that a whole
#: loop on one machine (``streamgrpo run``) serves every endpoint.
DEFAULT_PORTS: dict[str, int] = {"streams": 9461, "judge": 9462, "rollout": 9463, "trainer": 9464}
#: Services that run beside the loop when configured (``[evaluator] enabled``); their endpoint is optional.
OPTIONAL_SERVICES: dict[str, int] = {"evaluator": 9465}
#: Label names that would carry ids or versions: never allowed (unbounded).
FORBIDDEN_LABELS = frozenset({"id", "event_id", "task_id", "group_id", "rollout_id", "version", "adapter_version",
                              "instance", "pod", "offset", "key", "message", "error"})


class Kind(str, enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class Label:
    """A label and its bound: a closed set of ``values``, or at most ``max_values`` distinct values."""

    name: str
    values: tuple[str, ...] = ()
    max_values: int = 0

    def bounded(self) -> int:
        """Most distinct values this label can take (``"other"`` included)."""
        return (len(self.values) if self.values else self.max_values) + 1


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its name, type, help, the services that export it and its labels."""

    name: str
    kind: Kind
    help: str
    services: tuple[str, ...]
    labels: tuple[Label, ...] = ()
    buckets: tuple[float, ...] = ()

    @property
    def label_names(self) -> tuple[str, ...]:
        return tuple(label.name for label in self.labels)

    def series_names(self) -> tuple[str, ...]:
        """Names of the exposed series (a histogram exposes _bucket, _sum and _count)."""
        if self.kind is Kind.HISTOGRAM:
            return tuple(f"{self.name}{s}" for s in ("_bucket", "_sum", "_count"))
        return (self.name,)


METRICS: list[MetricSpec] = []
_ALL = ("*",)  # exported by every service (library code: consumer, producer, logging)
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_RATIO = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def _def(name: str, kind: Kind, help: str, services: tuple[str, ...], *labels: Label,
         buckets: tuple[float, ...] = ()) -> MetricSpec:
    spec = MetricSpec(PREFIX + name, kind, help, services, tuple(labels), buckets)
    METRICS.append(spec)
    return spec


def _counter(name: str, help: str, services: tuple[str, ...], *labels: Label) -> MetricSpec:
    return _def(name, Kind.COUNTER, help, services, *labels)


def _gauge(name: str, help: str, services: tuple[str, ...], *labels: Label) -> MetricSpec:
    return _def(name, Kind.GAUGE, help, services, *labels)


def _histogram(name: str, help: str, services: tuple[str, ...], *labels: Label,
               buckets: tuple[float, ...] = _SECONDS) -> MetricSpec:
    return _def(name, Kind.HISTOGRAM, help, services, *labels, buckets=buckets)


TOPIC = Label("topic", max_values=24)  # catalog topics (14) + a few internal ones
GROUP = Label("group", max_values=10)  # consumer groups are configuration
PARTITION = Label("partition", max_values=64)
ARM = Label("arm", ("primary", "canary"))
ROLE = Label("role", ("published", "primary", "canary", "served", "trained", "evaluated"))

# -- every service (topics/ consumer + producer, logging) ------------------------------------------
SERVICE_INFO = _gauge("service_info", "Always 1; labels name the service and package version.", _ALL,
                      Label("service", SERVICES), Label("release", max_values=2))
EVENTS_PRODUCED = _counter("events_produced_total", "Events produced, by catalog topic.", _ALL, TOPIC)
EVENTS_CONSUMED = _counter("events_consumed_total", "Events consumed, by topic and consumer group.", _ALL,
                           TOPIC, GROUP)
CONSUMER_LAG = _gauge("consumer_lag_records", "Records behind the partition end, per group and partition "
                      "(from the consumer's own fetch position).", _ALL, GROUP, TOPIC, PARTITION)
DEAD_LETTERS = _counter("dead_letters_total", "Records sent to dead-letters, by source topic and reason code.",
                        _ALL, TOPIC, Label("reason", max_values=32))
LOG_RECORDS = _counter("log_records_total", "WARNING and ERROR log records.", _ALL,
                       Label("level", ("warning", "error", "critical")))
LAST_ERROR = _gauge("last_error_timestamp_seconds", "Unix time of the last ERROR log record (0: none).", _ALL)
HEARTBEAT = _gauge("heartbeat_timestamp_seconds", "Unix time of the main loop's last heartbeat.", _ALL)

# -- rollout workers -------------------------------------------------------------------------------
ROLLOUTS = _counter("rollouts_total", "Finished trajectories, by status.", ("rollout",),
                    Label("status", ("answered", "max_turns", "error")))
ROLLOUT_DURATION = _histogram("rollout_duration_seconds", "Wall time of one trajectory.", ("rollout",))
PLANNER_ACTIONS = _counter("planner_actions_total", "Planner actions, by parse status (failed = parse failure).",
                           ("rollout",), Label("parse_status", ("strict", "repaired", "failed")),
                           Label("engine", max_values=8))
PLANNER_TOKENS = _counter("planner_tokens_total", "Planner tokens generated.", ("rollout",),
                          Label("engine", max_values=8))
PLANNER_DURATION = _histogram("planner_action_duration_seconds", "Latency of one planner action.", ("rollout",))
TOOL_CALLS = _counter("tool_calls_total", "Tool calls, by tool and outcome.", ("rollout",),
                      Label("tool", max_values=32), Label("outcome", ("ok", "error")))
ADAPTER_LOADS = _counter("adapter_loads_total", "Adapter loads (sha256 verified before use), by outcome.",
                         ("rollout",), Label("outcome", ("ok", "checksum_mismatch", "error")))
ADAPTER_LOAD_DURATION = _histogram("adapter_load_duration_seconds", "Verify + load + hot-swap of one adapter.",
                                   ("rollout",))
ADAPTERS_RESIDENT = _gauge("adapters_resident", "Adapter versions loaded in this worker.", ("rollout",))

# -- judge -----------------------------------------------------------------------------------------
JUDGE_DURATION = _histogram("judge_duration_seconds", "Time to score one rollout, by judge.", ("judge",),
                            Label("judge", max_values=16))
JUDGE_REWARDS = _counter("judge_rewards_total", "Rewards emitted, by judge and status.", ("judge",),
                         Label("judge", max_values=16), Label("status", ("ok", "error")))
JUDGE_CACHE = _counter("judge_cache_requests_total", "Judge cache look-ups (hit rate = hit / all).", ("judge",),
                       Label("result", ("hit", "miss")))

# -- stream processors -----------------------------------------------------------------------------
GROUPS_REQUESTED = _counter("groups_requested_total", "Groups fanned out into rollout requests.", ("streams",))
GROUPS_OPEN = _gauge("groups_open", "Groups requested and not closed yet (in flight).", ("streams",))
GROUPS_CLOSED = _counter("groups_closed_total", "Closed groups, by status and whether they train.", ("streams",),
                         Label("status", ("complete", "timed_out")), Label("trains", ("true", "false")))
ADMISSION_BLOCKED = _gauge("admission_blocked", "1 while the fan-out waits for admission (staleness or "
                           "groups-in-flight bound), else 0.", ("streams",))
STALLED = _gauge("stalled", "1 while the fan-out has waited for admission with a task in hand for [loop] liveness_s "
                 "or longer (the liveness rule's admission stall, streamgrpo.lifecycle.liveness), else 0.",
                 ("streams",))
SAMPLES_EMITTED = _counter("training_samples_total", "TrainingSamples emitted.", ("streams",))
REWARD_SCORE = _histogram("reward_score", "Reward scores, by A/B arm of the version that served.", ("streams",),
                          ARM, buckets=_RATIO)
REWARD_MEAN = _gauge("reward_mean", "Mean reward of the last closed metrics window, by arm.", ("streams",), ARM)
REWARD_SUCCESS = _gauge("reward_success_ratio", "Success rate of the last closed metrics window, by arm.",
                        ("streams",), ARM)
ADAPTER_VERSION = _gauge("adapter_version", "Adapter version number in each role (published = newest "
                         "announced, served = newest this worker serves, trained = the trainer's).",
                         ("streams", "rollout", "trainer"), ROLE)
EVAL_ACCURACY = _gauge("eval_accuracy_ratio", "Held-out accuracy (EvaluationCompleted) of the version in a "
                       "role: evaluated = the newest evaluated version, primary = the current primary.",
                       ("streams",), Label("role", ("evaluated", "primary")), Label("bound", ("point", "ci_low",
                                                                                              "ci_high")))

# -- trainer ---------------------------------------------------------------------------------------
TRAINER_STEPS = _counter("trainer_steps_total", "Optimisation steps.", ("trainer",))
TRAINER_STEP_DURATION = _histogram("trainer_step_duration_seconds", "Wall time of one optimisation step.",
                                   ("trainer",))
TRAINER_TOKENS = _counter("trainer_tokens_total", "Tokens trained on.", ("trainer",))
TRAINER_LOSS = _gauge("trainer_loss", "Policy loss of the last step.", ("trainer",))
TRAINER_KL = _gauge("trainer_kl", "KL to the behaviour policy of the last step.", ("trainer",))
TRAINER_CLIP = _gauge("trainer_clip_ratio", "Fraction of tokens whose ratio was clipped in the last step.",
                      ("trainer",))
TRAINER_SAMPLES = _counter("trainer_samples_total", "Samples trained on.", ("trainer",))
TRAINER_DROPS = _counter("trainer_samples_dropped_total", "Samples not trained, by reason.", ("trainer",),
                         Label("reason", max_values=16))
SAMPLE_STALENESS = _histogram("trainer_sample_staleness_versions", "Trainer version minus the sample's "
                              "behaviour version.", ("trainer",), buckets=(0, 1, 2, 3, 4, 6, 8, 16))
SAMPLE_AGE = _histogram("trainer_sample_age_seconds", "Sample lag: event time of a sample to its training step.",
                        ("trainer",))
ADAPTER_PUBLISH_DURATION = _histogram("adapter_publish_duration_seconds", "Save + sha256 + AdapterPublished "
                                      "acknowledged, per adapter.", ("trainer",))


def spec_by_name() -> dict[str, MetricSpec]:
    return {s.name: s for s in METRICS}


def series_names() -> set[str]:
    """Every series name the services expose (histograms as _bucket/_sum/_count)."""
    return {n for s in METRICS for n in s.series_names()}


class Metrics:
    """The metrics of one process. Disabled (``enabled=False``, or no prometheus_client): every call is a no-op."""

    def __init__(self, service: str = "", *, enabled: bool = True) -> None:
        self.service = service
        self.started_at = time.time()
        self.last_error: dict[str, Any] | None = None
        self.identity: dict[str, str] = {}  # which loop this process belongs to (see loop_identity)
        self.port: int | None = None
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], set[str]] = {}
        self._server: WSGIServer | None = None
        self._handler: logging.Handler | None = None
        self._metrics: dict[str, Any] = {}
        self.registry: Any = None
        if not enabled:
            return
        try:
            import prometheus_client as pc
        except ModuleNotFoundError:
            log.warning("prometheus_client is not installed: metrics are off (pip install 'streamgrpo[ml]')")
            return
        self.registry = pc.CollectorRegistry()
        pc.ProcessCollector(registry=self.registry)  # process_start_time_seconds (restarts), cpu, memory
        make = {Kind.COUNTER: pc.Counter, Kind.GAUGE: pc.Gauge, Kind.HISTOGRAM: pc.Histogram}
        for s in METRICS:
            name = s.name.removesuffix("_total") if s.kind is Kind.COUNTER else s.name
            kwargs: dict[str, Any] = {"buckets": s.buckets} if s.kind is Kind.HISTOGRAM else {}
            self._metrics[s.name] = make[s.kind](name, s.help, s.label_names, registry=self.registry, **kwargs)
        if service:
            from streamgrpo import __version__

            self.set(SERVICE_INFO, 1, service=service, release=__version__)

    @property
    def enabled(self) -> bool:
        return self.registry is not None

    def _child(self, spec: MetricSpec, labels: Mapping[str, object]) -> Any:
        metric = self._metrics.get(spec.name)
        if metric is None:
            return None
        if set(labels) != set(spec.label_names):
            raise ValueError(f"{spec.name} takes labels {spec.label_names}, got {sorted(labels)}")
        return metric.labels(**{lb.name: self._bound(spec, lb, labels[lb.name]) for lb in spec.labels}) \
            if spec.labels else metric

    def _bound(self, spec: MetricSpec, label: Label, value: object) -> str:
        text = str(value.value if isinstance(value, enum.Enum) else value)
        if label.values:
            text = text.lower()
            return text if text in label.values else OTHER
        with self._lock:
            seen = self._seen.setdefault((spec.name, label.name), set())
            if text in seen:
                return text
            if len(seen) >= label.max_values:
                return OTHER
            seen.add(text)
            return text

    def inc(self, spec: MetricSpec, amount: float = 1.0, **labels: object) -> None:
        child = self._child(spec, labels)
        if child is not None:
            child.inc(amount)

    def set(self, spec: MetricSpec, value: float, **labels: object) -> None:
        child = self._child(spec, labels)
        if child is not None:
            child.set(value)

    def observe(self, spec: MetricSpec, value: float, **labels: object) -> None:
        child = self._child(spec, labels)
        if child is not None:
            child.observe(value)

    @contextmanager
    def timer(self, spec: MetricSpec, **labels: object) -> Iterator[None]:
        """Observe the wall time of the block (seconds) in histogram ``spec``, also when it raises."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.observe(spec, time.perf_counter() - start, **labels)

    def value(self, series: str, **labels: object) -> float | None:
        """Current value of one exposed series (e.g. ``streamgrpo_rollouts_total``), None if absent."""
        if self.registry is None:
            return None
        found = self.registry.get_sample_value(series, {k: str(v) for k, v in labels.items()})
        return None if found is None else float(found)

    def exposition(self) -> bytes:
        if self.registry is None:
            return b""
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))

    def status(self) -> dict[str, Any]:
        """The JSON served at ``/status``."""
        from streamgrpo import __version__

        return {"service": self.service, "version": __version__, "pid": os.getpid(), "started_at": self.started_at,
                "last_error": self.last_error, "metrics": self.enabled, "identity": self.identity}

    def note_log(self, record: logging.LogRecord) -> None:
        """Count a WARNING+ record; remember an ERROR+ one as the last error (first line, 500 chars)."""
        self.inc(LOG_RECORDS, level=record.levelname)
        if record.levelno >= logging.ERROR:
            message = record.getMessage().splitlines()[0][:500] if record.getMessage() else ""
            if record.exc_info and record.exc_info[1] is not None:
                message = f"{message} ({type(record.exc_info[1]).__name__})"
            self.last_error = {"time": record.created, "logger": record.name, "message": message}
            self.set(LAST_ERROR, record.created)

    def serve(self, port: int, host: str = "127.0.0.1") -> int | None:
        """Serve /metrics and /status on ``host:port`` in a daemon thread; the bound port, or None."""
        try:
            self._server = make_server(host, port, self._wsgi, _ThreadingServer, handler_class=_QuietHandler)
        except OSError as exc:
            log.warning("metrics endpoint %s:%d not started (%s): another process holds the port; set "
                        "[%s] metrics_port to a free port (0 = off)", host, port, exc, self.service or "<service>")
            return None
        self.port = int(self._server.server_port)
        threading.Thread(target=self._server.serve_forever, name="streamgrpo-metrics", daemon=True).start()
        log.info("metrics on http://%s:%d/metrics (status: /status)", host, self.port)
        return self.port

    def _wsgi(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST

            body, ctype = self.exposition(), CONTENT_TYPE_LATEST
        elif path == "/status":
            body, ctype = json.dumps(self.status()).encode(), "application/json"
        else:
            body, ctype = b"streamgrpo metrics: /metrics, /status\n", "text/plain"
        start_response("200 OK", [("Content-Type", ctype), ("Content-Length", str(len(body)))])
        return [body]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._handler is not None:
            logging.getLogger().removeHandler(self._handler)
            self._handler = None


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Scrapes every few seconds: not logged."""


class _LogHandler(logging.Handler):
    def __init__(self, metrics: Metrics) -> None:
        super().__init__(logging.WARNING)
        self.metrics = metrics

    def emit(self, record: logging.LogRecord) -> None:
        self.metrics.note_log(record)


_NOOP = Metrics(enabled=False)
_current: Metrics = _NOOP
_config_path: list[str | None] = [None]  # the --config of this process (set by the CLI, read by start())


def use_config(path: str | None) -> None:
    """The settings file this process runs with (the CLI calls it); :func:`start` reads its identity there."""
    _config_path[0] = path


def loop_identity(config_path: str | None) -> dict[str, str]:
    """Which loop a process belongs to, as its /status reports it: ``run_id`` ([loop] run_id, set by
    ``streamgrpo run``), ``topic_prefix`` and ``bootstrap`` ([kafka]). ``streamgrpo status`` compares it with
    the loop it reads; {} when the settings do not load (the service then fails on them itself)."""
    from streamgrpo.config import KafkaSettings, LoopSettings, load
    from streamgrpo.errors import ConfigError

    try:
        kafka = load(KafkaSettings, "kafka", path=config_path)
        loop = load(LoopSettings, "loop", path=config_path)
    except ConfigError:
        return {}
    return {"run_id": loop.run_id, "topic_prefix": kafka.topic_prefix, "bootstrap": kafka.bootstrap or ""}


def current() -> Metrics:
    """The process's metrics: the one :func:`start` returned, else a no-op."""
    return _current


def bind_address(config_path: str | None) -> str:
    """``[loop] metrics_bind`` of this process's settings (127.0.0.1 when they do not load)."""
    from streamgrpo.config import LoopSettings, load
    from streamgrpo.errors import ConfigError

    try:
        return load(LoopSettings, "loop", path=config_path).metrics_bind
    except ConfigError:
        return "127.0.0.1"


def start(service: str, port: int, *, host: str | None = None) -> Metrics:
    """Turn metrics on for this process: registry, WARNING/ERROR log counting, HTTP endpoint (port 0 = none) on
    ``host`` (default ``[loop] metrics_bind``, 127.0.0.1 unless set)."""
    global _current
    if service not in SERVICES and service not in OPTIONAL_SERVICES:
        raise ValueError(f"unknown service {service!r}; one of {(*SERVICES, *OPTIONAL_SERVICES)}")
    stop()
    m = Metrics(service)
    m.identity = loop_identity(_config_path[0])
    m._handler = _LogHandler(m)
    logging.getLogger().addHandler(m._handler)
    if port and m.enabled:
        m.serve(port, host or bind_address(_config_path[0]))
    _current = m
    return m


def stop() -> None:
    """Close the process's endpoint and go back to the no-op metrics (tests, service shutdown)."""
    global _current
    if _current is not _NOOP:
        _current.close()
    _current = _NOOP


# -- reading an endpoint back (streamgrpo status, tests) ------------------------------------------------

@dataclass
class Reading:
    """One scrape of a service endpoint: ``up`` False (with ``error``) when it did not answer."""

    target: str
    up: bool
    error: str = ""
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, **labels: str) -> float | None:
        """Value of series ``name`` with exactly ``labels`` (None if absent)."""
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        return [(dict(lbl), v) for (n, lbl), v in self.samples.items() if n == name]


_TARGET = re.compile(r"^(https?://)?[^/\s]+:\d+$")
#: The most a scrape reads of an endpoint's /metrics and /status bodies; more is an error, not memory.
MAX_METRICS_BYTES, MAX_STATUS_BYTES = 4 << 20, 256 << 10


def _read_bounded(url: str, timeout_s: float, limit: int) -> str:
    """The body at ``url``: at most ``limit`` bytes within ``timeout_s`` overall (a socket read waits at most
    ``timeout_s`` too), else ValueError -- an endless or trickling body cannot hold the reader or its memory."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    chunks, size = [], 0
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - http only
        while chunk := resp.read1(min(64 << 10, limit + 1 - size)):  # read1: one socket read, not a full buffer
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ValueError(f"{url} sent more than {limit} bytes")
            if time.monotonic() > deadline:
                raise ValueError(f"{url} did not finish its body within {timeout_s:g} s")
    return b"".join(chunks).decode()


def read_endpoint(target: str, timeout_s: float = 2.0) -> Reading:
    """Scrape ``host:port`` (/metrics and /status), each body bounded in size and time. Never raises for an
    unreachable, endless or malformed endpoint; one whose /status ``identity`` is not an object of strings is
    not up (its loop cannot be told), and a non-finite sample is dropped (:func:`parse_exposition`)."""
    import urllib.error

    if not _TARGET.match(target):
        return Reading(target, False, f"not host:port: {target!r}")
    base = target if target.startswith("http") else f"http://{target}"
    try:
        text = _read_bounded(f"{base}/metrics", timeout_s, MAX_METRICS_BYTES)
        status = json.loads(_read_bounded(f"{base}/status", timeout_s, MAX_STATUS_BYTES) or "{}")
        samples = parse_exposition(text)
    except (urllib.error.URLError, OSError, ValueError, RecursionError) as exc:
        return Reading(target, False, str(getattr(exc, "reason", exc))[:200])
    status = status if isinstance(status, dict) else {}
    identity = status.get("identity")
    if identity is not None and not (isinstance(identity, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in identity.items())):
        # which loop it belongs to cannot be told: not read (``status`` compares it, see loop_identity)
        got = "a non-string key or value" if isinstance(identity, dict) else f"a {type(identity).__name__}"
        return Reading(target, False, f"/status identity malformed (not an object of strings: {got})")
    return Reading(target, True, samples=samples, status=status)


def parse_exposition(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Text exposition format -> {(series name, sorted labels): value}. A NaN or +-Inf value is left out, as if
    the series were absent: no figure a streamgrpo service serves is non-finite, and readers count with them."""
    from prometheus_client.parser import text_string_to_metric_families

    samples = ((s.name, tuple(sorted(s.labels.items())), float(s.value))
               for fam in text_string_to_metric_families(text) for s in fam.samples)
    return {(name, labels): value for name, labels, value in samples if math.isfinite(value)}
