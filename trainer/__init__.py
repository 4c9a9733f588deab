"""The trainer: GRPO/GSPO on a LoRA adapter, fed by ``training-samples``, publishing adapters.

Modules (functional core first, imperative shell last):
- ``losses/``: one module per loss (grpo, gspo) + KL estimators + per-rollout normalisation; pure.
- ``batching``: TrainingSample list -> padded, weighted tensors; admission (stale, malformed...); pure.
- ``schedules``: LR schedules (constant, linear, cosine).
- ``step``: one optimizer step (micro-batch accumulation, clipping) -> metrics; no Kafka, no disk.
- ``model``: base model (from :mod:`streamgrpo.models.base`) + LoRA / QLoRA (peft; bitsandbytes only on CUDA).
- ``lineage``: consumed offset ranges of each adapter.
- ``loop``: consume -> step -> store (:mod:`streamgrpo.models.adapter_store`) -> announce AdapterPublished -> commit offsets; resume.
- ``cli``: ``streamgrpo trainer``.  ``config``: TrainerConfig.

Importing this package imports nothing heavy; torch is imported by the modules that need it.
"""
