"""``streamgrpo serve``: the agent as an MCP server (stdio by default, or streamable HTTP).

Start-up never needs a broker. :func:`streamgrpo.serve.discovery.locate` says where to serve from: the run of
``--run ID``, a configured broker, else the latest live ``streamgrpo run`` of the home (as ``streamgrpo status``
finds it), else the broker of ``streamgrpo broker up``. With a broker that answers, every call is produced as events
and the server follows ``adapter-events`` (hot-swapping verified adapters from the run's adapter store like a
worker) to serve the PRIMARY version; it reads the topic to its end before it answers its first call, so the first
answer already comes from the primary. Without one (or with ``--no-broker``), ONE warning (stderr) says that nothing
is recorded and why, and the base model (v0) answers (a finished ``--run``: the primary its archive names).

Settings: ``[serve]`` (:class:`~streamgrpo.serve.config.ServeSettings`: host, port, the bearer token, the bounds), its
options override them; ``[rollout]`` and ``[loop]`` from ``--config``, else from the run's own settings file. Logs go
to stderr: on stdio, stdout is the protocol. The HTTP transport binds to 127.0.0.1 unless ``--host`` / ``[serve]
host`` says otherwise; ``[serve] auth_token`` (env ``STREAMGRPO_SERVE__AUTH_TOKEN``; never an option, never logged)
makes it refuse every request without ``Authorization: Bearer <token>``. Another address without a token is allowed
(a gateway may authenticate) and warned about. When recording, feedback tokens are signed with the home's key
(``<home>/serve/feedback.key``, made at the first start, mode 0600: :mod:`streamgrpo.serve.tokens`), so a restarted
``serve`` accepts the tokens it gave before.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
import time
from typing import Any

import click

from streamgrpo.serve.bounds import max_body_bytes

log = logging.getLogger(__name__)
#: How long start-up waits for the adapter follower to read ``adapter-events`` to its end (and load the primary).
CATCH_UP_S = 30.0


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _start_follower(cfg: Any, kafka: Any, policy: Any) -> tuple[Any, threading.Event]:
    """The adapter follower on its own thread, reading ``adapter-events`` from the beginning; returns once it has
    caught up (or after :data:`CATCH_UP_S`, with a warning)."""
    from streamgrpo.rollout.adapters import AdapterFollower
    from streamgrpo.topics import catalog
    from streamgrpo.topics.follow import LogFollower
    from streamgrpo.topics.received import Received

    follower = AdapterFollower(policy, adapter_name=cfg.adapter_name, store_root=cfg.adapter_store,
                               keep_last=cfg.keep_resident, canary_share=cfg.canary_share)
    stop = threading.Event()

    async def handle(batch: list[Received]) -> None:
        events = [r.event for r in batch if r.event is not None]
        if events:
            await asyncio.to_thread(follower.handle_batch, events)

    reader = LogFollower(kafka, [catalog.ADAPTER_EVENTS], handle)

    def follow() -> None:
        try:
            asyncio.run(reader.run(stop))
        except Exception as exc:  # noqa: BLE001 - logged; serving goes on with the versions read so far
            log.error("cannot follow %s (%s: %s): calls are answered by %s@v%d from now on", catalog.ADAPTER_EVENTS,
                      type(exc).__name__, exc, cfg.adapter_name, follower.primary(cfg.adapter_name))

    thread = threading.Thread(target=follow, name="adapter-follower", daemon=True)
    thread.start()
    deadline = time.monotonic() + CATCH_UP_S
    while not reader.wait_caught_up(0.2) and thread.is_alive():
        if time.monotonic() > deadline:
            log.warning("the adapter follower has not read %s to its end within %g s: calls are answered by "
                        "%s@v%d until it has", catalog.ADAPTER_EVENTS, CATCH_UP_S, cfg.adapter_name,
                        follower.primary(cfg.adapter_name))
            break
    return follower, stop


def _archived_follower(cfg: Any, policy: Any, archive: Any) -> Any:
    """A follower fed once with the ``adapter-events`` of a run's archive (a finished run: no broker)."""
    from streamgrpo.lifecycle.view import archive_events
    from streamgrpo.rollout.adapters import AdapterFollower
    from streamgrpo.topics import catalog

    follower = AdapterFollower(policy, adapter_name=cfg.adapter_name, store_root=cfg.adapter_store,
                               keep_last=cfg.keep_resident, canary_share=cfg.canary_share)
    follower.handle_batch(list(archive_events(archive)(catalog.ADAPTER_EVENTS)))
    return follower


@click.command("serve", epilog="\b\nExamples:\n  streamgrpo serve                               # stdio (Claude Desktop, "
               "IDEs)\n  streamgrpo serve --transport http --port 8765  # http://127.0.0.1:8765/mcp\n"
               "  STREAMGRPO_SERVE__AUTH_TOKEN=... streamgrpo serve --transport http --host 0.0.0.0")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio: the client starts this command; http: streamable HTTP at http://HOST:PORT/mcp.")
@click.option("--host", default=None, help="HTTP bind address ([serve] host, default 127.0.0.1: this machine only).")
@click.option("--port", type=int, default=None, help="HTTP port ([serve] port, default 8765).")
@click.option("--bootstrap", default=None, envvar="STREAMGRPO_BOOTSTRAP", help="Kafka bootstrap host:port.")
@click.option("--run", "run_id", default=None, metavar="ID",
              help="Serve this `streamgrpo run` (default: the configured Kafka, else the latest live run): its "
              "primary version from its adapter store; a finished run's from its archive, unrecorded.")
@click.option("--no-broker", is_flag=True, help="Do not record events (the base model answers; with --run, the "
              "primary its archive names).")
@click.option("--model", default=None, help="Base model (alias, local dir). Default: [rollout] model.")
@click.option("--max-turns", type=int, default=None, help="Turn budget of one solve (default [loop] max_turns).")
@click.option("--max-question-bytes", type=click.IntRange(1, 1_000_000), default=None,
              help="Longest question (UTF-8 bytes) a solve accepts ([serve] max_question_bytes, default 8192); a "
              "longer one is an error at once. A question whose prompt exceeds [rollout] max_prompt_tokens is cut.")
@click.option("--version-wait-s", type=click.FloatRange(0, 3600), default=None,
              help="How long a solve pinned to a version waits for it to be published and loaded ([serve] "
              "version_wait_s, default 5).")
@click.pass_context
def serve(ctx: click.Context, transport: str, host: str | None, port: int | None, bootstrap: str | None,
          run_id: str | None, no_broker: bool, model: str | None, max_turns: int | None,
          max_question_bytes: int | None, version_wait_s: float | None) -> None:
    """Serve the trained agent as an MCP server: tools solve(question), adapters(), feedback(rollout_id, score,
    feedback_token). Starts with or without a broker; see [serve] for the bearer token of the HTTP transport."""
    from streamgrpo.config import load
    from streamgrpo.redact import register_secrets_in
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.runtime import build_context, build_policy
    from streamgrpo.serve.agent import ServeAgent
    from streamgrpo.serve.config import ServeSettings
    from streamgrpo.serve.discovery import locate
    from streamgrpo.serve.server import build_server

    path = (ctx.obj or {}).get("config_path")
    settings = load(ServeSettings, "serve", path=path, overrides={
        "host": host, "port": port, "max_question_bytes": max_question_bytes, "version_wait_s": version_wait_s})
    register_secrets_in(settings)
    where = locate(path, run_id, bootstrap=bootstrap, no_broker=no_broker)
    overrides: dict[str, Any] = {"model": model, "max_turns": max_turns, "policy": "local", "service": "mcp"}
    if where.adapter_store is not None:
        overrides["adapter_store"] = where.adapter_store
    cfg = load(RolloutConfig, "rollout", path=where.config_path, overrides=overrides)
    policy = build_policy(cfg)
    producer, follower, stop, tokens = None, None, None, None
    if where.kafka is not None:
        from streamgrpo.config import BrokerSettings
        from streamgrpo.serve.tokens import FeedbackTokens, load_or_create_key
        from streamgrpo.topics.producer import EventProducer

        # feedback tokens signed with the home's key: a restarted serve accepts those it gave before
        home = load(BrokerSettings, "broker", path=path).home
        try:
            tokens = FeedbackTokens(load_or_create_key(home), where.kafka.topic_prefix)
        except OSError as exc:  # a home this process cannot write (a key others could read is a ConfigError)
            log.warning("cannot keep the feedback key in %s (%s): feedback tokens given now stop working when this "
                        "serve stops; set STREAMGRPO_HOME to a directory this user can write", home,
                        exc.strerror or exc)
            tokens = FeedbackTokens.ephemeral(where.kafka.topic_prefix)
        producer = EventProducer(where.kafka, "mcp")
        follower, stop = _start_follower(cfg, where.kafka, policy) if cfg.follow_adapters else (None, None)
    elif where.archive is not None and where.archive.is_dir():
        follower = _archived_follower(cfg, policy, where.archive)
    primary = follower.primary(cfg.adapter_name) if follower is not None else 0
    run = f" of run {where.run.run_id} (adapter store {cfg.adapter_store})" if where.run is not None else ""
    if where.kafka is not None:
        log.info("serving %s@v%d (the primary)%s on %s; calls are recorded on %s (topic prefix %r)", cfg.adapter_name,
                 primary, run, transport, where.kafka.bootstrap, where.kafka.topic_prefix)
    else:
        cfg = cfg.model_copy(update={"adapter_wait_s": 0.0})
        log.warning("%s: calls are answered by %s@v%d%s%s and NOT recorded as events (feedback is refused)",
                    where.why_not_recorded, cfg.adapter_name, primary, " (the base model)" if primary == 0 else "",
                    run)
    from streamgrpo.lifecycle.view import archive_events

    agent = ServeAgent(cfg, build_context(cfg, policy), producer=producer, follower=follower, kafka=where.kafka,
                       limits=settings.limits(), why_not_recorded=where.why_not_recorded, tokens=tokens,
                       events=archive_events(where.archive) if where.kafka is None and where.archive is not None
                       and where.archive.is_dir() else None)
    token = settings.auth_token if transport == "http" else None
    bracketed = f"[{settings.host}]" if ":" in settings.host and not settings.host.startswith("[") else settings.host
    server = build_server(agent, token, url=f"http://{bracketed}:{settings.port}")
    try:
        if transport == "http":
            if token is None and not _loopback(settings.host):
                log.warning("HTTP on %s without [serve] auth_token: anyone who reaches port %d can call solve and "
                            "feedback; set STREAMGRPO_SERVE__AUTH_TOKEN (or authenticate at a gateway)",
                            settings.host, settings.port)
            log.info("MCP over streamable HTTP at http://%s:%d/mcp (%s)", settings.host, settings.port,
                     "bearer token required" if token is not None else "no authentication")
            server.run("streamable-http", host=settings.host, port=settings.port,
                       max_request_body_size=max_body_bytes(settings.limits()))
        else:
            server.run("stdio")
    finally:
        if stop is not None:
            stop.set()
        if producer is not None:
            producer.close()
