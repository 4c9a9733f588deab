"""``streamgrpo analyse``: DuckDB over the event archive (``streamgrpo.analysis``).

- :mod:`.views`: joined views (a trajectory end to end, sample lineage, adapter versions) on top of the
  per-topic views of :mod:`streamgrpo.archive.duck`;
- :mod:`.reports` and :mod:`.plots`: canned reports (``--report NAME``) and their PNG plots;
- :mod:`.snapshot`: the topics as a temporary archive (``--live``) or into the archive (``replay sync``);
- :mod:`.docs`: every view's columns (docs/analysis.md); :mod:`.cli`: the command.
"""
