"""The trainer: GRPO/GSPO on a LoRA adapter, fed by ``training-samples``, publishing adapters.

Modules (functional core first, imperative shell last):
- ``losses/``: one module per loss (grpo, gspo) + KL estimators + per-rollout normalisation; pure.
- ``batching``: TrainingSample list -> padded, weighted tensors; admission (stale, malformed...); pure.
- ``schedules``: LR schedules (constant, linear, cosine).
- ``step``: one optimizer step (micro-batch accumulation, clipping) -> metrics; no Kafka, no disk.
- ``base_model``: resolve a base model name; converts the bundled SmolLM2 GGUF once (light import).
- ``model``: base model + LoRA / QLoRA (peft; bitsandbytes only on CUDA), ``tiny_model`` for tests.
- ``adapter_store``: immutable adapter versions on disk, sha256, verify (shared with rollout workers).
- ``lineage``: consumed offset ranges of each adapter.
- ``loop``: consume -> step -> store -> announce AdapterPublished -> commit offsets; resume.
- ``cli``: ``streamgrpo trainer``.  ``config``: TrainerConfig.  ``synthetic``: test samples.

Importing this package imports nothing heavy; torch is imported by the modules that need it.
"""
