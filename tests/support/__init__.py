"""Helpers of the test suite and the benchmarks (never imported by the product).

- :mod:`.streams`: synthetic groups of rollout events and a ``streamgrpo streams`` worker subprocess;
- :mod:`.samples`: synthetic TrainingSamples;
- :mod:`.tiny_policy`: a tiny in-process Llama + character tokenizer for the policy code paths;
- :mod:`.no_broker`: a service subprocess started without a broker, SIGTERMed, its exit timed.
- :mod:`.outage`: a service subprocess outliving a SIGKILLed broker, the old log given back to a new one;
- :mod:`.lineage`: the trainer's exactly-once check over the announced versions' lineages.

Benchmarks import them with ``tests/`` on ``sys.path`` (``bench/_paths.py``).
"""
