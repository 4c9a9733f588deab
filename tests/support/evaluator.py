"""The in-loop evaluator (``streamgrpo.evaluation.service.serve``) in a thread, on a tiny in-process Llama with real
peft adapters, for the integration tests of the evaluator.

:func:`adapter` writes a real peft adapter of the tiny model; :func:`announcement` is its ``AdapterPublished``;
:func:`session` an :class:`~streamgrpo.evaluation.session.EvalSession` on the tiny model and the given broker;
:func:`run_until` runs ``serve`` until a condition holds and returns what it raised.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings, LoopSettings
from streamgrpo.errors import StreamGRPOError
from streamgrpo.evaluation.service import EvaluatorSettings, serve
from streamgrpo.evaluation.session import EvalSession
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.models import adapter_store as store
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.runtime import build_context
from streamgrpo.rollout.tools.config import ToolsSettings
from streamgrpo.streams.config import StreamsSettings
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer


def adapter(out: Path) -> str:
    """A real peft adapter of the tiny model at ``out``; its store sha256."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    model = get_peft_model(build_tiny_model(), LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    model.save_pretrained(str(out))
    return store.sha256_dir(out)


def announcement(version: int, path: Path, sha: str) -> R.AdapterPublished:
    return R.AdapterPublished(envelope=R.Envelope.new("trainer"), adapter_name="planner", version=version,
                              uri=path.as_uri(), sha256=sha, base_model="in-process", trainer_step=version, lineage=[])


def session(kafka: KafkaSettings, adapter_store: Path) -> EvalSession:
    rollout = RolloutConfig(tools=ToolsSettings(enabled=["calculator"]))
    evs = EvalSession(rollout, LoopSettings(adapter_store=adapter_store, max_turns=1),
                      StreamsSettings(max_new_tokens=4), JudgeSettings(), kafka)
    evs._ctx = build_context(rollout, LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer()))
    return evs


def run_until(settings: EvaluatorSettings, evs: EvalSession, done: Callable[[], object],
              timeout_s: float = 240) -> list[Exception]:
    """``serve`` in a thread until ``done()`` (or the timeout); the exceptions it raised. Asserts that it was
    still running then (or raised) and that it stopped within 30 s of ``stop``."""
    stop, errors = threading.Event(), list[Exception]()

    def target() -> None:
        try:
            serve(settings, evs, stop)
        except (StreamGRPOError, OSError, RuntimeError, ValueError) as exc:  # reported by the test, not swallowed
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while thread.is_alive() and not done() and time.monotonic() < deadline:
        time.sleep(0.5)
    alive = thread.is_alive()
    stop.set()
    thread.join(30)
    assert alive or errors, "the evaluator returned by itself"
    assert not thread.is_alive(), "the evaluator did not stop within 30 s of its stop signal"
    return errors
