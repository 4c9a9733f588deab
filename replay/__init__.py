"""``streamgrpo replay``: restore archived events into a broker, retrain a new adapter lineage from a range.

- :mod:`.restore`: archive -> broker (keys, per-partition order, event ids and timestamps preserved);
- :mod:`.ranges`: ``--from`` / ``--to`` bounds (offsets, times, adapter versions' lineage) -> a range;
- :mod:`.sources`: the range's TrainingSamples (and the rollouts behind them) from a broker or the archive;
- :mod:`.rejudge`: re-score the range's groups with another judge (new Rewards and TrainingSamples);
- :mod:`.train`: train a fresh lineage on them, deterministically.
"""
