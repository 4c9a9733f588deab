"""Layered configuration: defaults < TOML file < environment < command line.

Every process builds ONE typed settings object from a pydantic model (``extra="forbid"``, a
description on every field, bounds with ``Field(ge=...)``, secrets as ``SecretStr``). This is the
only module that reads ``os.environ``.

Layers:
- TOML: the file named by ``--config`` or ``STREAMGRPO_CONFIG``; the model's section (e.g.
  ``[kafka]``, ``[trainer]``) is used.
- Environment: ``STREAMGRPO_<SECTION>__<FIELD>`` (e.g. ``STREAMGRPO_KAFKA__BOOTSTRAP``), plus the
  short aliases in :data:`ENV_ALIASES` (``STREAMGRPO_BOOTSTRAP``, ``STREAMGRPO_HOME``).
- Command line: keyword overrides whose value is not ``None``.

Strict: a TOML section that is not in :data:`SECTIONS`, and a ``STREAMGRPO_*`` environment variable
that is neither ``STREAMGRPO_<SECTION>__<FIELD>`` of a known section nor one of :data:`ENV_NAMES`,
are errors naming the valid ones (a misspelt variable is never silently ignored). Names starting with
``STREAMGRPO_TEST_`` belong to the test harness and are not settings.

Shared settings (:class:`LoopSettings`, section ``[loop]``) are what several services must agree on:
the adapter name, staleness, samples per step, turn budget, canary share, and the state paths. ONE
home variable, ``STREAMGRPO_HOME`` (= ``[loop] home``, default ``~/.streamgrpo``), places every
default path: the adapter store, the model cache, the embedded broker's state, Faust data, the archive.

What is not covered: hot reload. A process reads its settings once at start.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import tomllib
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from streamgrpo.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

ENV_PREFIX = "STREAMGRPO_"
#: Every settings section (TOML ``[section]``, env ``STREAMGRPO_<SECTION>__<FIELD>``). A new settings
#: model adds its section here.
SECTIONS: tuple[str, ...] = ("kafka", "broker", "loop", "rollout", "judge", "streams", "trainer", "evaluator",
                              "serve")
#: Short environment names kept for convenience: alias -> (section, field).
ENV_ALIASES: dict[str, tuple[str, str]] = {
    "STREAMGRPO_BOOTSTRAP": ("kafka", "bootstrap"),
    "STREAMGRPO_SCHEMA_REGISTRY": ("kafka", "schema_registry_url"),
    "STREAMGRPO_HOME": ("loop", "home"),
}
#: The liveness heartbeat file (:mod:`streamgrpo.heartbeat`); unset: no heartbeat.
HEARTBEAT_ENV = "STREAMGRPO_HEARTBEAT_FILE"
#: Set by ``streamgrpo run`` on the processes it supervises (:mod:`streamgrpo.supervisor`).
SUPERVISOR_PID_ENV = "STREAMGRPO_SUPERVISOR_PID"
#: Environment names read outside the sections (by the CLI, the liveness heartbeat and the supervisor).
ENV_NAMES: tuple[str, ...] = ("STREAMGRPO_CONFIG", "STREAMGRPO_LOG_LEVEL", HEARTBEAT_ENV, SUPERVISOR_PID_ENV,
                              *ENV_ALIASES)
#: Reserved for the test harness (e.g. ``STREAMGRPO_TEST_BOOTSTRAP``); never read as settings.
TEST_ENV_PREFIX = "STREAMGRPO_TEST_"


def heartbeat_file(environ: Mapping[str, str] | None = None) -> Path | None:
    """The liveness heartbeat file named by ``STREAMGRPO_HEARTBEAT_FILE`` (None when unset)."""
    value = (os.environ if environ is None else environ).get(HEARTBEAT_ENV)
    return Path(value) if value else None


def default_home() -> Path:
    """``~/.streamgrpo``: the home when neither ``STREAMGRPO_HOME`` nor ``[loop] home`` says otherwise."""
    return Path.home() / ".streamgrpo"


class StrictModel(BaseModel):
    """Base of every settings model: unknown keys are errors, values are validated on assignment.

    ``SHARED_FIELDS`` names fields whose value is a :class:`LoopSettings` setting: :func:`load` reads
    them from the ``[loop]`` section (env ``STREAMGRPO_LOOP__<FIELD>``) and refuses them in the
    model's own section, so services that must agree cannot be configured apart.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
    SHARED_FIELDS: ClassVar[tuple[str, ...]] = ()


class LoopSettings(StrictModel):
    """What several services must agree on: section ``[loop]``, env ``STREAMGRPO_LOOP__<FIELD>``.

    Each value is defined once, here; a service that needs one declares it with :func:`shared`
    and :func:`load` fills it from this section (never from the service's own section).
    """

    adapter_name: str = Field("planner", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                              description="Adapter (LoRA) family trained, published and served: one directory "
                              "name in the adapter store (letters, digits, '.', '_', '-'; no '/' or leading dot).")
    metrics_bind: str = Field("127.0.0.1", min_length=1, pattern=r"^[0-9A-Za-z.:\-\[\]]+$",
                              description="Address every service's metrics endpoint (/metrics, /status) binds to. "
                              "127.0.0.1 (default) keeps it on this machine; set 0.0.0.0 where Prometheus scrapes "
                              "from elsewhere (the k8s manifests do).")
    run_id: str = Field("", description="Id of the `streamgrpo run` these services belong to (the run writes it "
                        "into its TOML; empty elsewhere). Every service reports it on /status, so `streamgrpo "
                        "status` tells a process of another run from its own.")
    max_staleness: int = Field(
        1, ge=0, le=100_000,
        description="Adapter versions a trained sample may lag behind the trainer. The fan-out admits a group only "
        "while every sample it can produce will be trained within this many versions of the one that sampled it "
        "(the admission budget is (1 + max_staleness) * samples_per_step samples waiting or in flight), and the "
        "trainer drops (reason 'stale') anything further behind.",
    )
    samples_per_step: int = Field(8, ge=1, le=4096, description="TrainingSamples (rollouts) per optimizer step: "
                                  "the trainer reads this many, oldest behaviour version first (more when a "
                                  "sample it holds would otherwise wait until it is too stale); the fan-out's "
                                  "admission budget derives from it.")
    max_turns: int = Field(3, ge=1, le=32, description="Planner turn budget of a rollout, written into every "
                           "RolloutRequest (and used by `ask`); a worker honours each request's own budget. 3: "
                           "two tool calls and the answer turn cover every built-in task kind; the untrained "
                           "planner scores the same held-out accuracy as with 4 in two thirds of the time.")
    canary_share: float = Field(
        0.0, ge=0, le=1, description="Share of groups served by the canary: the newest published adapter version "
        "above the primary (the training line under A/B test against the primary, which serves the rest). A new "
        "version serves this share at once. 0 (default): no A/B test, every published adapter becomes primary at "
        "once, so every rollout trains the current line (with 0.5, the primary's half of the rollouts is served and "
        "judged for the test only: once it would be more than max_staleness versions behind the trainer it gives no "
        "samples, see docs/adapter_lifecycle.md; the production overlay turns the test on). The "
        "fan-out chooses versions with it, the A/B controller tests and decides, every follower of adapter-events "
        "derives the primary and canary with it.")
    liveness_s: float = Field(
        600.0, ge=10, le=86_400, description="Liveness bound, seconds: a run that admits no group for this long while "
        "tasks wait, or completes no rollout for this long while groups are in flight, has stalled "
        "(streamgrpo.lifecycle.liveness). The progress line, `streamgrpo status` and the streams worker's "
        "streamgrpo_stalled metric raise it; `streamgrpo run` then fails its report and exits 2. 600 (default) is "
        "longer than any pause a healthy default run makes on a 2-core CPU.")
    home: Path = Field(default_factory=default_home, description="State directory (env STREAMGRPO_HOME): the "
                       "default place of the adapter store, the model cache, the embedded broker's state, Faust "
                       "data and the event archive.")
    adapter_store: Path = Field(
        default_factory=lambda: default_home() / "adapters", description="Adapter store root (default "
        "<home>/adapters): the trainer writes <adapter_store>/<adapter_name>/v<version>/, rollout workers load "
        "adapters only from inside it.")
    model_cache: Path = Field(default_factory=lambda: default_home() / "models", description="Where the bundled "
                              "base model is converted once (default <home>/models); shared by trainer and workers.")

    @model_validator(mode="before")
    @classmethod
    def _paths_under_home(cls, data: Any) -> Any:
        """Unset store and cache paths follow ``home``."""
        if isinstance(data, dict) and data.get("home") is not None:
            home = Path(data["home"])
            data = {"adapter_store": home / "adapters", "model_cache": home / "models", **data}
        return data


    @field_validator("home", mode="before")
    @classmethod
    def _home_named(cls, value: Any) -> Any:
        """An empty home (``STREAMGRPO_HOME=``) is an error, not the current directory (``Path("")`` is ``.``)."""
        if isinstance(value, str) and not value.strip():
            raise ValueError(f"empty (STREAMGRPO_HOME= or [loop] home = \"\"): unset it for the default "
                             f"{default_home()} or name a directory")
        return value


def shared(name: str) -> Any:
    """A service-model field that mirrors ``LoopSettings.<name>`` (same type bounds, default and doc)."""
    info: FieldInfo = copy.copy(LoopSettings.model_fields[name])
    info.description = f"{info.description} Shared: set it in [loop] (STREAMGRPO_LOOP__{name.upper()})."
    return info


class KafkaSettings(StrictModel):
    """How to reach Kafka. Shared by every service."""

    bootstrap: str | None = Field(
        default=None,
        description="host:port list of the brokers. Unset: the embedded broker started by `streamgrpo broker up`.",
    )
    schema_registry_url: str | None = Field(
        default=None,
        description="Confluent Schema Registry URL. Set: events use the registry wire format; "
        "unset: Avro single-object encoding (schema fingerprint in every record).",
    )
    security_protocol: str = Field(default="PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.")
    sasl_mechanism: str | None = Field(default=None, description="SASL mechanism (PLAIN, SCRAM-SHA-512...).")
    sasl_username: str | None = Field(default=None, description="SASL user name.")
    sasl_password: SecretStr | None = Field(default=None, description="SASL password (never logged).")
    topic_prefix: str = Field(default="", description="Prefix added to every topic name (isolates runs sharing a cluster).")
    client_id: str = Field(default="streamgrpo", description="Kafka client.id prefix.")
    session_timeout_ms: int = Field(
        default=10_000, ge=1_000, le=300_000,
        description="Consumer-group session timeout. The embedded Tansu broker answers a group join only after "
        "half of it (10 s -> 5 s joins); tests use 3 s. Production Kafka: keep 10-45 s.",
    )
    outage_log_interval_s: float = Field(
        default=30.0, ge=1.0, le=3600.0,
        description="While the broker is unreachable, the services log its first error, then at most one summary "
        "line per this many seconds (errors suppressed, since when) and one line when it answers again; other "
        "repeated Kafka client lines: at most one per this many seconds each.",
    )


class BrokerSettings(StrictModel):
    """The embedded Tansu broker (development and tests only: memory storage, not durable)."""

    SHARED_FIELDS: ClassVar[tuple[str, ...]] = ("home",)

    home: Path = shared("home")
    port: int | None = Field(default=None, ge=1, le=65535, description="Port to listen on; unset picks a free port.")
    start_timeout_s: float = Field(default=30.0, gt=0, description="How long `broker up` waits for metadata answers.")


def _env_layer(section: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """``STREAMGRPO_JUDGE__LLM__API_KEY=x`` -> ``{"llm": {"api_key": "x"}}`` for section ``judge``."""
    out: dict[str, Any] = {}
    prefix = f"{ENV_PREFIX}{section.upper()}__"
    for key, value in environ.items():
        if key.startswith(prefix):
            node = out
            *parents, leaf = key[len(prefix):].lower().split("__")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
    for alias, (sec, fld) in ENV_ALIASES.items():
        if sec == section and alias in environ and fld not in out:
            out[fld] = environ[alias]
    return out


def _toml_file(path: Path | None) -> dict[str, Any]:
    """The whole TOML file (every top-level key a known section), or {} without a file."""
    if path is None:
        return {}
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass an existing TOML file to --config")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:  # a binary file
        raise ConfigError(f"config file {path} is not valid TOML: not UTF-8 text (byte {exc.start})") from exc
    except RecursionError as exc:  # tables or arrays nested thousands deep
        raise ConfigError(f"config file {path} is not valid TOML: nested too deep to read") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}") from exc
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"config file {path}: unknown section(s) {', '.join(f'[{u}]' for u in unknown)}; "
                          f"the sections are {', '.join(f'[{s}]' for s in SECTIONS)}")
    for section, value in data.items():
        if not isinstance(value, dict):
            raise ConfigError(f"config file {path}: [{section}] must be a table")
    return data


def check_environment(environ: Mapping[str, str]) -> None:
    """Raise :class:`ConfigError` for every ``STREAMGRPO_*`` variable that no setting reads (a misspelling)."""
    bad = []
    for key in environ:
        if not key.startswith(ENV_PREFIX) or key.startswith(TEST_ENV_PREFIX) or key in ENV_NAMES:
            continue
        section, sep, field = key[len(ENV_PREFIX):].partition("__")
        if not (sep and field and section.lower() in SECTIONS):
            bad.append(key)
    if bad:
        raise ConfigError(
            f"unknown environment variable(s) {', '.join(sorted(bad))}: settings are "
            f"{ENV_PREFIX}<SECTION>__<FIELD> with SECTION one of {', '.join(s.upper() for s in SECTIONS)} "
            f"(e.g. {ENV_PREFIX}TRAINER__LR), or one of {', '.join(ENV_NAMES)}. Fix or unset them.")


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load(
    model: type[M],
    section: str,
    *,
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> M:
    """Build ``model`` from defaults < TOML ``[section]`` < env < ``overrides`` (``None`` values skipped).

    Shared fields (``model.SHARED_FIELDS``) come from the validated ``[loop]`` section. Raises
    :class:`ConfigError` naming every bad setting and where it came from, and for unknown sections
    and ``STREAMGRPO_*`` variables (see the module docstring).
    """
    env = os.environ if environ is None else environ
    check_environment(env)
    file = path or env.get(f"{ENV_PREFIX}CONFIG")
    toml = _toml_file(Path(file) if file else None)
    merged = _deep_merge(toml.get(section, {}), _env_layer(section, env))
    shared_names = getattr(model, "SHARED_FIELDS", ())
    misplaced = sorted(set(merged) & set(shared_names))
    if misplaced:
        raise ConfigError(
            f"{', '.join(f'{section}.{n}' for n in misplaced)}: shared by several services; set it in the [loop] "
            f"section (env {ENV_PREFIX}LOOP__<FIELD>) so that every service reads the same value")
    if shared_names:
        loop = _validate(LoopSettings, "loop", _deep_merge(toml.get("loop", {}), _env_layer("loop", env)))
        merged = _deep_merge({k: getattr(loop, k) for k in shared_names}, merged)
    merged = _deep_merge(merged, {k: v for k, v in (overrides or {}).items() if v is not None})
    return _validate(model, section, merged)


def _validate(model: type[M], section: str, values: dict[str, Any]) -> M:
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{section}.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        if any(err["type"] == "extra_forbidden" and len(err["loc"]) == 1 for err in exc.errors()):
            problems += f"; the keys of [{section}] are {', '.join(model.model_fields)}"
        raise ConfigError(
            f"invalid settings ({problems}). Fix them in the TOML file, the "
            f"{ENV_PREFIX}{section.upper()}__<FIELD> environment variables or the command-line options."
        ) from exc


def describe(model: type[BaseModel], section: str) -> str:
    """Human-readable list of a model's settings with their env names, for --help epilogs and docs."""
    lines = []
    for name, info in model.model_fields.items():
        default = info.default if info.default is not None else "unset"
        lines.append(
            f"  {section}.{name} (env {ENV_PREFIX}{section.upper()}__{name.upper()}, default {default}): "
            f"{info.description}"
        )
    return "\n".join(lines)
