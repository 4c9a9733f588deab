"""``streamgrpo rollout`` (a worker) and ``streamgrpo ask`` (one trajectory, printed).

Thin shells: settings come from :func:`streamgrpo.config.load` (defaults < TOML ``[rollout]`` <
env ``STREAMGRPO_ROLLOUT__<FIELD>`` < the options below); everything else is in
:mod:`.runtime`, :mod:`.loop` and :mod:`.worker`. Heavy imports happen inside the commands.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from streamgrpo.avro import records as R
    from streamgrpo.config import KafkaSettings
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.worker import WorkerStats

from streamgrpo.config import describe
from streamgrpo.topics import catalog


def _settings(ctx: click.Context, overrides: dict[str, Any]) -> RolloutConfig:
    from streamgrpo.config import load
    from streamgrpo.rollout.config import RolloutConfig

    path = (ctx.obj or {}).get("config_path")
    return load(RolloutConfig, "rollout", path=path, overrides=overrides)


def _tools_override(cfg: RolloutConfig, tools: str | None, corpus: str | None) -> RolloutConfig:
    updates: dict[str, Any] = {}
    if tools:
        updates["enabled"] = [t.strip() for t in tools.split(",") if t.strip()]
    if corpus:
        updates["knowledge"] = cfg.tools.knowledge.model_copy(update={"corpus_path": corpus})
    if updates:
        cfg.tools = cfg.tools.model_copy(update=updates)
    return cfg


def settings_help() -> str:
    """Every [rollout] setting with its env name, default and description."""
    from streamgrpo.rollout.config import RolloutConfig

    return "Settings ([rollout] section):\n" + describe(RolloutConfig, "rollout")


def _show_settings(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(settings_help())
        ctx.exit()


_MODES = click.Choice(["model", "model-free"])


@click.command("ask", epilog="Example:\n\n  streamgrpo ask \"Calculate 12 squared, and then find a major historical "
               "event in that year\"")
@click.argument("question")
@click.option("--roles", type=_MODES, default="model", show_default=True,
              help="'model': analysis, executor, verifier and synthesiser use the base model (adapter disabled); "
                   "'model-free': rule analysis, passthrough executor, rule verifier, passthrough synthesiser.")
@click.option("--model", default=None, help="Base model (alias, local dir). Default: smollm2-135m-instruct.")
@click.option("--device", default=None, help="Torch device, e.g. cpu or cuda.")
@click.option("--adapter-dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="A LoRA adapter directory to serve as planner@v1 (default: the base model, v0).")
@click.option("--max-turns", type=int, default=None, help="Turn budget (default 4).")
@click.option("--temperature", type=float, default=None, help="Planner temperature (default 0.7).")
@click.option("--max-new-tokens", type=int, default=None, help="Planner tokens per action (default 64).")
@click.option("--seed", type=int, default=None, help="Sampling seed.")
@click.option("--tools", default=None, help="Comma-separated tools (default: calculator,python,knowledge_search).")
@click.option("--corpus", type=click.Path(exists=True, dir_okay=False), default=None,
              help="JSONL/Parquet passages for knowledge_search (default: the built-in fact corpus).")
@click.option("--json", "as_json", is_flag=True, help="Print the events as JSON lines instead of readable steps.")
@click.pass_context
def ask(ctx: click.Context, question: str, roles: str, model: str | None, device: str | None,
        adapter_dir: str | None, max_turns: int | None, temperature: float | None, max_new_tokens: int | None,
        seed: int | None, tools: str | None, corpus: str | None, as_json: bool) -> None:
    """Run ONE agent trajectory on QUESTION in-process (local model, built-in corpus, no broker) and print
    each step: analysis, then per turn the planner's plan, the tool command, the observation and the
    verifier's verdict, then the final answer."""
    from pathlib import Path

    from streamgrpo.avro import records as R
    from streamgrpo.rollout.config import ASK_MODEL_MODES
    from streamgrpo.rollout.loop import effective_prefix, run_group
    from streamgrpo.rollout.runtime import build_context, build_policy

    overrides: dict[str, Any] = {"model": model, "device": device, "max_turns": max_turns, "temperature": temperature,
                                 "max_new_tokens": max_new_tokens, "seed": seed, "policy": "local"}
    if roles == "model":
        overrides.update(ASK_MODEL_MODES)
    cfg = _tools_override(_settings(ctx, overrides), tools, corpus)
    policy = build_policy(cfg)
    version = 0
    if adapter_dir:
        policy.load_adapter(cfg.adapter_name, 1, Path(adapter_dir))
        version = 1
    loop_ctx = build_context(cfg, policy)
    sampling = R.SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                                seed=cfg.seed)
    ids = {k: str(uuid.uuid4()) for k in ("task_id", "group_id", "rollout_id")}
    request = R.RolloutRequest(envelope=R.Envelope.new("ask", **ids), question=question, source="ask",
                               rollout_index=0, group_size=1, adapter_name=cfg.adapter_name, adapter_version=version,
                               max_turns=cfg.max_turns, sampling=sampling)
    printer = _JsonPrinter() if as_json else _StepPrinter(question, effective_prefix(loop_ctx))
    result = run_group([request], loop_ctx, printer, on_analysis=printer.analysis)
    if result.results and result.results[0].status is R.RolloutStatus.ERROR:
        sys.exit(1)



def _echo(text: str) -> None:
    """``click.echo`` of text that came from the model or a tool, with control characters escaped."""
    from streamgrpo.log import printable

    click.echo(printable(text))

class _StepPrinter:
    """Readable live trace of one trajectory. Model and tool text is printed through :func:`_echo`: terminal
    control sequences (ANSI/OSC escapes, CR, bidi overrides) are shown escaped, never interpreted."""

    def __init__(self, question: str, prefix: str = "") -> None:
        self.t0 = time.monotonic()
        self.prefix = prefix
        _echo(f"Question: {question}")

    def analysis(self, a: Any) -> None:
        _echo(f"Analysis [{a.mode}]: skills: {', '.join(a.skills) or '-'}; useful tools: "
                   f"{', '.join(a.tools) or '-'}")

    def __call__(self, event: R.Event) -> None:
        from streamgrpo.avro import records as R

        if isinstance(event, R.PlannerAction):
            _echo(f"\nTurn {event.envelope.turn}")
            _echo(f"  plan     [{event.parse_status.value}] {' '.join((self.prefix + event.action_text).split())[:300]}")
            _echo(f"           ({len(event.action_token_ids)} tokens, {event.latency_ms} ms, "
                       f"{event.adapter_name}@v{event.adapter_version})")
        elif isinstance(event, R.ToolObservation):
            _echo(f"  command  {event.tool} <- {event.command[:200]}   (executor: {event.executor_mode})")
            text = f"ERROR: {event.error}" if event.error else event.output
            _echo(f"  observe  {' '.join(text.split())[:300]}")
        elif isinstance(event, R.Verdict):
            _echo(f"  verdict  {event.decision.value}: {event.analysis[:200]}   (verifier: {event.verifier_mode})")
        elif isinstance(event, R.RolloutCompleted):
            where = f"error: {event.error}" if event.error else f"{event.turns} turns"
            _echo(f"\nFinal answer [{event.status.value}, {where}, {time.monotonic() - self.t0:.1f} s]:")
            _echo(f"  {event.final_answer or '(none)'}")


class _JsonPrinter:
    """Events as JSON lines (Avro dict form)."""

    def analysis(self, a: Any) -> None:
        click.echo(json.dumps({"analysis": {"skills": list(a.skills), "tools": list(a.tools), "mode": a.mode}}))

    def __call__(self, event: R.Event) -> None:
        click.echo(json.dumps({"type": type(event).__name__, "event": event.to_avro()}, default=str))


@click.command("rollout", epilog="\b\nExample:\n  streamgrpo rollout --bootstrap 127.0.0.1:9092 --concurrency 4\n\n"
               "All [rollout] settings (TOML, or env STREAMGRPO_ROLLOUT__<FIELD>): --show-settings.")
@click.option("--bootstrap", default=None, envvar="STREAMGRPO_BOOTSTRAP", help="Kafka bootstrap host:port.")
@click.option("--concurrency", type=int, default=None, help="Groups run at once (default 4; their planner calls share one decode batch).")
@click.option("--policy", type=click.Choice(["local", "vllm"]), default=None, help="Planner backend (default local).")
@click.option("--model", default=None, help="Base model (alias, local dir, or the vLLM served name).")
@click.option("--device", default=None, help="Torch device of the local policy.")
@click.option("--vllm-url", default=None, help="OpenAI-compatible base URL of vLLM.")
@click.option("--adapter-store", type=click.Path(file_okay=False), default=None,
              help="Adapter store root ([loop] adapter_store; adapters load only from inside it).")
@click.option("--keep-resident", type=int, default=None, help="Adapter versions kept loaded (K, default 4).")
@click.option("--no-follow", is_flag=True, default=False, help=f"Do not follow {catalog.ADAPTER_EVENTS} (serve the base model).")
@click.option("--roles", type=_MODES, default=None,
              help="'model-free' (default): rule/passthrough roles; 'model': role model for every role.")
@click.option("--max-rollouts", type=int, default=None, help="Exit after this many rollouts (benchmarks, tests).")
@click.option("--show-settings", is_flag=True, is_eager=True, expose_value=False, callback=_show_settings,
              help="Print every [rollout] setting (env name, default, description) and exit.")
@click.pass_context
def rollout(ctx: click.Context, bootstrap: str | None, concurrency: int | None, policy: str | None,
            model: str | None, device: str | None, vllm_url: str | None, adapter_store: str | None,
            keep_resident: int | None, no_follow: bool, roles: str | None, max_rollouts: int | None) -> None:
    """Run a rollout worker: consume rollout-requests (consumer group "rollout"), run each group's
    trajectories in lockstep, produce PlannerAction / ToolObservation / Verdict / RolloutCompleted
    events, then commit (at-least-once). Follows adapter-events and hot-swaps verified adapters."""
    from streamgrpo import metrics
    from streamgrpo.config import KafkaSettings, load
    from streamgrpo.rollout.config import ASK_MODEL_MODES

    overrides: dict[str, Any] = {"concurrency": concurrency, "policy": policy, "model": model, "device": device,
                                 "vllm_url": vllm_url, "adapter_store": adapter_store, "keep_resident": keep_resident}
    if no_follow:
        overrides["follow_adapters"] = False
    if roles == "model":
        overrides.update(ASK_MODEL_MODES)
    cfg = _settings(ctx, overrides)
    kafka = load(KafkaSettings, "kafka", path=(ctx.obj or {}).get("config_path"), overrides={"bootstrap": bootstrap})
    from streamgrpo.topics.broker_logs import watch as watch_broker

    watch_broker(kafka)  # bounded, rate-limited client logs while the broker is unreachable
    metrics.start("rollout", cfg.metrics_port)
    stats = asyncio.run(serve(cfg, kafka, max_rollouts=max_rollouts))
    click.echo(f"rollouts={stats.rollouts} groups={stats.groups} statuses={dict(stats.statuses)} "
               f"rate={stats.rate():.3f}/s")


async def serve(cfg: RolloutConfig, kafka: KafkaSettings, *, max_rollouts: int | None = None,
                stop: asyncio.Event | None = None) -> WorkerStats:
    """Build policy, tools, producer and follower; run the worker until stopped. Returns its stats."""
    from streamgrpo.rollout.adapters import AdapterFollower, follow
    from streamgrpo.rollout.runtime import build_context, build_policy, preflight_tools
    from streamgrpo.rollout.worker import RolloutWorker
    from streamgrpo.topics.producer import EventProducer

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests)
            pass
    preflight_tools(cfg)  # a host without bubblewrap is refused in a second, not after the model loaded
    policy = await asyncio.to_thread(build_policy, cfg)
    ctx = build_context(cfg, policy)
    follower = AdapterFollower(policy, adapter_name=cfg.adapter_name, store_root=cfg.adapter_store,
                               keep_last=cfg.keep_resident, canary_share=cfg.canary_share) \
        if cfg.follow_adapters else None
    producer = EventProducer(kafka, cfg.service)
    follow_task = asyncio.create_task(follow(follower, kafka, stop)) if follower else None
    try:
        worker = RolloutWorker(cfg, kafka, ctx, producer, follower)
        return await worker.run(stop, max_rollouts=max_rollouts)
    finally:
        stop.set()
        if follow_task is not None:
            await follow_task
        await asyncio.to_thread(producer.close)
