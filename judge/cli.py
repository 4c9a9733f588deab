"""``streamgrpo judge``: run the judge service; ``streamgrpo judge score``: judge one answer offline.

Settings come from ``[judge]`` (and ``[kafka]``) of the TOML file, ``STREAMGRPO_JUDGE__<FIELD>``
environment variables, then these options.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from streamgrpo import metrics
from streamgrpo.config import KafkaSettings, load
from streamgrpo.errors import ConfigError

if TYPE_CHECKING:
    from streamgrpo.judge.config import JudgeSettings
    from streamgrpo.judge.service import JudgeStats

log = logging.getLogger(__name__)


def _routes(values: tuple[str, ...]) -> dict[str, str] | None:
    if not values:
        return None
    out = {}
    for v in values:
        source, sep, judge = v.partition("=")
        if not sep or not source or not judge:
            raise click.BadParameter(f"{v!r}: use SOURCE=JUDGE, e.g. --route nq=qa", param_hint="--route")
        out[source.strip()] = judge.strip()
    return out


def _settings(config_path: str | None, overrides: dict[str, Any], llm: dict[str, Any]) -> JudgeSettings:
    from streamgrpo.judge.config import JudgeSettings, LLMSettings
    from streamgrpo.redact import register_secrets_in

    settings = load(JudgeSettings, "judge", path=config_path, overrides=overrides)
    llm = {k: v for k, v in llm.items() if v is not None}
    if llm:
        try:
            settings.llm = LLMSettings.model_validate({**settings.llm.model_dump(), **llm})
        except ValueError as exc:
            raise ConfigError(f"invalid --llm-* option: {exc}") from exc
    register_secrets_in(settings)  # not the "EMPTY" placeholder default
    return settings


def _epilog() -> str:
    """Every setting: top-level ones with their env name, nested tables ([judge.llm]...) by TOML path."""
    from pydantic import BaseModel

    from streamgrpo.judge.config import JudgeSettings

    top, nested = [], []
    for name, info in JudgeSettings.model_fields.items():
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            nested += [f"  [judge.{name}] {n} (default {i.default}): {i.description}"
                       for n, i in sub.model_fields.items()]
        else:
            top.append(f"  judge.{name} (env STREAMGRPO_JUDGE__{name.upper()}, default {info.default}): "
                       f"{info.description}")
    return "\b\nSettings (TOML [judge] and its sub-tables; env for top-level fields):\n" + "\n".join(top + nested)


class _EpilogGroup(click.Group):
    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_paragraph()
        formatter.write_text(_epilog())


@click.group(cls=_EpilogGroup, invoke_without_command=True)
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers (default: [kafka] / the embedded broker).")
@click.option("--route", "routes", multiple=True, metavar="SOURCE=JUDGE",
              help="Judge for a task source (repeatable), e.g. --route nq=qa --route deepmath=math. "
              "Judges: math, qa, llm, group_relative, hybrid. Replaces the configured routes.")
@click.option("--default-judge", default=None, help="Judge for sources without a route.")
@click.option("--group", "consumer_group", default=None, help="Consumer group of the rollouts consumer.")
@click.option("--task-wait-s", type=float, default=None,
              help="How long a rollout with an unknown task waits before it is dead-lettered.")
@click.option("--cache-sqlite", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="On-disk score cache (sqlite) shared across restarts.")
@click.option("--llm-base-url", default=None, help="OpenAI-compatible endpoint for the llm/group_relative judges.")
@click.option("--llm-model", default=None, help="Model name for the llm/group_relative judges.")
@click.option("--llm-api-key", default=None,
              help="API key of the endpoint (never logged); prefer the environment: STREAMGRPO_JUDGE__LLM__API_KEY.")
@click.option("--max-idle-s", type=float, default=None,
              help="Exit after this many idle seconds (nothing polled, nothing pending). Default: run until Ctrl-C.")
@click.pass_context
def judge(ctx: click.Context, bootstrap: str | None, routes: tuple[str, ...], default_judge: str | None,
          consumer_group: str | None, task_wait_s: float | None, cache_sqlite: Path | None,
          llm_base_url: str | None, llm_model: str | None, llm_api_key: str | None,
          max_idle_s: float | None) -> None:
    """Run the judge service: score every RolloutCompleted on `rollouts` and publish one Reward per rollout
    on `rewards` (unknown task / missing ground truth / judge failure: an ERROR Reward plus a dead letter).

    \b
    Examples:
      streamgrpo judge
      streamgrpo judge --route nq=llm --llm-base-url http://vllm:8000/v1 --llm-model Qwen2.5-7B-Instruct
      streamgrpo judge score --judge math --answer '\\boxed{\\frac12}' --truth 0.5
    """
    if ctx.invoked_subcommand is not None:
        return
    config_path = (ctx.obj or {}).get("config_path")
    overrides: dict[str, Any] = {"routes": _routes(routes), "default_judge": default_judge,
                                 "consumer_group": consumer_group, "task_wait_s": task_wait_s}
    settings = _settings(config_path, overrides, {"base_url": llm_base_url, "model": llm_model,
                                                  "api_key": llm_api_key})
    if cache_sqlite is not None:
        settings.cache.sqlite_path = cache_sqlite
    kafka = load(KafkaSettings, "kafka", path=config_path, overrides={"bootstrap": bootstrap})
    from streamgrpo.topics.broker_logs import watch as watch_broker

    watch_broker(kafka)  # bounded, rate-limited client logs while the broker is unreachable
    metrics.start("judge", settings.metrics_port)
    stats = asyncio.run(_serve(kafka, settings, max_idle_s))
    click.echo(json.dumps({"rollouts": stats.rollouts, "rewards_ok": stats.rewards_ok,
                           "rewards_error": stats.rewards_error, "dead_letters": stats.dead_letters,
                           "cached": stats.cached, "duplicates": stats.duplicates}))


async def _serve(kafka: KafkaSettings, settings: JudgeSettings, max_idle_s: float | None) -> JudgeStats:
    from streamgrpo.judge.service import JudgeService

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - non-main thread / Windows
            pass
    service = JudgeService(kafka, settings)
    log.info("judge serving: routes=%s default=%s", settings.routes, settings.default_judge)
    try:
        return await service.run(max_idle_s=max_idle_s, stop=stop)
    finally:
        service.close()


@judge.command("score")
@click.option("--judge", "judge_name", default="correct", show_default=True,
              help="Judge: correct (the default reward: correctness only), math, qa, llm, group_relative, hybrid.")
@click.option("--question", default="", help="The question (read by the llm judges).")
@click.option("--answer", required=True, help="The answer to judge.")
@click.option("--truth", "truths", multiple=True, help="A ground truth (repeatable).")
@click.pass_context
def score(ctx: click.Context, judge_name: str, question: str, answer: str, truths: tuple[str, ...]) -> None:
    """Judge one answer offline and print the Score as JSON (no Kafka)."""
    from streamgrpo.judge.scorers import build_scorer
    from streamgrpo.judge.scorers.base import Candidate

    settings = _settings((ctx.obj or {}).get("config_path"), {}, {})
    result = build_scorer(judge_name, settings).score(Candidate(question, answer, tuple(truths)))
    click.echo(result.to_json())
