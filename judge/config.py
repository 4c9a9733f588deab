"""Settings of the judge: which judge scores which task source, and each judge's knobs.

One :class:`JudgeSettings` object per process, built with ``streamgrpo.config.load(JudgeSettings,
"judge", ...)`` (defaults < TOML ``[judge]`` (sub-tables ``[judge.math]``, ``[judge.llm]``...) <
environment ``STREAMGRPO_JUDGE__<FIELD>`` for top-level fields < CLI).
What is not covered: per-task rubric overrides (the rubric is per judge and versioned by its hash).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr

from streamgrpo.config import StrictModel
from streamgrpo.metrics import DEFAULT_PORTS


class MathSettings(StrictModel):
    """Numeric / symbolic equivalence of a final answer against the ground truth."""

    rel_tol: float = Field(default=1e-6, ge=0.0, le=0.1, description="Relative tolerance for numeric equality.")
    abs_tol: float = Field(default=1e-9, ge=0.0, le=1.0, description="Absolute tolerance (for answers near zero).")
    max_expr_chars: int = Field(default=160, ge=8, le=2000, description="Longer expressions are not parsed (size bound).")
    max_exponent: int = Field(default=400, ge=1, le=100000, description="Literal exponents above this are not evaluated.")
    percent_as_fraction: bool = Field(
        default=True, description="'50%' also matches 0.5 (it always matches 50)."
    )


class QASettings(StrictModel):
    """Open-domain QA match (SQuAD normalisation, exact match, token F1, containment)."""

    max_extra_tokens: int = Field(
        default=6, ge=0, le=100,
        description="Containment: a prediction that contains a golden answer's tokens contiguously is correct "
        "when it has at most this many extra tokens.",
    )
    hedge_words: list[str] = Field(
        default=["or", "either", "maybe", "perhaps", "possibly", "not"],
        description="Containment does not count when one of these words is among the extra tokens.",
    )
    partial_credit: bool = Field(default=True, description="Incorrect answers score their best token F1 instead of 0.")


class LLMSettings(StrictModel):
    """An OpenAI-compatible chat endpoint used by the `llm` and `group_relative` judges."""

    base_url: str = Field(default="http://127.0.0.1:8000/v1", description="Base URL of the OpenAI-compatible API.")
    api_key: SecretStr = Field(default=SecretStr("EMPTY"), description="API key (never logged).")
    model: str = Field(default="judge", description="Model name sent to the endpoint.")
    timeout_s: float = Field(default=30.0, gt=0, le=600, description="Per-request timeout.")
    max_retries: int = Field(default=2, ge=0, le=10, description="Retries after the first attempt (timeouts, 5xx, 429).")
    backoff_s: float = Field(default=0.5, ge=0, le=60, description="First retry delay; doubles each retry.")
    backoff_max_s: float = Field(default=8.0, ge=0, le=300, description="Cap on one retry delay.")
    temperature: float = Field(default=0.0, ge=0, le=2, description="Sampling temperature of the judge model.")
    max_tokens: int = Field(default=512, ge=16, le=8192, description="Completion token limit of one verdict.")
    json_mode: bool = Field(default=False, description="Send response_format=json_object (only if the server supports it).")
    fallback: Literal["auto", "math", "qa"] = Field(
        default="auto", description="Programmatic judge used when the endpoint fails; auto = math for numeric truths, else qa."
    )
    concurrency: int = Field(default=4, ge=1, le=256, description="Concurrent requests of one judge process.")


class HybridSettings(StrictModel):
    """Weighted sum of correctness, format and tool-use components."""

    correctness: Literal["auto", "math", "qa"] = Field(
        default="auto", description="Correctness judge: auto = math when a ground truth parses as math, else qa."
    )
    correctness_weight: float = Field(default=1.0, ge=0, le=10, description="Weight of the correctness component.")
    format_weight: float = Field(default=0.1, ge=0, le=10, description="Weight of the format component (0..1).")
    max_answer_chars: int = Field(default=1000, ge=1, le=100000, description="Longer answers fail the format check.")
    tool_budget: int = Field(default=4, ge=0, le=1000, description="Tool calls allowed before the penalty starts.")
    tool_penalty: float = Field(default=0.05, ge=0, le=10, description="Penalty per tool call beyond the budget.")
    tool_penalty_cap: float = Field(default=0.5, ge=0, le=10, description="Largest total tool penalty.")


class CacheSettings(StrictModel):
    """Score cache: in-memory LRU, optionally backed by sqlite."""

    enabled: bool = Field(default=True, description="Serve identical (question, answer, truths, judge, rubric) from cache.")
    max_entries: int = Field(default=100_000, ge=1, le=10_000_000, description="LRU capacity in memory.")
    sqlite_path: Path | None = Field(default=None, description="Optional on-disk cache file (shared across restarts).")


class JudgeSettings(StrictModel):
    """The judge service: routing of task sources to judges, the judges, the cache and the consumer."""

    routes: dict[str, str] = Field(
        default={"builtin": "correct", "deepmath": "math", "gsm8k": "math", "math": "math", "nq": "qa",
                 "hotpotqa": "qa"},
        description="Task source -> judge name (correct, math, qa, llm, group_relative, hybrid). 'correct' (the "
        "default for built-in tasks and unknown sources) pays correctness only: no credit that can be earned "
        "without the right answer (judge/scorers/correct.py).",
    )
    default_judge: str = Field(default="correct", description="Judge for sources not in `routes`.")
    math: MathSettings = Field(default_factory=lambda: MathSettings(), description="Math judge.")
    qa: QASettings = Field(default_factory=lambda: QASettings(), description="QA judge.")
    llm: LLMSettings = Field(default_factory=lambda: LLMSettings(), description="LLM endpoint of llm/group_relative.")
    hybrid: HybridSettings = Field(default_factory=lambda: HybridSettings(), description="Hybrid judge.")
    cache: CacheSettings = Field(default_factory=lambda: CacheSettings(), description="Score cache.")
    consumer_group: str = Field(default="judge", description="Consumer group of the rollouts consumer.")
    metrics_port: int = Field(DEFAULT_PORTS["judge"], ge=0, le=65535, description="Port of the Prometheus /metrics and /status endpoint (0 = off; a port in use is logged and skipped).")
    task_table_size: int = Field(default=200_000, ge=1, le=50_000_000, description="Tasks kept in memory (LRU).")
    task_wait_s: float = Field(
        default=10.0, ge=0, le=3600, description="How long a rollout whose task is unknown waits before it is rejected."
    )
    group_wait_s: float = Field(
        default=60.0, ge=0, le=3600,
        description="group_relative only: how long a group waits for all N rollouts before it is scored as is.",
    )
    batch_size: int = Field(default=200, ge=1, le=10_000, description="Records fetched per poll.")
    poll_timeout_ms: int = Field(default=200, ge=1, le=60_000, description="Poll timeout of one batch.")
