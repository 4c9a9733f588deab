"""Settings of the stream processors (section ``[streams]``; env ``STREAMGRPO_STREAMS__<FIELD>``).

One flat model so every field has a one-to-one environment variable. Kafka connection settings
live in :class:`streamgrpo.config.KafkaSettings` (section ``[kafka]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from streamgrpo.config import StrictModel, default_home, shared
from streamgrpo.lifecycle.stats import SUCCESS_THRESHOLD
from streamgrpo.metrics import DEFAULT_PORTS
from streamgrpo.topics import catalog

AGENT_NAMES = ("fanout", "window", "metrics", "ab", "archive")


class StreamsSettings(StrictModel):
    """Everything the Faust worker of ``streamgrpo streams`` needs besides the broker address."""

    SHARED_FIELDS: ClassVar[tuple[str, ...]] = ("adapter_name", "max_turns", "max_staleness", "samples_per_step",
                                                "canary_share", "home", "adapter_store", "liveness_s")

    # -- app ---------------------------------------------------------------------------------------
    app_id: str = Field("streamgrpo-streams", description="Faust app id = consumer group; the topic prefix is prepended.")
    processing_guarantee: Literal["at_least_once", "exactly_once"] = Field(
        "at_least_once",
        description="Faust processing guarantee. exactly_once uses Kafka transactions (Apache Kafka only: the "
        "embedded Tansu broker does not isolate aborted transactions; correctness never depends on it).",
    )
    home: Path = shared("home")
    data_dir: Path = Field(default_factory=lambda: default_home() / "streams",
                           description="Faust data directory (default <home>/streams).")
    web_enabled: bool = Field(False, description="Run Faust's web server (health, tables).")
    web_port: int = Field(6066, ge=1, le=65535, description="Port of Faust's web server when enabled.")
    standby_replicas: int = Field(0, ge=0, le=3, description="Faust table standby replicas.")
    commit_interval_s: float = Field(1.0, gt=0, le=60, description="How often Faust commits consumer offsets.")
    rebalance_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Consumer group rebalance timeout. The embedded Tansu broker waits this "
        "long on every group join, so keep it short there; raise it for slow agents on Apache Kafka.",
    )
    fetch_max_wait_ms: int = Field(
        100, ge=1, le=5000, description="Longest a consumer fetch waits for data. The embedded Tansu broker "
        "does not answer a waiting fetch early, so this bounds per-hop latency there; 500+ is fine on Apache Kafka.",
    )
    session_timeout_s: float | None = Field(
        None, gt=0, le=600, description="Consumer group session timeout of the Faust worker; unset: `[kafka] "
        "session_timeout_ms`, the one every other consumer uses (a SIGKILLed worker stays a group member this long, "
        "and the embedded Tansu broker holds every join for half of it).",
    )
    agents: list[str] = Field(
        list(AGENT_NAMES), description=f"Agents this worker runs (subset of {', '.join(AGENT_NAMES)})."
    )
    # -- fan-out and admission ---------------------------------------------------------------------
    adapter_name: str = shared("adapter_name")
    max_turns: int = shared("max_turns")
    temperature: float = Field(0.7, ge=0, le=5, description="Sampling temperature of rollouts (0.7: at 1.0 the untrained 135M planner writes incoherent tool inputs and solves a quarter as many tasks; bench/probe_signal.py).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling p of rollouts.")
    max_new_tokens: int = Field(64, ge=1, le=8192, description="Token budget of one planner action (actions average ~30 tokens; a degenerate reply stops here).")
    max_groups_in_flight: int = Field(
        4, ge=1, description=f"Admission bound: groups requested but not yet closed (seen on `{catalog.GROUPS}`). Size "
        "it to what the rollout workers run at once (workers x concurrency); queued groups only wait on an old "
        "version. `streamgrpo run` sets it from its workers."
    )
    max_staleness: int = shared("max_staleness")
    samples_per_step: int = shared("samples_per_step")
    admission_poll_s: float = Field(0.2, gt=0, le=60, description="How often a blocked fan-out re-checks admission.")
    # -- curriculum (streams/curriculum.py) ---------------------------------------------------------------
    curriculum: bool = Field(True, description="Dynamic sampling at the window: a task whose group had reward "
                             "variance is fanned out again ahead of new tasks; one whose group had none is parked "
                             "and retried later. Each such group's requests carry metadata curriculum/pass_rate.")
    curriculum_requeue_max: int = Field(4, ge=1, le=1000, description="Groups a task with signal gets in all. 8, "
                                        "with curriculum_park_retries 0, was measured on 2 seeds of a 30-minute "
                                        "run: more groups trained, no better held-out change (docs/learning.md).")
    curriculum_park_after: int = Field(48, ge=0, le=1_000_000, description="A task whose group had no signal is "
                                       "retried after this many other groups were admitted.")
    curriculum_park_retries: int = Field(1, ge=0, le=100, description="Retries of a task whose groups had no signal.")
    curriculum_cold_kind_groups: int = Field(4, ge=0, le=10_000, description="A task kind (metadata kind, else "
                                             "source) whose last this many groups all had no signal is cold: its "
                                             "tasks run as probe groups (curriculum_probe_group_size) until one has "
                                             "signal; 0 = off.")
    curriculum_probe_group_size: int = Field(2, ge=2, le=64, description="Rollouts of a cold kind's task (a probe "
                                             "group; metadata probe = the kind).")
    curriculum_all_cold_keeps_last: bool = Field(False, description="When every task kind is cold, the kind whose "
                                                 "group last had signal runs full groups (metadata all_cold = the "
                                                 "kind) instead of probes: a probe saves rollouts only for warm "
                                                 "kinds. Off: measured on two seeds, no gain (docs/learning.md).")
    # -- advantage window --------------------------------------------------------------------------
    estimator: str = Field("grpo", description="Advantage estimator: grpo, dr_grpo or rloo.")
    group_timeout_s: float = Field(
        300.0, gt=0, description="A group still missing rewards this long after its first event is timed out."
    )
    partial_policy: Literal["score", "drop"] = Field(
        "score", description="Timed-out group: score with the usable rewards that arrived, or drop it."
    )
    min_group_size: int = Field(2, ge=1, description="Fewest usable rewards a timed-out group is scored with.")
    review_hold_s: float = Field(
        0.0, ge=0, le=86_400, description="Human review of training groups: keep EVERY complete group open this many "
        "seconds after its last reward so that an operator's `streamgrpo label` can replace judge rewards before "
        "advantages are computed (a label after the group closed changes nothing). Ends early once every usable "
        "reward is a person's; bounded, so an unlabelled group still trains on the judge's rewards. 0 (default): "
        "close at once. Under the hold, admission waits for held groups too: size max_groups_in_flight for it. "
        "(MCP clients give feedback only on calls `serve` answered them: served_review_hold_s holds those.)")
    served_review_hold_s: float = Field(
        300.0, ge=0, le=86_400, description="Human review of served calls: keep a complete group whose rollouts "
        "`streamgrpo serve` answered to a client (Task source mcp:<client>) open this many seconds, so that the "
        "client's MCP `feedback` (or `streamgrpo label`) replaces the judge's reward before the group closes. Ends "
        "early once every usable reward is a person's. Served calls are not admitted by the fan-out, so the hold "
        "does not slow training. 0: close at once. The longer of this and review_hold_s applies to served groups.")
    action_ttl_s: float = Field(
        3600.0, gt=0, description="Planner actions of a closed group not completed after this long are dropped."
    )
    tick_interval_s: float = Field(1.0, gt=0, le=60, description="How often open groups are scanned for timeouts.")
    # -- reward metrics ----------------------------------------------------------------------------
    metrics_window_s: float = Field(60.0, gt=0, description="Tumbling window of reward metrics, seconds.")
    success_threshold: float = Field(SUCCESS_THRESHOLD, description="A reward counts as a success when it is OK and "
                                     "score >= this.")
    metrics_port: int = Field(DEFAULT_PORTS["streams"], ge=0, le=65535, description="Port of the Prometheus /metrics and /status endpoint (0 = off; a port in use is logged and skipped).")
    # -- A/B controller ----------------------------------------------------------------------------
    canary_share: float = shared("canary_share")
    liveness_s: float = shared("liveness_s")
    ab_alpha: float = Field(
        0.05, gt=0, lt=1, description="Error rate of the A/B test: under equal arms the chance that it EVER promotes "
        "or rolls back (always-valid mSPRT on per-group success; measured by bench/bench_ab.py).")
    ab_mde: float = Field(0.1, gt=0, le=1, description="Minimum detectable effect: the difference in group success "
                          "share the sequential test is tuned to detect fastest (its mixing scale).")
    ab_min_groups: int = Field(4, ge=1, description="Groups each arm needs before the sequential test may decide "
                               "(guardrails act earlier).")
    ab_max_groups: int = Field(200, ge=1, description="Maximum duration of a test in canary-arm groups: then the "
                               "newest candidate is promoted if not worse than ab_max_loss, else a fresh test starts.")
    ab_max_duration_s: float = Field(
        1800.0, gt=0, description="Maximum duration of a test in seconds (whichever comes first with ab_max_groups). "
        "`streamgrpo run` sets 240: on a 2-core CPU a run serves ~2 groups a minute, too few for the test to decide "
        "on anything but a large difference, so within a run the line is handed over at this limit.")
    ab_max_loss: float = Field(0.05, ge=0, le=1, description="At the maximum duration, promote only if the estimated "
                               "difference (canary - primary success share) is at least -ab_max_loss.")
    ab_require_approval: bool = Field(
        False, description="Human in the loop: a promotion verdict waits for `streamgrpo adapters approve V` (status "
        "AWAITING_APPROVAL) instead of promoting. Rollbacks never wait.")
    ab_eval_gate: float | None = Field(
        None, ge=0, le=1, description="Held-out gate (needs the evaluator): promote only if the candidate's latest "
        "held-out accuracy is not below the primary's by more than this. Unset: off.")
    ab_guard_min_rollouts: int = Field(8, ge=1, description="Judged canary rollouts before the error and judge-failure "
                                       "guardrails may act.")
    ab_guard_min_actions: int = Field(32, ge=1, description="Canary planner actions before the parse-failure "
                                      "guardrail may act.")
    ab_guard_margin: float = Field(0.25, ge=0, le=1, description="A guardrail trips only when the canary's rate also "
                                   "exceeds the primary's by this much (a broken tool or judge is not the adapter).")
    ab_guard_error_rate: float = Field(0.5, gt=0, le=1, description="Guardrail: roll back when the canary's rollout "
                                       "ERROR rate reaches this.")
    ab_guard_judge_failure_rate: float = Field(0.5, gt=0, le=1, description="Guardrail: roll back when the share of "
                                               "the canary's rollouts the judge could not score reaches this.")
    ab_guard_parse_failure_rate: float = Field(0.8, gt=0, le=1, description="Guardrail: roll back when the canary's "
                                               "planner parse-failure rate reaches this.")
    adapter_store: Path = shared("adapter_store")
    adapter_check: bool = Field(
        True, description="The A/B controller checks the files of every version that may serve (the primary and the "
        "versions above it) in the adapter store, once, and rolls back a version whose files are outside the store, "
        "missing or do not hash to its announced sha256 (a forged or broken announcement would otherwise serve no "
        "group on any worker). Needs the adapter store readable by the streams workers (the k8s manifests mount it "
        "read-only); remote uris are left to the rollout workers.")
    adapter_verify_grace_s: float = Field(120.0, ge=0, le=3600, description="How long the A/B controller waits for an "
                                          "announced version's MISSING files before it rolls the version back (a "
                                          "shared file system may show them late); a sha256 mismatch or a path "
                                          "outside the store is rolled back at once.")
    registry_interval_s: float = Field(5.0, gt=0, le=600, description="How often the A/B agent publishes changed "
                                       f"AdapterStates on the compacted {catalog.ADAPTER_REGISTRY} topic.")
    # -- archive -----------------------------------------------------------------------------------
    archive_dir: Path = Field(default_factory=lambda: default_home() / "archive",
                              description="Parquet archive root (default <home>/archive).")
    archive_roll_records: int = Field(1000, ge=1, description="Roll a Parquet file after this many records.")
    archive_roll_s: float = Field(30.0, gt=0, description="Roll a Parquet file after this many seconds.")

    @model_validator(mode="before")
    @classmethod
    def _paths_under_home(cls, data: Any) -> Any:
        """Unset data and archive directories follow ``home``."""
        if isinstance(data, dict) and data.get("home") is not None:
            home = Path(data["home"])
            data = {"data_dir": home / "streams", "archive_dir": home / "archive", **data}
        return data

    @field_validator("agents", mode="before")
    @classmethod
    def _split_agents(cls, value: object) -> object:
        """Accept ``"fanout,window"`` (environment variables) as well as a list."""
        return [a.strip() for a in value.split(",") if a.strip()] if isinstance(value, str) else value

    @field_validator("agents")
    @classmethod
    def _known_agents(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(AGENT_NAMES))
        if unknown:
            raise ValueError(f"unknown agents {unknown}; choose from {', '.join(AGENT_NAMES)}")
        return value
