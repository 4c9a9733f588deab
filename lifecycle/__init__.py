"""Adapter versions as facts, and the rules every service applies to them (pure: no Kafka, no torch).

- ``pacing``: how far behind the trainer a sample may be and everything that follows from it -- the
  admission budget, the trainer's intake capacity, "versions behind", the drop rule (stale / rolled back)
  and the count of samples a version took off the trainer's queue. The fan-out, the trainer, the registry
  fold and the analysis views all call it; a test keeps that arithmetic out of every other module.
- ``published``: what an ``AdapterPublished`` says (drops by reason, samples dequeued, ``max_staleness``, the
  auto-promote decision): the typed fields of contract v4 first, the pre-v4 metric keys for older events; and
  whether those facts are in their domain (the fold refuses an announcement whose facts are not).
- ``stats``: what one adapter version did while serving (rewards, successes, rollouts, tool calls, groups),
  one definition that the registry, the A/B test, `run`'s progress line and report and the alarms all read,
  and ``Stats``, its fold over the log per (adapter name, version) with the A/B test's per-group outcomes.
- ``health``: the collapse alarms read from those statistics (answered rate up while reward falls, reward
  std collapsing, groups without variance).
- ``registry``: the ONE fold of ``adapter-events`` into every version's status (primary, canary, candidates,
  rolled back...), which every service reads; ``lineage_check``: whether an announcement follows its line
  (the fold refuses one that does not).
- ``actions``: the manual actions (promote, roll back, approve, reject) as the events that do them;
  ``writers``: who may write such an action (the A/B controller, the trainer, or an operator identity
  ``human:<name>``), which the registry fold checks; the trust boundary beyond it is Kafka ACLs (k8s).
- ``adapter_state``: the registry fold and the version statistics joined into one ``AdapterState`` per
  version.
- ``ab``: the A/B decision (guardrails, the mSPRT sequential test, maximum duration, approval and eval gates)
  as pure functions on per-group outcomes; ``streams/ab_controller.py`` is its Faust wiring.

Below streams, rollout and trainer; above topics and avro (``actions`` raises
:class:`~streamgrpo.models.errors.AdapterActionError`, the one import from ``models``). Nothing here imports a
heavy dependency.
"""
