"""The success threshold has one home (:data:`streamgrpo.lifecycle.stats.SUCCESS_THRESHOLD`): no product module
spells the number as a ``success_threshold`` default or value (read from the syntax tree), every default IS the
constant, and the views a user reads -- the run's progress line and the ``adapters`` fallback figures -- count
successes at the configured ``[streams] success_threshold``, as the streams' metrics and the A/B test do."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import click
import tomllib

from streamgrpo.avro import records as R
from streamgrpo.cli import adapters as adapters_cli
from streamgrpo.cli.progress import Progress
from streamgrpo.cli.run import progress_for
from streamgrpo.lifecycle.stats import SUCCESS_THRESHOLD, Stats, VersionStats
from streamgrpo.streams.config import StreamsSettings

NAME = "success_threshold"
ROOT = Path(__file__).resolve().parents[3]


def product_files() -> Iterator[Path]:
    """Every module of the product packages (the folders of pyproject's package-dir; not tests/ or bench/)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for folder in sorted({d.split("/")[0] for d in config["tool"]["setuptools"]["package-dir"].values()}):
        yield from sorted((ROOT / folder).rglob("*.py"))


def reward(n: int, score: float) -> R.Reward:
    """An OK judge reward of planner v1."""
    envelope = R.Envelope.new("test", group_id="g1", rollout_id=f"r{n}")
    return R.Reward(envelope, score, R.RewardStatus.OK, R.JudgeInfo("correct", "h"), 4, "planner", 1, 1,
                    R.RolloutStatus.ANSWERED)


def literals(tree: ast.AST) -> list[int]:
    """Lines where ``success_threshold`` gets a number: a parameter default, an annotated or plain assignment, a
    keyword argument, or ``Field(<number>, ...)`` assigned to it."""

    def number(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Field" and node.args:
            node = node.args[0]  # Field(0.5, description=...)
        return isinstance(node, ast.Constant) and isinstance(node.value, int | float)

    found: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arguments):
            named = node.posonlyargs + node.args
            pairs = list(zip(named[len(named) - len(node.defaults):], node.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None]
            found += [d.lineno for a, d in pairs if a.arg == NAME and number(d)]
        elif isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            names = [t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else "" for t in targets]
            found += [node.lineno] if NAME in names and number(node.value) else []
        elif isinstance(node, ast.keyword) and node.arg == NAME and number(node.value):
            found.append(node.value.lineno)
    return sorted(found)


def test_no_product_module_spells_the_threshold() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}" for path in product_files()
             for line in literals(ast.parse(path.read_text(), str(path)))]
    assert not found, "a success threshold spelled as a number (import lifecycle.stats.SUCCESS_THRESHOLD):\n" + \
        "\n".join(found)


def test_the_scanner_finds_what_it_must() -> None:
    src = ("def f(a, success_threshold=0.5): ...\n"
           "def g(*, success_threshold: float = 0.7): ...\n"
           "class P:\n    success_threshold: float = 0.5\n"
           "class S:\n    success_threshold: float = Field(0.5, description='x')\n"
           "Stats(success_threshold=0.5)\n"
           "self.success_threshold = 1\n"
           "def ok(success_threshold=SUCCESS_THRESHOLD, other=0.5): ...\n"
           "Stats(success_threshold=max(0, x))\n")
    assert literals(ast.parse(src)) == [1, 2, 4, 6, 7, 8]


def test_every_default_is_the_one_constant() -> None:
    def default(fn: object) -> object:
        return inspect.signature(fn).parameters[NAME].default  # type: ignore[arg-type]

    defaults = {
        "[streams] success_threshold": StreamsSettings.model_fields[NAME].default,
        "Progress": Progress().success_threshold,
        "Stats": Stats().success_threshold,
        "VersionStats.add": default(VersionStats.add),
        "VersionStats.add_reward": default(VersionStats.add_reward),
        "adapters.view_from": default(adapters_cli.view_from),
        "adapters.load_view": default(adapters_cli.load_view),
        "adapters.Where": adapters_cli.Where.__dataclass_fields__[NAME].default,
    }
    assert {k: v for k, v in defaults.items() if v is not SUCCESS_THRESHOLD} == {}


def test_the_views_count_successes_at_the_configured_threshold(tmp_path: Path) -> None:
    toml = tmp_path / "loop.toml"
    toml.write_text("[streams]\nsuccess_threshold = 0.8\n")
    events = [reward(1, 0.6), reward(2, 0.9)]  # 0.6: a success at the default 0.5, not at 0.8

    progress = progress_for(toml)
    for event in events:
        progress.apply(event, t=0.0)
    ctx = click.Context(click.Command("adapters"), obj={"config_path": str(toml)})
    where = adapters_cli._context(ctx, "127.0.0.1:1", None, "planner")
    view = adapters_cli.view_from(lambda topic: iter(events if topic == "rewards" else []), "planner",
                                  where.canary_share, where.success_threshold)

    assert (progress.success_threshold, where.success_threshold) == (0.8, 0.8)
    assert progress.versions[1].successes == view.stats.of("planner", 1).successes == 1
    at_default = Progress()
    for event in events:
        at_default.apply(event, t=0.0)
    assert at_default.versions[1].successes == 2  # the same rewards at the default: the setting is what differs
