"""Inference: the planner policy backends and the vLLM server the rollout worker starts.

- :mod:`.base`: the :class:`~.base.PlannerPolicy` interface (token ids + behaviour logprobs,
  versioned LoRA adapters, pinning) and the :class:`~.base.TextModel` protocol.
- :mod:`.local`: transformers + peft in this process (:class:`~.local.LocalPolicy`,
  :class:`~.local.LocalTextModel`), with two engines: :mod:`.engine` (the fast one: continuous
  batching over :mod:`.lean`, a lean Llama forward, and :mod:`.kvcache`, the static row KV cache
  and prefix store) and :mod:`.sampling` (the transformers-forward loop; also the shared sampling
  step and the logits-mask hook). :mod:`.numerics` picks the dtype (``auto``) and the engine label.
- :mod:`.vllm`: a vLLM server over HTTP (:class:`~.vllm.VLLMPolicy`).
- :mod:`.constraint`: the planner grammar handed to a policy (:class:`~.constraint.GrammarMask`) and the same
  grammar as vLLM's structured outputs apply it (an llguidance Lark grammar).
- :mod:`.openai_text`: any OpenAI-compatible chat endpoint as a :class:`~.base.TextModel`.
- :mod:`.residency`: which versions stay resident (keep-last-K, pins, protected primary).
- :mod:`.vllm_server`: starts and supervises a vLLM OpenAI server for :mod:`.vllm` from the settings it is
  given (``streamgrpo run`` launches it through the agent's ``python -m streamgrpo.rollout.vllm_serve``).

Importing this package imports nothing heavy; torch/transformers/httpx load with the backend module.
"""
