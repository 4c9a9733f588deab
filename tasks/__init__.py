"""Tasks: the built-in offline task set (with its train / held-out split) and task-file loaders.

- ``builtin``: the deterministic built-in tasks and their fact corpus (standard library only);
- ``builtin_wide``: ``builtin:train-wide``, the training split plus a wider arithmetic pool (fresh numbers,
  more wordings; standard library only);
- ``datasets``: JSONL / CSV / Parquet task files -> :class:`~streamgrpo.tasks.datasets.TaskRow`;
- ``reader``: :func:`~streamgrpo.tasks.reader.read_rows`, the ONE row reader used by ``submit``,
  ``run`` and ``eval`` (a file, or ``builtin`` / ``builtin:train`` / ``builtin:train-wide`` /
  ``builtin:heldout``);
- ``cli``: the ``submit`` and ``tasks export`` commands.

Part of the light producer SDK: no torch, no faust; ``datasets``/``pyarrow`` are imported lazily.
"""
