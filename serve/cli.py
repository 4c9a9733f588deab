"""``streamgrpo serve``: the agent as an MCP server (stdio by default, or streamable HTTP).

Start-up: the [rollout] settings (TOML, env) with the model-free roles; the broker is probed (``--bootstrap``
/ [kafka]); when it answers, every call is produced as events and the server follows ``adapter-events``
(hot-swapping verified adapters like a worker) to serve the PRIMARY version; when it does not (or with
``--no-broker``), the base model answers and one warning says that nothing is recorded. Logs go to stderr:
on stdio, stdout is the protocol.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import click

from streamgrpo.serve.bounds import ServeLimits

log = logging.getLogger(__name__)


def broker_reachable(kafka: Any, timeout_s: float = 3.0) -> bool:
    """True when the bootstrap broker answers a metadata request within ``timeout_s``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from streamgrpo.topics.clients import client_config

    try:
        AdminClient(client_config(kafka)).list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return True


def _start_follower(cfg: Any, kafka: Any, policy: Any) -> tuple[Any, threading.Event]:
    from streamgrpo.rollout.adapters import AdapterFollower, follow

    follower = AdapterFollower(policy, adapter_name=cfg.adapter_name, store_root=cfg.adapter_store,
                               keep_last=cfg.keep_resident, canary_share=cfg.canary_share)
    stop = threading.Event()
    threading.Thread(target=lambda: asyncio.run(follow(follower, kafka, stop)), name="adapter-follower",
                     daemon=True).start()
    return follower, stop


@click.command("serve", epilog="\b\nExamples:\n  streamgrpo serve                               # stdio (Claude Desktop, "
               "IDEs)\n  streamgrpo serve --transport http --port 8765  # http://127.0.0.1:8765/mcp")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio: the client starts this command; http: streamable HTTP at http://HOST:PORT/mcp.")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP bind address.")
@click.option("--port", type=int, default=8765, show_default=True, help="HTTP port.")
@click.option("--bootstrap", default=None, envvar="STREAMGRPO_BOOTSTRAP", help="Kafka bootstrap host:port.")
@click.option("--no-broker", is_flag=True, help="Do not record events (answer with the base model).")
@click.option("--model", default=None, help="Base model (alias, local dir). Default: smollm2-135m-instruct.")
@click.option("--max-turns", type=int, default=None, help="Turn budget of one solve (default [loop] max_turns).")
@click.option("--max-question-bytes", type=click.IntRange(1, 1_000_000), default=ServeLimits.max_question_bytes,
              show_default=True, help="Longest question (UTF-8 bytes) a solve accepts; a longer one is an error at "
              "once. A question whose prompt exceeds [rollout] max_prompt_tokens is cut to fit.")
@click.option("--version-wait-s", type=click.FloatRange(0, 3600), default=ServeLimits.version_wait_s,
              show_default=True, help="How long a solve pinned to a version waits for it to be published and loaded.")
@click.pass_context
def serve(ctx: click.Context, transport: str, host: str, port: int, bootstrap: str | None, no_broker: bool,
          model: str | None, max_turns: int | None, max_question_bytes: int, version_wait_s: float) -> None:
    """Serve the trained agent as an MCP server: tools solve(question), adapters(), feedback(rollout_id, score,
    feedback_token)."""
    from streamgrpo.config import KafkaSettings, load
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.runtime import build_context, build_policy
    from streamgrpo.serve.agent import ServeAgent
    from streamgrpo.serve.server import build_server

    path = (ctx.obj or {}).get("config_path")
    cfg = load(RolloutConfig, "rollout", path=path,
               overrides={"model": model, "max_turns": max_turns, "policy": "local", "service": "mcp"})
    kafka = load(KafkaSettings, "kafka", path=path, overrides={"bootstrap": bootstrap})
    recording = not no_broker and broker_reachable(kafka)
    policy = build_policy(cfg)
    producer, follower, stop = None, None, None
    if recording:
        from streamgrpo.topics.producer import EventProducer

        producer = EventProducer(kafka, "mcp")
        follower, stop = _start_follower(cfg, kafka, policy) if cfg.follow_adapters else (None, None)
        log.info("serving %s on %s; calls are recorded on %s", cfg.adapter_name, transport, kafka.bootstrap)
    else:
        cfg = cfg.model_copy(update={"adapter_wait_s": 0.0})
        log.warning("no broker at %s: calls are answered by the base model (v0) and NOT recorded as events",
                    kafka.bootstrap)
    agent = ServeAgent(cfg, build_context(cfg, policy), producer=producer, follower=follower,
                       kafka=kafka if recording else None, limits=ServeLimits(max_question_bytes, version_wait_s))
    server = build_server(agent)
    try:
        if transport == "http":
            server.run("streamable-http", host=host, port=port)
        else:
            server.run("stdio")
    finally:
        if stop is not None:
            stop.set()
        if producer is not None:
            producer.close()
