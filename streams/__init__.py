"""Faust stream processors of streamgrpo.

``create_app(settings, kafka)`` (:mod:`.app`) builds the one Faust app; agents, each a thin wiring
around a pure core: :mod:`.fanout` (Task -> N RolloutRequests, admission), :mod:`.window` with
:mod:`.window_core` and :mod:`.samples` (rewards -> advantages -> GroupClosed + TrainingSamples),
:mod:`.metrics` (reward metrics per adapter version), :mod:`.ab_controller` around
:mod:`streamgrpo.lifecycle.ab` (the A/B test of the training line against the primary: verdicts on
``adapter-events``, every version's state on ``adapter-registry``), :mod:`.archive` (Parquet sink + DuckDB
queries). Estimators live in :mod:`.advantages`.
Run them with ``streamgrpo streams``; query the archive with ``streamgrpo analyse``.
"""
