"""The fast local engine: ONE decode loop shared by every concurrent ``generate`` call.

Each call becomes a job of N rows. A single engine thread runs iteration-level scheduling:

1. admit the jobs that arrived since the last step: prefill their prompts into the static
   :class:`~.kvcache.RowCache` and sample their first token;
2. run one decode step over ALL active rows of all jobs (any mix of adapter versions: each row
   group gets its own LoRA product, see :mod:`.lean`);
3. sample every row with its job's settings and its own generator, end rows at EOS / stop / the token
   budget, hand finished jobs back to their callers; then go to 1.

So two rollout groups running in two worker threads decode in one batch instead of taking
turns behind a lock (``RolloutConfig.concurrency`` overlaps generation, not only tools).

Prefill sharing: a job's prompts are deduplicated, and their longest common prefix is computed
once and copied to every row; the prefix is also kept in a :class:`~.kvcache.PrefixStore`
(per adapter version, LRU, bounded in tokens), so the next call that starts with the same
tokens -- every planner prompt starts with the same system prompt and tool list -- reuses its
keys/values instead of recomputing them.

Behaviour logprobs: every row is sampled by :func:`~.sampling.sample_step` from the logits the
lean forward produced (model dtype, softmax in float32), with the row's logits mask applied
first (see :mod:`.sampling`): what is recorded is the distribution actually sampled from.
Each row of a seeded job draws from its own generator (:func:`~.sampling.row_generators`), so its
samples do not depend on which other rows or jobs share its steps (logits can differ in the last
float bits with the batch composition).

What is covered: scheduling, prefix reuse, per-job sampling settings, error isolation (an
exception in a job's callback fails that job only; an exception in the forward fails the jobs
in flight, whose callers re-raise it). What is not: chunked prefill (a long prefill pauses the
other rows' decoding), preemption, more rows than ``max_rows`` (later jobs wait).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from streamgrpo.inference.attention import PrefixGroup, prefix_groups
from streamgrpo.inference.errors import PolicyError
from streamgrpo.inference.kvcache import PrefixStore, RowCache, common_prefix
from streamgrpo.inference.lean import LeanAdapter, LeanLlama
from streamgrpo.inference.sampling import LogitsMask, Sampled, row_generators, row_masks, sample_step

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineRequest:
    """One ``generate`` call: N prompts (may repeat) sampled with one setting under one adapter."""

    prompts: list[list[int]]
    temperature: float
    top_p: float
    max_new_tokens: int
    eos_ids: frozenset[int]
    seed: int | tuple[int, ...] | None = None  # one per call or one per row (sampling.row_generators)
    adapter_key: Hashable = None  # None: the base model
    adapter: LeanAdapter | None = None
    stop: Callable[[int, int], bool] | None = None
    logits_mask: LogitsMask | None = None


@dataclass
class EngineStats:
    """Counters since start (for logs and the benchmark)."""

    submitted: int = 0
    jobs: int = 0  # admitted
    decode_steps: int = 0
    decoded_rows: int = 0  # sum over steps of the rows in the step
    cascade_steps: int = 0  # decode steps that read shared prefixes once per group
    max_rows: int = 0
    prefill_tokens: int = 0  # prompt tokens actually run through the model
    reused_prefix_tokens: int = 0  # prompt tokens taken from the prefix store


@dataclass(eq=False)
class _Job:
    request: EngineRequest
    future: Future[list[Sampled]]
    generators: list[torch.Generator] | None  # one per row (see sampling.row_generators)
    tokens: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    remaining: int = 0
    shared: int = 0  # prompt prefix length common to all its rows (held by each row's slots [0, shared))


@dataclass(eq=False)
class _Row:
    job: _Job
    index: int  # row of the job's prompts
    pending: int = -1  # last sampled token, fed to the next step


class FastEngine:
    """Continuous-batching sampler over a :class:`~.lean.LeanLlama` (see module docstring)."""

    def __init__(self, lean: LeanLlama, *, prefix_cache_tokens: int = 4096, max_rows: int = 64,
                 min_shared_prefix: int = 16, cascade: bool = True, min_cascade_prefix: int = 32) -> None:
        self.lean = lean
        self.max_rows = max_rows
        self.min_shared_prefix = min_shared_prefix
        #: decode attention reads each call's shared prefix once per step (:mod:`.attention`); off only to measure
        self.cascade = cascade
        self.min_cascade_prefix = min_cascade_prefix
        self.cache = RowCache(lean.n_layers, lean.kv_heads, lean.head_dim, lean.dtype, lean.device)
        self.prefixes = PrefixStore(prefix_cache_tokens)
        self.stats = EngineStats()
        self._rows: list[_Row] = []  # aligned with cache rows [0, n)
        self._pending: list[_Job] = []
        self._cv = threading.Condition()
        self._state = threading.Lock()  # held by the engine thread during an iteration
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- callers' side ----------------------------------------------------------------------------
    def generate(self, request: EngineRequest) -> list[Sampled]:
        """Sample ``request`` (blocks until its rows are done); re-raises the engine's exception."""
        return self.submit(request).result()

    def submit(self, request: EngineRequest) -> Future[list[Sampled]]:
        if not request.prompts or any(len(p) == 0 for p in request.prompts):
            raise PolicyError("every prompt needs at least one token")
        generators = row_generators(request.seed, len(request.prompts))
        job = _Job(request, Future(), generators, [[] for _ in request.prompts], [[] for _ in request.prompts],
                   len(request.prompts))
        with self._cv:
            if self._closed:
                raise PolicyError("the generation engine is closed")
            self._pending.append(job)
            self.stats.submitted += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="generation-engine", daemon=True)
                self._thread.start()
            self._cv.notify()
        return job.future

    def forget(self, adapter_key: Hashable) -> None:
        """Drop the stored prefixes computed under ``adapter_key`` (its version is being unloaded)."""
        with self._state:
            self.prefixes.drop(adapter_key)

    def close(self) -> None:
        """Stop the engine thread once the jobs in flight are done."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join()

    # -- engine thread ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._rows and not self._closed:
                    self._cv.wait()
                if self._closed and not self._pending and not self._rows:
                    return
                admitted = self._take_pending()
            with self._state:
                for job in admitted:
                    self._run_guarded(functools.partial(self._admit, job), [job])
                if self._rows:
                    self._run_guarded(self._decode, list({id(r.job): r.job for r in self._rows}.values()))

    def _take_pending(self) -> list[_Job]:
        taken, rows = [], len(self._rows)
        while self._pending and (rows == 0 or rows + len(self._pending[0].request.prompts) <= self.max_rows):
            job = self._pending.pop(0)
            taken.append(job)
            rows += len(job.request.prompts)
        return taken

    def _run_guarded(self, action: Callable[[], None], jobs: list[_Job]) -> None:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - forwarded to the waiting callers, who re-raise it
            log.error("generation failed for %d job(s): %s: %s", len(jobs), type(exc).__name__, exc)
            for job in jobs:
                self._fail(job, exc)

    def _fail(self, job: _Job, exc: BaseException) -> None:
        self._remove([i for i, r in enumerate(self._rows) if r.job is job])
        if not job.future.done():
            job.future.set_exception(exc)

    # -- prefill ----------------------------------------------------------------------------------
    def _admit(self, job: _Job) -> None:
        self.stats.jobs += 1
        prompts = job.request.prompts
        slot: dict[tuple[int, ...], int] = {}
        rep_of = [slot.setdefault(tuple(p), len(slot)) for p in prompts]
        reps = [list(p) for p in slot]
        # cache order: one row per distinct prompt, then each prompt's duplicates contiguously
        order = [rep_of.index(j) for j in range(len(reps))]
        order += [i for j in range(len(reps)) for i in range(len(prompts)) if rep_of[i] == j and i != order[j]]
        need = max(len(p) for p in prompts) + job.request.max_new_tokens
        self.lean.ensure_positions(need)
        first = self.cache.add_rows(len(prompts), need)
        self._rows.extend(_Row(job, i) for i in order)
        logits, job.shared = self._prefill(first, reps, job.request)
        for j, rep in enumerate(reps):
            self.cache.lengths[first + j] = len(rep)
        at = first + len(reps)
        for j, rep in enumerate(reps):
            count = sum(1 for i in order[len(reps):] if rep_of[i] == j)
            self.cache.copy_rows(first + j, list(range(at, at + count)), len(rep))
            self.cache.lengths[at:at + count] = [len(rep)] * count
            at += count
        picks = torch.tensor([rep_of[i] for i in order], device=logits.device)
        self._sample(logits.index_select(0, picks), list(range(first, first + len(prompts))))

    def _prefill(self, first: int, reps: list[list[int]], request: EngineRequest) -> tuple[torch.Tensor, int]:
        """Run the distinct prompts (rows ``first..``); return their last-token logits ``(u, V)`` and the
        length of the prefix they share."""
        shared = min(min(len(r) for r in reps) - 1, *(common_prefix(reps[0], r) for r in reps[1:])) \
            if len(reps) > 1 else len(reps[0]) - 1
        if shared < self.min_shared_prefix:
            shared = 0
        else:
            self._prefill_prefix(first, reps[0][:shared], request)
            self.cache.copy_rows(first, list(range(first + 1, first + len(reps))), shared)
        suffixes = [r[shared:] for r in reps]
        self.stats.prefill_tokens += sum(len(s) for s in suffixes)
        rows = list(range(first, first + len(reps)))
        logits = self.lean.prefill(self.cache, rows, suffixes, [shared] * len(reps), request.adapter)
        # the prefix the rows hold in common: all of a single distinct prompt (its rows are copies)
        return logits, len(reps[0]) if len(reps) == 1 else shared

    def _prefill_prefix(self, row: int, prefix: list[int], request: EngineRequest) -> None:
        """Keys/values of ``prefix`` into ``row``: from the prefix store as far as it matches, computed after."""
        stored, reused = self.prefixes.lookup(request.adapter_key, prefix)
        reused = min(reused, len(prefix))
        if stored is not None and reused >= self.min_shared_prefix:
            self.cache.write_prefix(row, stored, reused)
            self.stats.reused_prefix_tokens += reused
        else:
            reused = 0
        if reused < len(prefix):
            self.lean.prefill(self.cache, [row], [prefix[reused:]], [reused], request.adapter)
            self.stats.prefill_tokens += len(prefix) - reused
            self.prefixes.add(request.adapter_key, self.cache.read_prefix(row, prefix))

    # -- decode -----------------------------------------------------------------------------------
    def _decode(self) -> None:
        n = len(self._rows)
        device = self.lean.device
        tokens = torch.tensor([r.pending for r in self._rows], device=device)
        lengths = torch.tensor(self.cache.lengths, device=device)
        shared = self._shared_prefixes()
        logits = self.lean.decode(self.cache, tokens, lengths, self._lora_plan(), shared)
        self.stats.cascade_steps += shared is not None
        self.cache.lengths = [length + 1 for length in self.cache.lengths]
        self.stats.decode_steps += 1
        self.stats.decoded_rows += n
        self.stats.max_rows = max(self.stats.max_rows, n)
        self._sample(logits, list(range(n)))

    def _shared_prefixes(self) -> list[PrefixGroup] | None:
        """Cascade-attention groups (one per job), or None when some job shares too short a prefix or the
        groups are too small to pay for the extra operations."""
        if not self.cascade:
            return None
        by_job: dict[int, tuple[int, list[int]]] = {}
        for i, row in enumerate(self._rows):
            if row.job.shared < self.min_cascade_prefix:
                return None
            by_job.setdefault(id(row.job), (row.job.shared, []))[1].append(i)
        if len(self._rows) < 4 * len(by_job):  # measured: pays from ~4 rows per prefix (2 rows: 6% slower)
            return None
        return prefix_groups(list(by_job.values()), self.cache.lengths, self.lean.device)

    def _lora_plan(self) -> list[tuple[LeanAdapter, torch.Tensor | None]]:
        by_key: dict[Hashable, list[int]] = {}
        adapters: dict[Hashable, LeanAdapter | None] = {}
        for i, row in enumerate(self._rows):
            by_key.setdefault(row.job.request.adapter_key, []).append(i)
            adapters[row.job.request.adapter_key] = row.job.request.adapter
        plan: list[tuple[LeanAdapter, torch.Tensor | None]] = []
        for key, rows in by_key.items():
            adapter = adapters[key]
            if adapter is None:
                continue
            everyone = len(by_key) == 1
            plan.append((adapter, None if everyone else torch.tensor(rows, device=self.lean.device)))
        return plan

    # -- sampling ---------------------------------------------------------------------------------
    def _sample(self, logits: torch.Tensor, cache_rows: Sequence[int]) -> None:
        """``logits[i]`` belongs to cache row ``cache_rows[i]``: sample, record, end finished rows."""
        by_job: dict[int, list[tuple[_Row, int, int]]] = {}
        for i, cache_row in enumerate(cache_rows):
            row = self._rows[cache_row]
            by_job.setdefault(id(row.job), []).append((row, cache_row, i))
        finished: list[int] = []
        outcomes: list[tuple[_Job, BaseException | None]] = []
        for items in by_job.values():
            items.sort(key=lambda item: item[0].index)
            job = items[0][0].job
            try:
                finished += self._sample_job(job, items, logits)
            except Exception as error:  # noqa: BLE001 - a job's callback failed: fail that job only
                finished += [c for _, c, _ in items]
                outcomes.append((job, error))
                continue
            if job.remaining == 0:
                outcomes.append((job, None))
        self._remove(finished)  # before waking the callers: the cache is consistent when they resume
        for job, exc in outcomes:
            if job.future.done():
                continue
            if exc is not None:
                job.future.set_exception(exc)
            else:
                job.future.set_result([Sampled(t, lp) for t, lp in zip(job.tokens, job.logprobs, strict=True)])

    def _sample_job(self, job: _Job, items: list[tuple[_Row, int, int]], logits: torch.Tensor) -> list[int]:
        """Sample the rows ``items`` of ``job``; returns the cache rows that finished."""
        req = job.request
        index = torch.tensor([i for _, _, i in items], device=logits.device)
        mine = logits.index_select(0, index)
        allowed = None
        if req.logits_mask is not None:
            sampled = [job.tokens[row.index] for row, _, _ in items]
            mask = req.logits_mask
            allowed = row_masks(lambda k, s: mask(items[k][0].index, s), sampled, [False] * len(items), mine)
        generators = None if job.generators is None else [job.generators[row.index] for row, _, _ in items]
        tokens, lps = sample_step(mine, req.temperature, req.top_p, generators, allowed)
        finished = []
        for (row, cache_row, _), token, lp in zip(items, tokens.tolist(), lps.tolist(), strict=True):
            job.tokens[row.index].append(token)
            job.logprobs[row.index].append(lp)
            row.pending = token
            if (token in req.eos_ids or len(job.tokens[row.index]) >= req.max_new_tokens
                    or (req.stop is not None and req.stop(row.index, token))):
                finished.append(cache_row)
                job.remaining -= 1
        return finished

    def _remove(self, cache_rows: Sequence[int]) -> None:
        self.cache.remove_rows(cache_rows)
        for row in sorted(set(cache_rows), reverse=True):  # the same compaction as the cache's
            last = len(self._rows) - 1
            if row != last:
                self._rows[row] = self._rows[last]
            self._rows.pop()
