"""Adapter versions as facts, and the rules every service applies to them (pure: no Kafka, no torch).

- ``pacing``: how far behind the trainer a sample may be and everything that follows from it -- the
  admission budget, the trainer's intake capacity, "versions behind", the drop rule (stale / rolled back)
  and the count of samples a version took off the trainer's queue. The fan-out, the trainer, the registry
  fold and the analysis views all call it; a test keeps that arithmetic out of every other module.

Below streams, rollout and trainer; above topics and avro. Nothing here imports a heavy dependency.
"""
