"""Layered configuration: defaults < TOML file < environment < command line.

Every process builds ONE typed settings object from a pydantic model (``extra="forbid"``, a
description on every field, bounds with ``Field(ge=...)``, secrets as ``SecretStr``). This is the
only module that reads ``os.environ``.

Layers:
- TOML: the file named by ``--config`` or ``STREAMGRPO_CONFIG``; the model's section (e.g.
  ``[kafka]``, ``[trainer]``) is used.
- Environment: ``STREAMGRPO_<SECTION>__<FIELD>`` (e.g. ``STREAMGRPO_KAFKA__BOOTSTRAP``), plus the
  short aliases in :data:`ENV_ALIASES` (``STREAMGRPO_BOOTSTRAP``).
- Command line: keyword overrides whose value is not ``None``.

What is not covered: hot reload. A process reads its settings once at start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import tomllib
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from streamgrpo.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

ENV_PREFIX = "STREAMGRPO_"
#: Short environment names kept for convenience: alias -> (section, field).
ENV_ALIASES: dict[str, tuple[str, str]] = {
    "STREAMGRPO_BOOTSTRAP": ("kafka", "bootstrap"),
    "STREAMGRPO_SCHEMA_REGISTRY": ("kafka", "schema_registry_url"),
}


class StrictModel(BaseModel):
    """Base of every settings model: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


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


class BrokerSettings(StrictModel):
    """The embedded Tansu broker (development and tests only: memory storage, not durable)."""

    home: Path = Field(
        default=Path.home() / ".streamgrpo",
        description="State directory: broker pid/port file, model cache, adapter store, reports.",
    )
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


def _toml_layer(section: str, path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass an existing TOML file to --config")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    value = data.get(section, {})
    if not isinstance(value, dict):
        raise ConfigError(f"config file {path}: [{section}] must be a table")
    return value


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

    Raises :class:`ConfigError` naming every bad setting and where it came from.
    """
    env = os.environ if environ is None else environ
    file = path or env.get(f"{ENV_PREFIX}CONFIG")
    merged = _deep_merge(_toml_layer(section, Path(file) if file else None), _env_layer(section, env))
    merged = _deep_merge(merged, {k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(
            f"{section}.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
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


def env_flag(name: str) -> str | None:
    """Read one raw environment variable (used by the test fixtures and the CLI for STREAMGRPO_* switches)."""
    return os.environ.get(name)
