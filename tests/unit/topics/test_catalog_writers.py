"""The catalog's ``writers`` against the code: every module that constructs an event runs in a principal
declared as a writer of that event's topic, and every declared writer has such a module.

How: an AST scan of every package module for calls of an event class of ``streamgrpo.avro.records``
(``R.Reward(...)``, ``records.Reward(...)`` or an imported ``Reward(...)``). Which principal runs a module
is the one hand-written table here (:data:`RUN_BY`, longest path prefix wins); a module that constructs
an event and is in no entry fails the test, so new code must be placed. Constructions that are never
produced (a request run in-process) are listed in :data:`NOT_PRODUCED` with the reason, and an entry
that no longer matches a construction fails too.

What is not covered: which events a module actually sends (a constructed event is assumed sent), and
raw producers that copy bytes between topics (``replay restore``: an operator tool that needs a
principal with Write on every topic; see k8s/README.md).
"""

from __future__ import annotations

import ast
import inspect
from collections import defaultdict
from pathlib import Path

from streamgrpo.avro import records as R
from streamgrpo.topics.catalog import ADAPTER_EVENTS, PRINCIPALS, TOPICS, spec, topic_for

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("avro", "topics", "streams", "trainer", "rollout", "judge", "evaluation", "serve", "cli", "models",
            "lifecycle", "tasks", "archive", "analysis", "replay", "streamgrpo")
#: module path prefix -> the principals that run it (``k8s/gen_topics.py`` maps workloads to principals).
RUN_BY: dict[str, tuple[str, ...]] = {
    "streams/": ("streams",),
    "trainer/": ("trainer",),
    "rollout/": ("rollout",),
    "rollout/loop.py": ("rollout", "mcp"),  # `serve` runs the worker's loop in-process (serve/agent.py)
    "judge/": ("judge",),
    "serve/": ("mcp",),
    "evaluation/": ("evaluator", "operator"),  # the evaluator service and `streamgrpo eval`
    "cli/": ("operator",),
    "topics/sdk.py": ("operator", "mcp"),  # submit / label, and the MCP server's task + feedback
    "topics/dead_letter.py": ("streams", "judge", "rollout", "trainer"),  # the consumers (topics/consumer.py)
    "lifecycle/actions.py": ("operator",),  # `streamgrpo adapters promote|rollback|approve|reject`
    "lifecycle/adapter_state.py": ("streams",),  # the A/B controller publishes the registry fold
}
#: (module, event class) constructed but never produced, with the reason.
NOT_PRODUCED: dict[tuple[str, str], str] = {
    ("rollout/cli.py", "RolloutRequest"): "`ask` runs its one request in-process",
    ("serve/agent.py", "RolloutRequest"): "`serve` runs its one request in-process; only the Task is produced",
    ("evaluation/runner.py", "RolloutRequest"): "held-out evaluation runs its requests in-process",
}


def _event_classes() -> dict[str, str]:
    """Class name -> topic of every event class that belongs on a catalog topic."""
    out = {}
    for name, cls in inspect.getmembers(R, inspect.isclass):
        if issubclass(cls, R.Event) and cls is not R.Event:
            try:
                out[name] = topic_for(cls).name  # type: ignore[arg-type]
            except KeyError:
                continue
    return out


def _constructions(path: Path, events: dict[str, str]) -> set[str]:
    """Event class names called in ``path`` (through a records alias or a direct import)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases, direct = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "streamgrpo.avro":
            aliases |= {a.asname or a.name for a in node.names if a.name == "records"}
        elif isinstance(node, ast.ImportFrom) and node.module == "streamgrpo.avro.records":
            direct |= {a.asname or a.name for a in node.names if a.name in events}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == "streamgrpo.avro.records" and a.asname}
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in aliases and f.attr in events:
            found.add(f.attr)
        elif isinstance(f, ast.Name) and f.id in direct:
            found.add(f.id)
    return found


def _run_by(rel: str) -> tuple[str, ...] | None:
    best = max((p for p in RUN_BY if rel.startswith(p)), key=len, default=None)
    return None if best is None else RUN_BY[best]


def _scan() -> tuple[dict[str, set[str]], list[str], set[tuple[str, str]]]:
    """(topic -> principals that construct its events, unplaced modules, not-produced pairs seen)."""
    events = _event_classes()
    writers: dict[str, set[str]] = defaultdict(set)
    unplaced, excused = [], set()
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            built = _constructions(path, events)
            for name in sorted(built):
                if (rel, name) in NOT_PRODUCED:
                    excused.add((rel, name))
                    continue
                who = _run_by(rel)
                if who is None:
                    unplaced.append(f"{rel} constructs {name}")
                    continue
                writers[events[name]] |= set(who)
    return writers, unplaced, excused


def test_every_constructing_module_runs_in_a_declared_writer() -> None:
    seen, unplaced, excused = _scan()
    assert not unplaced, f"add these modules to RUN_BY (which principal runs them?): {unplaced}"
    assert excused == set(NOT_PRODUCED), f"stale NOT_PRODUCED entries: {set(NOT_PRODUCED) - excused}"
    for t in TOPICS:
        missing = seen.get(t.name, set()) - set(t.writers)
        assert not missing, f"{missing} construct events of {t.name} but are not in its catalog writers"


def test_every_declared_writer_constructs_events_of_its_topic() -> None:
    seen, _, _ = _scan()
    for t in TOPICS:
        extra = set(t.writers) - seen.get(t.name, set())
        assert not extra, f"{t.name}: writers {extra} are declared but no module they run constructs its events"


def test_the_scan_sees_the_known_writers() -> None:
    """The scan itself can fail: it must find the trainer's AdapterPublished and the A/B controller's events."""
    seen, _, _ = _scan()
    assert {"trainer", "streams", "operator"} <= seen[ADAPTER_EVENTS]
    assert seen["rollouts"] == {"rollout", "mcp"}


def test_adapter_events_are_closed_to_untrusted_principals() -> None:
    assert set(spec(ADAPTER_EVENTS).writers) == {"trainer", "streams", "operator"}
    assert all(t.writers and set(t.writers) <= set(PRINCIPALS) for t in TOPICS)


def test_an_unknown_writer_is_refused() -> None:
    import pytest

    from streamgrpo.topics.catalog import TopicSpec

    with pytest.raises(ValueError, match="unknown writer"):
        TopicSpec("x", 1, "adapter_name", (), writers=("rolout",))
