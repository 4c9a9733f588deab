"""One reader of task rows for every command that takes tasks (``submit``, ``run``, ``eval``).

``source`` is a file (JSONL / CSV / Parquet, see :mod:`.datasets`) or a name of the built-in set:
``builtin`` (every task), ``builtin:train`` (the training split), ``builtin:train-wide`` (the training split
plus 320 extra arithmetic tasks with fresh numbers and more wordings, :mod:`.builtin_wide`; not in ``builtin``)
or ``builtin:heldout`` (the held-out split, never submitted for training by ``streamgrpo run``); see
:mod:`.builtin`.

Rows come as ``(row_number, TaskRow | RowError)`` with 1-based row numbers, so the caller decides
whether a bad row stops everything or is skipped and reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from streamgrpo.tasks.datasets import DatasetError, RowError, TaskRow

if TYPE_CHECKING:
    from streamgrpo.tasks.demos import DemoRow

BUILTIN_NAMES = ("builtin", "builtin:train", "builtin:train-wide", "builtin:heldout")


def read_rows(source: str, fmt: str | None = None, kind: str = "auto") -> Iterator[tuple[int, TaskRow | RowError]]:
    """Rows of ``source``; raises :class:`DatasetError` when it names no file and no built-in split."""
    if source.startswith("builtin"):
        from streamgrpo.tasks import builtin, builtin_wide

        splits = {"builtin": builtin.builtin_tasks, "builtin:train": builtin.train_tasks,
                  "builtin:train-wide": builtin_wide.train_wide_tasks, "builtin:heldout": builtin.heldout_tasks}
        if source not in splits:
            raise DatasetError(f"unknown built-in task set {source!r}; use one of {', '.join(BUILTIN_NAMES)}")
        return ((i + 1, row) for i, row in enumerate(splits[source]()))
    path = Path(source)
    if not path.exists():
        raise DatasetError(f"{source}: no such file (or use {', '.join(BUILTIN_NAMES)} for the built-in tasks)")
    from streamgrpo.tasks.datasets import iter_rows

    return iter_rows(path, fmt=fmt, kind=kind)


def read_demo_rows(source: str) -> Iterator[tuple[int, DemoRow | RowError]]:
    """Demonstrations of ``source``: a JSONL/JSON file (:func:`~streamgrpo.tasks.demos.iter_demos`), or
    ``builtin:train`` (the built-in expert's demonstrations of the training split); :class:`DatasetError` otherwise."""
    from streamgrpo.tasks.demos import expert_demos, iter_demos

    if source == "builtin:train":
        return ((i + 1, demo) for i, demo in enumerate(expert_demos()))
    if source.startswith("builtin"):
        raise DatasetError(f"demonstrations exist for builtin:train only (the held-out split is never demonstrated), "
                           f"not {source!r}")
    if not Path(source).exists():
        raise DatasetError(f"{source}: no such demonstration file (or use builtin:train for the built-in expert's)")
    return iter_demos(source)
