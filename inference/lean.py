"""A lean forward pass of Llama-architecture models over a :class:`~.kvcache.RowCache`.

Why: transformers' generic forward spends most of a decode step in Python (mask building, cache
objects, hooks, ~40 module calls per layer); at batch 8 on a CPU that overhead was ~4/5 of the
step. This module runs the same arithmetic with ~15 tensor ops per layer:

- ``q/k/v`` fused into one product and ``gate/up`` into another, weights stored transposed
  ``(in, out)`` (the faster BLAS layout measured here); the transformers modules are re-pointed to
  views of the fused tensors, so the weights are held ONCE (``adopt_weights``); the output head
  keeps one oneDNN-packed copy of the (tied) embedding, and in bfloat16 every product is packed
  (:mod:`.packing`; a plain transposed copy where packing is unavailable);
- keys/values written in place into the static row cache, attention with
  ``scaled_dot_product_attention`` over ``k[:n, :, :L]`` and a ``slot <= position`` mask, grouped
  query heads folded into the query length (no repeated keys);
- LoRA adapters applied per fused group as ``x @ A_cat @ B_blockdiag`` (scaling folded in), per
  row group, so rows of DIFFERENT adapter versions share one decode step.

Numerics: the same operations in the same dtype as transformers (RMSNorm in float32, RoPE tables
from the model's own rotary module); float32 logits agree with a fresh transformers forward to
~1e-5 (tests check 1e-4).

What is covered: ``model_type == "llama"`` (SmolLM2, Llama 2/3 layouts) with SiLU MLPs, no MLP
bias, static RoPE; plain LoRA on q/k/v/o/gate/up/down. What is not: other architectures, DoRA,
LoRA on embeddings or the head, sliding windows, dynamic RoPE (:func:`unsupported_reason` says why
and the policy uses the transformers path instead).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from streamgrpo.inference.attention import PrefixGroup, cascade_attention
from streamgrpo.inference.kvcache import RowCache
from streamgrpo.inference.packing import PackedLinear, pack

#: fused group -> the projections it concatenates (output order)
GROUPS: dict[str, tuple[str, ...]] = {"qkv": ("q_proj", "k_proj", "v_proj"), "o": ("o_proj",),
                                      "gate_up": ("gate_proj", "up_proj"), "down": ("down_proj",)}
_PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def unsupported_reason(model: Any) -> str | None:
    """Why :class:`LeanLlama` cannot run ``model`` (None when it can)."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) != "llama":
        return f"model_type {getattr(config, 'model_type', None)!r} is not 'llama'"
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        return "only SiLU MLPs without bias are supported"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(rope, dict) and rope.get("rope_type", "default") == "dynamic":
        return "dynamic RoPE depends on the sequence length"
    return None


@dataclass
class _Layer:
    ln1: torch.Tensor
    ln2: torch.Tensor
    w: dict[str, torch.Tensor]  # group -> (in, out)
    bias: dict[str, torch.Tensor | None]
    packed: dict[str, PackedLinear | None]  # group -> the same weight packed (bf16), or None


@dataclass
class LeanAdapter:
    """One LoRA version as fused-group matrices: per layer, group -> (A_cat (in, R), B_blockdiag (R, out))."""

    layers: list[dict[str, tuple[torch.Tensor, torch.Tensor]]] = field(default_factory=list)


def _fuse(modules: Sequence[Any]) -> torch.Tensor:
    return torch.cat([m.weight.detach() for m in modules], dim=0).t().contiguous()


class LeanLlama:
    """Weights of a ``LlamaForCausalLM`` arranged for :meth:`forward` (see module docstring)."""

    def __init__(self, model: Any, *, adopt_weights: bool = True, pack_head: bool = True,
                 pack_layers: bool | None = None) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"the lean engine cannot run this model: {reason}")
        cfg = model.config
        core = model.get_base_model().model if hasattr(model, "get_base_model") else model.model
        self.dtype = core.embed_tokens.weight.dtype
        self.device = core.embed_tokens.weight.device
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = float(cfg.rms_norm_eps)
        self.n_layers = cfg.num_hidden_layers
        self.embed = core.embed_tokens.weight.detach()
        head = model.get_output_embeddings().weight.detach()
        # the output head: one packed copy (see packing.py), else one transposed (hidden, vocab) copy
        self.head = pack(head) if pack_head else None
        self.head_t = head.t().contiguous() if self.head is None else None
        self.norm = core.norm.weight.detach()
        self.pack_layers = self.dtype == torch.bfloat16 if pack_layers is None else pack_layers
        self.layers = [self._layer(block, adopt_weights) for block in core.layers]
        self._rotary = core.rotary_emb
        self.cos = self.sin = torch.empty(0, self.head_dim, dtype=self.dtype, device=self.device)
        self.ensure_positions(getattr(cfg, "max_position_embeddings", 2048))

    def ensure_positions(self, count: int) -> None:
        """RoPE tables ``(positions, head_dim)`` for positions ``[0, count)``, from the model's own rotary
        module (so any static RoPE variant matches transformers; like transformers, positions past
        ``max_position_embeddings`` are computed, not refused)."""
        if count <= self.cos.shape[0]:
            return
        size = max(count, 2 * self.cos.shape[0])
        probe = torch.zeros(1, dtype=self.dtype, device=self.device)
        with torch.no_grad():
            cos, sin = self._rotary(probe, torch.arange(size, device=self.device)[None])
        self.cos, self.sin = cos[0].to(self.dtype), sin[0].to(self.dtype)

    def _layer(self, block: Any, adopt: bool) -> _Layer:
        w: dict[str, torch.Tensor] = {}
        bias: dict[str, torch.Tensor | None] = {}
        for group, names in GROUPS.items():
            modules = [_base_linear(getattr(getattr(block, _PARENT[n]), n)) for n in names]
            w[group] = _fuse(modules)
            biases = [m.bias for m in modules]
            bias[group] = None if all(b is None for b in biases) else torch.cat(
                [b.detach() if b is not None else torch.zeros(m.weight.shape[0], dtype=self.dtype, device=self.device)
                 for b, m in zip(biases, modules, strict=True)])
            if adopt:  # the transformers modules now read views of the fused tensor: one copy of the weights
                start = 0
                for m in modules:
                    width = m.weight.shape[0]
                    m.weight = torch.nn.Parameter(w[group][:, start:start + width].t(), requires_grad=False)
                    start += width
        packed = {g: pack(t.t()) if self.pack_layers else None for g, t in w.items()}
        return _Layer(block.input_layernorm.weight.detach(), block.post_attention_layernorm.weight.detach(), w, bias,
                      packed)

    # -- adapters ---------------------------------------------------------------------------------
    def adapter_from_peft(self, peft_model: Any, name: str) -> LeanAdapter:
        """Extract adapter ``name`` from a peft model wrapping this model's modules (plain LoRA only)."""
        _refuse_other_modules(peft_model, name)
        core = peft_model.get_base_model().model
        adapter = LeanAdapter()
        for block, layer in zip(core.layers, self.layers, strict=True):
            groups: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
            for group, names in GROUPS.items():
                parts = [_lora_part(getattr(getattr(block, _PARENT[n]), n), name) for n in names]
                if all(p is None for p in parts):
                    continue
                groups[group] = self._blockdiag(group, names, parts, layer)
            adapter.layers.append(groups)
        return adapter

    def _blockdiag(self, group: str, names: Sequence[str], parts: Sequence[tuple[torch.Tensor, torch.Tensor] | None],
                   layer: _Layer) -> tuple[torch.Tensor, torch.Tensor]:
        rank = sum(p[0].shape[0] for p in parts if p is not None)
        d_in, d_out = layer.w[group].shape
        a_cat = torch.zeros(d_in, rank, dtype=self.dtype, device=self.device)
        b_bd = torch.zeros(rank, d_out, dtype=self.dtype, device=self.device)
        r0 = c0 = 0
        for part, width in zip(parts, _widths(layer.w[group], names, self), strict=True):
            if part is not None:
                a, b = part  # a (r, in), b_scaled (out, r)
                r = a.shape[0]
                a_cat[:, r0:r0 + r] = a.t()
                b_bd[r0:r0 + r, c0:c0 + width] = b.t()
                r0 += r
            c0 += width
        return a_cat, b_bd

    # -- forward ----------------------------------------------------------------------------------
    @torch.no_grad()
    def decode(self, cache: RowCache, tokens: torch.Tensor, lengths: torch.Tensor,
               lora: Sequence[tuple[LeanAdapter, torch.Tensor | None]] = (),
               shared: Sequence[PrefixGroup] | None = None) -> torch.Tensor:
        """One token per active row: ``tokens (n,)`` go to slot ``lengths[b]`` of rows ``[0, n)``; logits ``(n, V)``.

        ``lora``: ``(adapter, row index or None for every row)`` pairs. ``shared``: groups of rows with a
        common prompt prefix (every row in one), attended with :func:`~.attention.cascade_attention`;
        None: plain attention over each row.
        """
        n = tokens.shape[0]
        rows = torch.arange(n, device=tokens.device)
        length = int(lengths.max()) + 1
        groups = self.heads // self.kv_heads
        mask = None
        if shared is None:
            allowed = torch.arange(length, device=tokens.device)[None, :] <= lengths[:, None]
            mask = _additive(allowed, self.dtype)[:, None, None]  # (n, 1, 1, L)

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys, values = cache.k[index], cache.v[index]
            keys[rows, :, lengths] = k
            values[rows, :, lengths] = v
            q = q.view(n, self.kv_heads, groups, self.head_dim)  # grouped query heads as the query length
            if shared is not None:
                return cascade_attention(q, keys, values, shared).to(q.dtype).reshape(n, -1)
            out = F.scaled_dot_product_attention(q, keys[:n, :, :length], values[:n, :, :length], attn_mask=mask)
            return out.reshape(n, -1)

        x = self._layers(F.embedding(tokens, self.embed), lengths, attend, lora)
        return self._logits(_rms(x, self.norm, self.eps))

    @torch.no_grad()
    def prefill(self, cache: RowCache, rows: Sequence[int], chunks: Sequence[Sequence[int]], starts: Sequence[int],
                adapter: LeanAdapter | None = None) -> torch.Tensor:
        """Run ``chunks[i]`` into cache row ``rows[i]`` from slot ``starts[i]``; logits ``(len(chunks), V)`` of
        each chunk's last token. The chunks are packed into one sequence for the products (no padding);
        attention runs per chunk, over the row's slots ``[0, start + len)`` with a causal mask."""
        device = self.device
        sizes = [len(c) for c in chunks]
        tokens = torch.tensor([t for c in chunks for t in c], device=device)
        row_ids = torch.tensor([r for r, size in zip(rows, sizes, strict=True) for _ in range(size)], device=device)
        slots = torch.cat([torch.arange(s, s + size, device=device) for s, size in zip(starts, sizes, strict=True)])
        groups = self.heads // self.kv_heads
        spans, offset = [], 0
        for row, start, size in zip(rows, starts, sizes, strict=True):
            causal = torch.arange(start + size, device=device)[None, :] <= torch.arange(start, start + size,
                                                                                         device=device)[:, None]
            spans.append((offset, size, row, start + size, _additive(causal.repeat(groups, 1), self.dtype)[None, None]))
            offset += size

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys, values = cache.k[index], cache.v[index]
            keys[row_ids, :, slots] = k
            values[row_ids, :, slots] = v
            out = torch.empty(q.shape[0], self.heads * self.head_dim, dtype=q.dtype, device=device)
            for first, size, row, length, mask in spans:
                qc = q[first:first + size].view(size, self.kv_heads, groups, self.head_dim).permute(1, 2, 0, 3)
                oc = F.scaled_dot_product_attention(qc.reshape(1, self.kv_heads, groups * size, self.head_dim),
                                                    keys[row:row + 1, :, :length], values[row:row + 1, :, :length],
                                                    attn_mask=mask)
                oc = oc.view(self.kv_heads, groups, size, self.head_dim).permute(2, 0, 1, 3)
                out[first:first + size] = oc.reshape(size, -1)
            return out

        lora = [(adapter, None)] if adapter is not None else []
        x = self._layers(F.embedding(tokens, self.embed), slots, attend, lora)
        last = torch.tensor([offset - 1 for offset in itertools.accumulate(sizes)], device=device)
        return self._logits(_rms(x[last], self.norm, self.eps))

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """``(M, hidden)`` -> ``(M, vocab)`` through the output head."""
        if self.head is not None:
            return self.head(h)
        assert self.head_t is not None
        return h @ self.head_t

    def _layers(self, x: torch.Tensor, positions: torch.Tensor, attend: Callable[..., torch.Tensor],
                lora: Sequence[tuple[LeanAdapter, torch.Tensor | None]]) -> torch.Tensor:
        """The decoder layers over ``x (M, H)``, one token per row of ``x``, at ``positions (M,)``."""
        m = x.shape[0]
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # (M, 1, D)
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for index, layer in enumerate(self.layers):
            plan = [(a.layers[index], idx) for a, idx in lora if a.layers[index]]
            qkv = _proj(_rms(x, layer.ln1, self.eps), layer, "qkv", plan)
            qk = _rope(qkv[:, :q_width + kv_width].view(m, self.heads + self.kv_heads, self.head_dim), cos, sin)
            q, k = qk.split([self.heads, self.kv_heads], dim=1)
            v = qkv[:, q_width + kv_width:].view(m, self.kv_heads, self.head_dim)
            x = x + _proj(attend(index, q, k, v), layer, "o", plan)
            gate, up = _proj(_rms(x, layer.ln2, self.eps), layer, "gate_up", plan).chunk(2, dim=-1)
            x = x + _proj(F.silu(gate) * up, layer, "down", plan)
        return x


def _proj(x: torch.Tensor, layer: _Layer, group: str, plan: Sequence[tuple[dict[str, Any], torch.Tensor | None]]
          ) -> torch.Tensor:
    packed = layer.packed[group]
    out = packed(x) if packed is not None else x @ layer.w[group]
    bias = layer.bias[group]
    if bias is not None:
        out = out + bias
    for groups, idx in plan:
        pair = groups.get(group)
        if pair is None:
            continue
        a_cat, b_bd = pair
        if idx is None:
            out = out + (x @ a_cat) @ b_bd
        else:
            out = out.index_add(0, idx, (x.index_select(0, idx) @ a_cat) @ b_bd)
    return out


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool mask -> 0 / -inf in ``dtype`` (built once per call, not converted again by every layer)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, float("-inf"))


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm: normalise in float32, cast back, then scale."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _base_linear(module: Any) -> Any:
    """The plain ``nn.Linear`` under a peft LoRA wrapper (or the module itself)."""
    return getattr(module, "base_layer", module)


def _refuse_other_modules(peft_model: Any, name: str) -> None:
    """ValueError when adapter ``name`` changes anything but the decoder projections (LoRA on the embeddings or
    the head, ``modules_to_save`` copies): the lean forward would silently serve it without that part."""
    for path, module in peft_model.named_modules():
        saved = getattr(module, "modules_to_save", None)
        if isinstance(saved, torch.nn.ModuleDict) and name in saved:
            raise ValueError(f"adapter {name}: a full copy of {path} (modules_to_save) is not supported by the lean engine")
        lora_a = getattr(module, "lora_A", None)
        has_lora = isinstance(lora_a, torch.nn.ModuleDict) and name in lora_a
        has_lora = has_lora or name in (getattr(module, "lora_embedding_A", None) or {})
        if has_lora and path.rsplit(".", 1)[-1] not in _PARENT:
            raise ValueError(f"adapter {name}: LoRA on {path} is not supported by the lean engine")


def _lora_part(module: Any, name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(A (r, in), B * scaling (out, r))`` of adapter ``name`` on ``module``, None when it has none."""
    lora_a = getattr(module, "lora_A", None)
    if lora_a is None or name not in lora_a:
        return None
    if getattr(module, "use_dora", {}).get(name, False):
        raise ValueError(f"adapter {name}: DoRA is not supported by the lean engine")
    if getattr(module, "lora_bias", {}).get(name, False):
        raise ValueError(f"adapter {name}: LoRA bias is not supported by the lean engine")
    a = lora_a[name].weight.detach()
    b = module.lora_B[name].weight.detach() * float(module.scaling[name])
    dtype = module.base_layer.weight.dtype
    return a.to(dtype), b.to(dtype)


def _widths(fused: torch.Tensor, names: Sequence[str], lean: LeanLlama) -> list[int]:
    """Output width of each projection in a fused group."""
    if names == GROUPS["qkv"]:
        return [lean.heads * lean.head_dim, lean.kv_heads * lean.head_dim, lean.kv_heads * lean.head_dim]
    return [fused.shape[1] // len(names)] * len(names)
