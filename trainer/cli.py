"""``streamgrpo trainer``: run the GRPO/GSPO trainer on ``training-samples``.

Every :class:`TrainerConfig` field is a ``--option`` (help text = the field's description), so
``--help`` is complete; settings layer defaults < TOML ``[trainer]`` < env < options. torch is
imported only when the command runs. Also runnable as ``python -m streamgrpo.trainer.cli``.
"""

from __future__ import annotations

import asyncio
import signal
import types
import typing
from pathlib import Path
from typing import Any

import click

from streamgrpo import metrics
from streamgrpo.config import KafkaSettings, load
from streamgrpo.trainer.config import TrainerConfig


def _click_type(annotation: Any) -> tuple[Any, bool]:
    """(click type, is_multiple) for a pydantic field annotation."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is list:
        return str, True
    return {int: int, float: float, str: str, Path: click.Path(path_type=Path)}.get(annotation, str), False


def _config_options(func: Any) -> Any:
    """Decorate ``func`` with one option per TrainerConfig field."""
    for name, info in reversed(list(TrainerConfig.model_fields.items())):
        if name in TrainerConfig.SHARED_FIELDS:
            continue  # shared with streams: only the [loop] section sets it
        flag = name.replace("_", "-")
        default = info.get_default(call_default_factory=True)
        help_text = f"{info.description} [default: {default}]"
        if info.annotation is bool:
            func = click.option(f"--{flag}/--no-{flag}", name, default=None, help=help_text)(func)
            continue
        click_type, multiple = _click_type(info.annotation)
        func = click.option(f"--{flag}", name, type=click_type, multiple=multiple, default=None,
                            help=help_text + (" (repeat the option for several)" if multiple else ""))(func)
    return func


@click.command("trainer", context_settings={"max_content_width": 110},
               epilog="Every option can also be set in the [trainer] table of the --config TOML file or as "
                      "STREAMGRPO_TRAINER__<OPTION> (e.g. STREAMGRPO_TRAINER__LR=1e-4). adapter_name, "
                      "samples_per_step, max_staleness, canary_share, adapter_store and model_cache are shared "
                      "with the other "
                      "services: set them in [loop] / STREAMGRPO_LOOP__<FIELD> (STREAMGRPO_HOME places the "
                      "default paths). Kafka settings come from [kafka] / STREAMGRPO_KAFKA__<FIELD>.")
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers (overrides [kafka] bootstrap).")
@click.option("--topic-prefix", default=None, help="Topic prefix (overrides [kafka] topic_prefix).")
@_config_options
@click.pass_context
def trainer(ctx: click.Context, bootstrap: str | None, topic_prefix: str | None, **options: Any) -> None:
    """Consume training-samples, run GRPO/GSPO steps on a LoRA adapter, store each new adapter
    version, announce it on adapter-events (AdapterPublished with sha256 and lineage), then commit
    the offsets it trained on.

    Restarting resumes from the newest stored adapter and optimizer state and the committed
    offsets; a killed trainer neither skips nor re-trains a sample. Stop with Ctrl-C / SIGTERM
    (the work since the last published adapter is redone by the next run).
    """
    config_path = (ctx.obj or {}).get("config_path")
    overrides = {k: (list(v) if isinstance(v, tuple) else v) for k, v in options.items()}
    overrides = {k: v for k, v in overrides.items() if v not in (None, [])}
    cfg = load(TrainerConfig, "trainer", path=config_path, overrides=overrides)
    kafka = load(KafkaSettings, "kafka", path=config_path,
                 overrides={"bootstrap": bootstrap, "topic_prefix": topic_prefix})
    from streamgrpo.topics.broker_logs import watch as watch_broker

    watch_broker(kafka)  # bounded, rate-limited client logs while the broker is unreachable
    metrics.start("trainer", cfg.metrics_port)
    published = asyncio.run(_run(cfg, kafka))
    click.echo(f"published {len(published)} adapter version(s)"
               + (f", latest v{published[-1].version}" if published else ""))


async def _run(cfg: TrainerConfig, kafka: KafkaSettings) -> list[Any]:
    from streamgrpo.trainer.loop import run_trainer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return await run_trainer(cfg, kafka, stop)


if __name__ == "__main__":  # pragma: no cover - `python -m streamgrpo.trainer.cli`
    from streamgrpo.log import setup_logging

    setup_logging("INFO")
    trainer()
