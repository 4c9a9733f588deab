"""The one command-line interface: ``streamgrpo <command>``.

Subcommands are imported lazily (only the one you run is imported), so ``streamgrpo --help`` is
instant and a producer-only install never imports torch. Each package owns its commands in its
own ``cli.py``; :data:`COMMANDS` maps command names to ``module:attribute`` of a click command.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from streamgrpo import __version__
from streamgrpo.errors import EXIT_MISCONFIGURED, ConfigError, StreamGRPOError
from streamgrpo.topics.catalog import REWARDS, ROLLOUTS, TRAINING_SAMPLES

#: command name -> (import path "module:attribute", one-line help shown by --help)
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("streamgrpo.topics.cli:broker", "Start, stop or inspect the embedded Kafka broker (Tansu)."),
    "topics": ("streamgrpo.topics.cli:topics", "Create/verify topics from the catalog, list them with counts."),
    "submit": ("streamgrpo.tasks.cli:submit", "Publish tasks from JSONL/CSV/Parquet files or the built-in set."),
    "tail": ("streamgrpo.topics.cli:tail", "Decode a topic's events and print them as JSON lines."),
    "tasks": ("streamgrpo.tasks.cli:tasks", "Export the built-in offline task set and fact corpus."),
    "rollout": ("streamgrpo.rollout.cli:rollout", "Run a rollout worker (agent trajectories -> events)."),
    "ask": ("streamgrpo.rollout.cli:ask", "Run one agent trajectory on a question and print its steps."),
    "judge": ("streamgrpo.judge.cli:judge", f"Run the judge service ({ROLLOUTS} -> {REWARDS})."),
    "streams": ("streamgrpo.streams.cli:streams", "Run the Faust stream processors (fan-out, advantages, samples...)."),
    "trainer": ("streamgrpo.trainer.cli:trainer", f"Run the GRPO/GSPO trainer on {TRAINING_SAMPLES}."),
    "run": ("streamgrpo.cli.run:run", "Run the whole loop locally: broker, streams, judge, rollout, trainer."),
    "eval": ("streamgrpo.evaluation.cli:eval_command",
             "Held-out accuracy of the base model and adapter versions (correctness only, with CIs)."),
    "evaluator": ("streamgrpo.evaluation.cli:evaluator_command",
                  "Run the evaluator service (held-out accuracy of each new adapter version)."),
    "analyse": ("streamgrpo.analysis.cli:analyse",
                "SQL, canned reports with plots and a shell over the event archive (DuckDB)."),
    "replay": ("streamgrpo.replay.cli:replay",
               "Restore archived events into a broker; retrain a new adapter lineage from a chosen range."),
    "status": ("streamgrpo.cli.status:status", "One screen: consumer lag, adapter versions, groups in flight, DLQ, services."),
    "adapters": ("streamgrpo.cli.adapters:adapters",
                 "List, inspect, promote, roll back, approve or reject adapter versions (lifecycle + A/B state)."),
    "label": ("streamgrpo.cli.label:label", "Give rollouts a human reward (provenance human:<name>), one or a file."),
    "serve": ("streamgrpo.serve.cli:serve", "Serve the trained agent as an MCP server (solve, adapters, feedback)."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        target, _ = COMMANDS[cmd_name]
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = exc.name or "?"
            if missing.split(".")[0] in {"torch", "transformers", "peft", "gguf", "openai", "sympy", "matplotlib"}:
                raise click.ClickException(
                    f"`streamgrpo {cmd_name}` needs {missing!r}: install it with "
                    "`pip install 'streamgrpo[ml]'` (or run `make setup` in a checkout)"
                ) from exc
            raise
        command: click.Command = getattr(module, attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, short) for name, (_, short) in COMMANDS.items()])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="streamgrpo")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None, envvar="STREAMGRPO_CONFIG",
              help="TOML settings file (sections [kafka], [broker], [rollout], [judge], [streams], [trainer]).")
@click.option("--log-level", default="INFO", show_default=True, envvar="STREAMGRPO_LOG_LEVEL",
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False), help="Log verbosity.")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, log_level: str) -> None:
    """streamgrpo: train the planner of a multi-agent LLM system with GRPO, as an event-sourced
    streaming system on Kafka.

    \b
    Quick start (embedded broker, built-in tasks):
      streamgrpo broker up
      streamgrpo topics ensure
      streamgrpo submit builtin --limit 20
      streamgrpo tail tasks --from-beginning --limit 5
      streamgrpo broker down

    Settings: defaults < TOML file (--config) < environment (STREAMGRPO_<SECTION>__<FIELD>,
    e.g. STREAMGRPO_KAFKA__BOOTSTRAP, or the short STREAMGRPO_BOOTSTRAP) < command-line options.
    """
    from streamgrpo.heartbeat import Heartbeat
    from streamgrpo.log import setup_logging

    setup_logging(log_level)
    from streamgrpo import metrics

    metrics.use_config(config_path)  # a service's /status reports the loop (run id, prefix) of these settings
    # first liveness beat before any slow start-up (model load): a service that hangs there goes stale too
    Heartbeat.configured().beat()
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path


def main(argv: list[str] | None = None) -> Any:
    from streamgrpo.redact import install_excepthook, redact
    from streamgrpo.supervisor import die_with_supervisor

    die_with_supervisor()
    install_excepthook()  # uncaught tracebacks are printed with registered secrets masked
    try:
        return cli.main(args=argv, prog_name="streamgrpo", standalone_mode=True)
    except StreamGRPOError as exc:
        click.echo(f"error: {redact(str(exc))}", err=True)
        sys.exit(EXIT_MISCONFIGURED if isinstance(exc, ConfigError) else 2)


if __name__ == "__main__":  # pragma: no cover
    main()
