"""Evaluation: held-out accuracy of the agent as served, per adapter version (``streamgrpo eval``).

- ``core``: the statistics (Wilson / mean@k intervals, pass@k, paired differences); pure;
- ``judging``: correctness-only verdicts following the judge service's routing;
- ``runner``: run the real agent loop on a task set for one version, count what it got right;
- ``adapters``: which versions, with files verified against their AdapterPublished events;
- ``session``: settings + policy + tasks + publishing, shared by the CLI and the run's evaluator;
- ``cli``: ``streamgrpo eval``.
"""
