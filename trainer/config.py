"""TrainerConfig: every setting of the trainer process (section ``[trainer]``, env
``STREAMGRPO_TRAINER__<FIELD>``, CLI options). Validated at start; bad values fail with the field name.

Not covered: Kafka connection settings (``[kafka]``, :class:`streamgrpo.config.KafkaSettings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field, model_validator

from streamgrpo.config import StrictModel, shared
from streamgrpo.metrics import DEFAULT_PORTS

if TYPE_CHECKING:  # torch is imported lazily so `streamgrpo trainer --help` stays fast
    from streamgrpo.trainer.losses import LossConfig
    from streamgrpo.trainer.model import ModelSpec


class TrainerConfig(StrictModel):
    """Settings of one training run."""

    SHARED_FIELDS: ClassVar[tuple[str, ...]] = ("adapter_name", "max_staleness", "samples_per_step", "adapter_store",
                                                "model_cache", "canary_share")

    adapter_name: str = shared("adapter_name")
    canary_share: float = shared("canary_share")
    run_name: str = Field("default", min_length=1, description="Training run name; the consumer group is trainer.<adapter_name>.<run_name>.")
    sample_adapter_name: str | None = Field(None, min_length=1, description="Train on the samples of this adapter family (unset: adapter_name). `streamgrpo replay train` sets it to train a new lineage on another family's history.")
    base_model: str = Field("smollm2-135m-instruct", description="Base causal LM: the bundled alias 'smollm2-135m-instruct', a local directory or a HF hub id.")
    model_cache: Path = shared("model_cache")
    adapter_store: Path = shared("adapter_store")
    device: str = Field("auto", description="Torch device: auto (cuda if available, else cpu), cpu, cuda, cuda:1...")
    metrics_port: int = Field(DEFAULT_PORTS["trainer"], ge=0, le=65535, description="Port of the Prometheus /metrics and /status endpoint (0 = off; a port in use is logged and skipped).")
    load_in_4bit: bool = Field(False, description="QLoRA: load the base model in 4-bit NF4 via bitsandbytes (CUDA only).")
    lora_rank: int = Field(16, ge=1, le=1024, description="LoRA rank r.")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha (scaling = alpha / r).")
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    lora_target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1, description="Module names that get LoRA adapters.")
    loss: str = Field("grpo", description="Objective: grpo (token-level PPO-clip), gspo (sequence-level ratio) or "
                      "raft (maximum likelihood of the rollouts with a positive advantage: rejection-sampling "
                      "fine-tuning on the policy's own successes, e.g. as a warm start).")
    raft_coef: float = Field(0.0, ge=0.0, le=10.0, description="Weight of a RAFT term (see `loss`) added to every "
                             "grpo/gspo step; 0 = off.")
    raft_warmup_steps: int = Field(0, ge=0, le=1_000_000, description="A warm start from the log: the first this "
                                   "many optimizer steps use the raft objective, then `loss`; 0 = off.")
    demo_lr: float = Field(3e-4, gt=0.0, description="Learning rate of a warm-start step: a step whose samples are "
                           "mostly demonstrations (TrainingSample.demo_source; trained by likelihood) uses it "
                           "instead of `lr` (behaviour cloning takes a larger step than the policy gradient).")
    normalisation: str = Field("rollout_mean", description="Token aggregation inside a rollout: rollout_mean (mean over its tokens) or dr_grpo (sum / max_tokens). Rollouts are then averaged.")
    max_tokens: int = Field(512, ge=1, description="Dr.GRPO normalisation constant (tokens per rollout); used only with normalisation = dr_grpo.")
    eps_low: float = Field(0.2, ge=0.0, lt=1.0, description="Importance ratio clipped below at 1 - eps_low.")
    eps_high: float = Field(0.28, ge=0.0, description="Importance ratio clipped above at 1 + eps_high.")
    kl_coef: float = Field(0.0, ge=0.0, description="Weight of the KL penalty to the reference (base model with the adapter disabled); 0 disables it.")
    kl_estimator: str = Field("k3", description="KL estimator per token: k1, k2 or k3.")
    temperature: float = Field(1.0, gt=0.0, description="Temperature to recompute samples that record no sampling parameters (written before TrainingSample.sampling); every other sample is recomputed with its own recorded temperature.")
    lr: float = Field(1e-4, gt=0.0, description="Peak learning rate (AdamW); 1e-4 suits a rank-16 LoRA on a 135M model at 8 rollouts per step (LoRA takes ~10x the full fine-tuning rate).")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    lr_schedule: str = Field("constant", description="LR schedule after warmup: constant, linear or cosine.")
    warmup_steps: int = Field(0, ge=0, description="Linear warmup steps.")
    schedule_steps: int = Field(1000, ge=1, description="Length of the linear/cosine decay in optimizer steps.")
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0, description="Final LR as a fraction of lr for linear/cosine.")
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient norm clipping.")
    samples_per_step: int = shared("samples_per_step")
    micro_batch_tokens: int = Field(4096, ge=16, description="Token budget of one micro-batch (gradient accumulation splits a step into micro-batches): tokens of its prefix tree with share_prefix, else padded tokens.")
    precision: str = Field("auto", description="Compute precision: auto (bf16 on a bf16 GPU or a CPU with AMX, else fp32: the rollout policy's dtype rule), bf16 or fp32. LoRA weights and optimizer state are fp32 in every case.")
    share_prefix: bool = Field(True, description="Compute each prompt prefix shared by several rows of a micro-batch (system prompt, a group's question, a group's first-turn prompt) once, with gradients through it; same loss and gradient.")
    correction: str = Field("tis", description="Off-policy correction: tis (PPO ratio against the trainer's own recomputation, times a truncated importance weight min(pi/mu, tis_cap) for the sampler's numerics and staleness) or behaviour (ratio against the behaviour logprobs, no weight).")
    tis_cap: float = Field(2.0, gt=0.0, description="Truncation C of the importance weight min(exp(trainer logp - behaviour logp), C) (correction = tis).")
    max_seq_len: int = Field(2048, ge=8, description="Longest row (prompt + action); longer prompts are left-truncated, longer actions drop the sample.")
    max_staleness: int = shared("max_staleness")
    publish_every: int = Field(1, ge=1, description="Store + announce an adapter every this many optimizer steps (offsets are committed then).")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many optimizer steps in total (unset: run forever).")
    idle_exit_s: float | None = Field(None, gt=0.0, description="Stop after this many seconds without new samples (unset: wait forever).")
    poll_timeout_ms: int = Field(500, ge=1, description="How long one consumer poll waits for records.")
    seed: int = Field(0, description="Torch random seed.")

    @model_validator(mode="after")
    def _check_names(self) -> TrainerConfig:
        from streamgrpo.trainer.losses import LOSSES
        from streamgrpo.trainer.losses.correction import CORRECTIONS
        from streamgrpo.trainer.losses.kl import KL_ESTIMATORS
        from streamgrpo.trainer.losses.normalisation import TOKEN_NORMALISATIONS
        from streamgrpo.trainer.precision import PRECISIONS
        from streamgrpo.trainer.schedules import SCHEDULES

        for field, value, choices in (("loss", self.loss, LOSSES), ("normalisation", self.normalisation, TOKEN_NORMALISATIONS),
                                      ("kl_estimator", self.kl_estimator, KL_ESTIMATORS), ("lr_schedule", self.lr_schedule, SCHEDULES),
                                      ("precision", self.precision, PRECISIONS), ("correction", self.correction, CORRECTIONS)):
            if value not in choices:
                raise ValueError(f"{field} = {value!r} is not one of {sorted(choices)}")
        return self

    @property
    def group_id(self) -> str:
        return f"trainer.{self.adapter_name}.{self.run_name}"

    def objective_at(self, step: int) -> str:
        """The objective of optimizer step ``step`` (0-based): raft during the warm-up, then ``loss``."""
        return "raft" if step < self.raft_warmup_steps else self.loss

    @staticmethod
    def warm_start_step(demonstrations: int, samples: int) -> bool:
        """Whether a step of ``samples`` samples, ``demonstrations`` of them demonstrations, is a warm-start step
        (more than half demonstrations; recorded as the step's ``warm_start`` metric)."""
        return samples > 0 and demonstrations * 2 > samples

    def lr_scale(self, demonstrations: int, samples: int) -> float:
        """The factor on ``lr`` of a step: ``demo_lr`` for a :meth:`warm_start_step`, else ``lr``."""
        return self.demo_lr / self.lr if self.warm_start_step(demonstrations, samples) else 1.0

    def loss_config(self) -> LossConfig:
        from streamgrpo.trainer.losses import LossConfig

        return LossConfig(eps_low=self.eps_low, eps_high=self.eps_high, kl_coef=self.kl_coef,
                          kl_estimator=self.kl_estimator, correction=self.correction, tis_cap=self.tis_cap,
                          raft_coef=self.raft_coef)

    def model_spec(self) -> ModelSpec:
        from streamgrpo.trainer.model import ModelSpec

        return ModelSpec(base_model=self.base_model, cache_dir=self.model_cache, lora_rank=self.lora_rank,
                         lora_alpha=self.lora_alpha, lora_dropout=self.lora_dropout,
                         target_modules=tuple(self.lora_target_modules), load_in_4bit=self.load_in_4bit,
                         device=self.device, precision=self.precision)
