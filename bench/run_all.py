"""Run every benchmark, keep each run's JSON in bench/results.json and write BENCHMARKS.md from it.

Each benchmark is a script in this folder that prints ONE JSON object last; it runs in its own process
(`python bench/<script> [args]`), so the command written above each table reproduces it. Every table
names the baseline measured in the same run.

    python bench/run_all.py                 # all but the long ones
    python bench/run_all.py codec broker    # a subset (the other sections keep their last results)
    python bench/run_all.py --render        # re-write BENCHMARKS.md (and docs/benchmarks/) from bench/results.json

BENCHMARKS.md holds tables only: a section per benchmark with its command, machine, date and baseline. The
hand-written `## Learning` section (docs/learning.md's owner) is carried over from the current file verbatim.
A benchmark with ``rows`` shows only those rows of its tables there (its headline figures, so the file stays
about one screen per benchmark) and links its full section, every table of the run, written to
docs/benchmarks/<name>.md.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent


@dataclass(frozen=True)
class Bench:
    """One benchmark: its script + arguments, the section title, what the same run compares against."""

    args: tuple[str, ...]
    title: str
    baseline: str
    long: bool = False  # 12-80 min (or an optional install): runs only when named
    hide: tuple[str, ...] = ()  # result keys (flattened prefixes) left out of the tables
    settings: tuple[str, ...] = ()  # numeric result keys (flattened prefixes) that are settings, not figures
    #: The rows (first cell) of its own table and its pivots that BENCHMARKS.md shows; None: all of them, no
    #: detail page; set: the full section goes to docs/benchmarks/<name>.md (a table with none of them is left out).
    rows: tuple[str, ...] | None = None


# Reading notes that used to be prose in BENCHMARKS.md, kept here where they explain a figure:
# - broker: a group's first-record time is Tansu answering a join after half the session timeout
#   (aiokafka 10 s -> ~5 s, librdkafka 45 s -> ~23 s), not client speed; `[kafka] session_timeout_ms` sets it.
# - generation / trainer_step: bf16 is slower than float32 on this CPU (AVX-512-BF16, no AMX), so
#   `dtype=auto` / precision auto pick float32 here.
# - trainer_events: publish_ms is almost all the adapter store's write (~22 MB: weights, optimizer, sha256).
# - search: bm25s builds slower, holds a quarter of the memory and answers two orders of magnitude faster.
# - ab: under equal arms `promoted_better` is the false-promotion rate (bounded by ab_alpha); `run_profile`
#   cuts the test at the ~4 canary groups a 240 s test gets in `streamgrpo run` on 2 cores.
# - trl / trl_learning: streamgrpo skips zero-variance groups (no gradient); TRL steps on them.
BENCHES: dict[str, Bench] = {
    "codec": Bench(("bench_codec.py", "2000"), "Avro codec vs JSON", "JSON encoding of the same events",
                   settings=("n",)),
    "broker": Bench(("bench_broker.py", "20000"), "Embedded broker: produce / consume per client",
                    "librdkafka consumer next to aiokafka", settings=("n_tasks", "n_planner_actions")),
    "streams": Bench(("bench_streams.py",), "Advantage window: rewards/s and last-reward -> samples latency",
                     "none (absolute: burst throughput, paced latency)",
                     settings=("group_size", "commit_interval_s", "burst_groups", "burst_rewards", "paced_groups",
                               "pace_ms")),
    "generation": Bench(("bench_generation.py", "--threads", "1", "--groups", "4", "--max-turns", "2"),
                        "Planner generation engines on real planner calls (SmolLM2-135M, CPU)",
                        "eager_fp32 (the transformers-forward loop)", hide=("results",),
                        rows=("eager_fp32", "fast_fp32", "fast_bf16")),
    "rollout": Bench(("bench_rollout.py", "--groups", "8", "--group-size", "4", "--max-turns", "4", "--max-new-tokens",
                      "64", "--concurrency", "2", "4", "--modes", "stop_at_json_end"),
                     "Rollout worker throughput: concurrency 4 (default) vs 2", "concurrency 2",
                     rows=("rollouts_per_s", "planner_actions_per_s", "wall_s")),
    "trainer_step": Bench(("bench_trainer_step.py", "--steps", "3"),
                          "Trainer step on realistic samples (SmolLM2-135M, CPU)", "fp32_before (the fp32 path)",
                          hide=("modes", "data"), rows=("s per step (median)", "trainer tokens/s",
                                                        "speed-up vs fp32_before", "peak RSS MB")),
    "trainer_events": Bench(("bench_trainer_events.py", "--steps", "4"),
                            "The event path's overhead per trainer step (consume, publish, commit)",
                            "the optimizer step itself (train_step_s)",
                            settings=("data", "samples_per_step", "steps", "steps_in_median")),
    "sandbox": Bench(("bench_sandbox.py", "--calls", "30"), "Python sandbox and calculator: isolation cost per call",
                     "bare interpreter (`python -I -c`), in-process calculator", settings=("calls",)),
    "search": Bench(("bench_search.py", "--passages", "100000", "--queries", "1000"),
                    "Knowledge search: own BM25 vs bm25s on 100k passages", "own BM25 (pure Python)",
                    hide=("own", "bm25s")),
    "math_agreement": Bench(("bench_math_agreement.py",), "Math judge: v1 (own parser) vs v2 (math-verify)",
                            "v1 and math-verify alone on the case table", rows=()),
    "ab": Bench(("bench_ab.py", "--runs", "1000"), "A/B test of adapter versions (simulation of the decision core)",
                "equal arms (false-promotion rate vs alpha)",
                settings=("runs_per_scenario", "seed", "canary_share", "alpha", "mde", "min_groups", "max_groups",
                          "group_size", "run_profile_canary_groups"),
                rows=("promoted_better", "rolled_back_worse", "rolled_back_guardrail", "groups_to_decision_p50")),
    "constrain": Bench(("bench_constrain.py", "--limit", "32", "--samples", "4", "--temperature", "0.7"),
                       "Grammar-constrained planner replies vs free sampling + repair (base SmolLM2)",
                       "constrain = off (free sampling, then repair)", long=True, hide=("results",)),
    "mcp": Bench(("bench_mcp.py", "--calls", "200", "--solve", "3"), "MCP",
                 "the built-in calculator call"),
    "trl": Bench(("bench_trl.py",), "streamgrpo vs TRL GRPOTrainer, same model and steps", "TRL GRPOTrainer",
                 long=True, hide=("trl", "streamgrpo"),
                 rows=("s_per_step", "generated_tokens_per_s", "trainer_tokens_per_s", "peak_rss_mb", "reward_last2")),
    "trl_learning": Bench(("bench_trl_learning.py", "--budget-s", "1800"),
                          "Held-out accuracy after 30 minutes: TRL GRPOTrainer vs `streamgrpo run` (same tasks, "
                          "reward and planner prompt and tools; table in its page)",
                          "TRL GRPOTrainer; the base model", long=True,
                          hide=("trl", "streamgrpo", "heldout_base", "workdir", "eval_commands"), rows=()),
    "learning": Bench(("bench_learning.py", "1800", "--runs", "3", "--plot", "docs/learning_heldout_3seeds.png"),
                      "Held-out accuracy of `streamgrpo run` after 30 minutes, GRPO alone before the warm start (3 seeds; the warm start: \"Learning\" below)", "the base model",
                      long=True, hide=("table", "per_run[*].heldout_base", "per_run[*].publish_to_first_rollout_s.n",
                                       "per_run[*].never_served", "per_run[*].heldout_tasks"),
                      settings=("duration_s", "runs"), rows=()),
    "run_throughput": Bench(("bench_run.py", "--duration", "600", "--concurrency", "2", "4"),
                            "Whole-loop throughput: `streamgrpo run` rollouts per minute by concurrency",
                            "concurrency 2", long=True,
                            rows=("rollouts_per_min", "groups_training", "adapters_published", "stale_share")),
    "scaling": Bench(("bench_scaling.py",), "Rollout workers vs throughput under admission (1-3 workers; trainer steps 8, 64 and 96)",
                     "one worker at the same pace; the default pace (samples_per_step 8)", long=True,
                     settings=("group_s", "step_s", "measure_s", "worker_batch", "max_staleness",
                               "max_groups_in_flight"),
                     hide=("complete_windows",), rows=("step 8: rollouts/s (x one worker; samples stale)",
                                                        "step 96: rollouts/s (x one worker; samples stale)")),
    "vllm": Bench(("bench_vllm.py", "--group-size", "8", "--max-new-tokens", "64", "--rounds", "3"),
                  "Planner generation on a local vLLM server vs the local policy (SmolLM2-135M, N=8, CPU)",
                  "the local policy", long=True, hide=("results",)),
}

#: Keys that describe the run, not the result (shown in the section's header line or not at all).
RUN_KEYS = {"bench", "command", "seconds", "date", "machine", "notes", "host", "cpus", "cpu_count",
            "report", "load_avg_1m", "load_avg_1m_end", "load_avg_1m_start", "load_avg_1m_at_end", "load_mean"}
#: The hand-written section carried over from the current BENCHMARKS.md.
HAND_SECTION = "## Learning"
HAND_PLACEHOLDER = "<!-- learning: filled by docs/learning.md owner -->"
#: Where a benchmark with ``rows`` has its full section (relative to ROOT), and the first line of such a page.
DETAIL_DIR = "docs/benchmarks"
DETAIL_MARK = "<!-- generated by bench/run_all.py from bench/results.json: do not edit -->"


def this_machine() -> str:
    gpu = "GPU" if os.environ.get("CUDA_VISIBLE_DEVICES") not in (None, "", "-1") else "no GPU"
    return f"{os.cpu_count()}-core {platform.machine()} CPU, {gpu}"


def run_one(name: str) -> dict[str, object]:
    args = BENCHES[name].args
    cmd = [sys.executable, str(HERE / args[0]), *args[1:]]
    t = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(HERE)))
    took = time.time() - t
    run = {"bench": name, "command": "python bench/" + " ".join(args), "seconds": round(took, 1),
           "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": this_machine()}
    if proc.returncode != 0:
        return {**run, "error": proc.stderr[-2000:]}
    return {**_last_json_object(proc.stdout), **run}


def _last_json_object(text: str) -> dict[str, object]:
    """The last JSON object a script printed (one line, or indented over several)."""
    decoder = json.JSONDecoder()
    starts = [i for i in range(len(text)) if text[i] == "{" and (i == 0 or text[i - 1] == "\n")]
    for start in reversed(starts):
        try:
            obj, _ = decoder.raw_decode(text[start:])
            return dict(obj)
        except json.JSONDecodeError:
            continue
    raise ValueError(f"no JSON object in the output: {text[-500:]!r}")


def _flatten(prefix: str, value: object) -> list[tuple[str, object]]:
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in _flatten(f"{prefix}.{k}" if prefix else str(k), v)]
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        return [kv for i, x in enumerate(value) for kv in _flatten(f"{prefix}[{i}]", x)]
    return [(prefix, value)]


def _hidden(key: str, hide: tuple[str, ...], run_keys: bool = True) -> bool:
    """Whether ``key`` (flattened, list indices as ``[*]``) is one of ``hide`` or below one (or a run key)."""
    generic = re.sub(r"\[\d+\]", "[*]", key)
    leaf = key.rsplit(".", 1)[-1]
    return (run_keys and leaf in RUN_KEYS) or any(generic == h or generic.startswith(h + ".") or generic.startswith(h + "[")
                                   for h in hide)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, (dict, list)):
        return "`" + json.dumps(v)[:120] + "`"
    return str(v)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _is_nested(v: object) -> bool:
    return isinstance(v, dict) or (isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v))


def _pivot(name: str, value: object, hide: tuple[str, ...]) -> list[str] | None:
    """A dict of dicts (or list of dicts) as one table: an item per row (per column when items outnumber figures)."""
    items = list(value.items()) if isinstance(value, dict) else list(enumerate(value)) if isinstance(value, list) else []
    if len(items) < 2 or not all(isinstance(v, dict) for _, v in items):
        return None
    path = (lambda k: f"{name}[{k}]") if isinstance(value, list) else (lambda k: f"{name}.{k}")
    flat = [(str(k), {sub: v for sub, v in _flatten("", item) if not _hidden(f"{path(k)}.{sub}", hide)})
            for k, item in items]
    cols = list(dict.fromkeys(c for _, f in flat for c in f))
    cells = [[_fmt(f.get(c, "-")) for c in cols] for _, f in flat]
    if len(cols) < len(items):
        return [_row([name, *(k for k, _ in flat)]), _row(["---"] * (len(flat) + 1)),
                *(_row([c, *(cell[i] for cell in cells)]) for i, c in enumerate(cols))]
    return [_row([name, *cols]), _row(["---"] * (len(cols) + 1)),
            *(_row([k, *cell]) for (k, _), cell in zip(flat, cells, strict=True))]


def _pairs(scalars: list[tuple[str, object]], per_row: int = 3) -> list[str]:
    """metric | value pairs, ``per_row`` of them side by side (one screen for a few dozen figures)."""
    n = min(per_row, len(scalars))
    rows = [scalars[i:i + n] for i in range(0, len(scalars), n)]
    return [_row(["metric", "value"] * n), _row(["---"] * 2 * n),
            *(_row([c for k, v in row for c in (k, _fmt(v))] + ["", ""] * (n - len(row))) for row in rows)]


def _cells(line: str) -> list[str]:
    """The cells of a markdown table row, as written (an escaped ``\\|`` stays inside its cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _cut_table(table: list[str], rows: tuple[str, ...]) -> list[str]:
    """A table's header and the rows whose first cell is in ``rows``, or else (a pivot the other way round) its
    first column and the columns whose header is in ``rows``; [] when it has none of them."""
    body = [line for line in table[2:] if _cells(line)[:1] and _cells(line)[0] in rows]
    if body:
        return [*table[:2], *body]
    header = _cells(table[0])
    keep = [0, *(i for i, c in enumerate(header) if i and c in rows)]
    if len(keep) == 1:
        return []
    return ["| " + " | ".join(cells[i] for i in keep) + " |" if n != 1 else "|" + "---|" * len(keep)
            for n, cells in enumerate(_cells(line) for line in table)]


def _only_rows(text: str, rows: tuple[str, ...]) -> list[str]:
    """Markdown ``text`` with each table cut by :func:`_cut_table`; a table with none of ``rows`` is left out,
    and the whole text (its prose too) when no table is left."""
    paragraphs, kept_any = [], False
    for paragraph in re.split(r"\n\s*\n", text.strip()):
        lines = paragraph.splitlines()
        table = [line for line in lines if line.startswith("|")]
        if not table:
            paragraphs.append(lines)
            continue
        cut = _cut_table(table, rows)
        if cut:
            kept_any = True
            paragraphs.append([line for line in lines if not line.startswith("|")] + cut)
    return [line for lines in paragraphs for line in [*lines, ""]] if kept_any else []


def detail_path(name: str) -> str:
    """Where a benchmark with ``rows`` has its full section, relative to ROOT."""
    return f"{DETAIL_DIR}/{name}.md"


def _has_detail(r: dict[str, object]) -> bool:
    bench = BENCHES.get(str(r.get("bench")))
    return bench is not None and bench.rows is not None and "error" not in r


def render_section(r: dict[str, object], summary: bool = False) -> list[str]:
    """One benchmark's section: title, a header line (command, machine, date, baseline), its tables.

    ``summary``: BENCHMARKS.md's version, only the bench's ``rows`` of its own table and pivots, with a link to
    the full section (:func:`render_detail`)."""
    name = str(r.get("bench"))
    bench = BENCHES.get(name, Bench((), name, "-"))
    cut = summary and _has_detail(r)
    link = f" · full tables: [{detail_path(name)}]({detail_path(name)})" if cut else ""
    lines = [f"## {bench.title}", f"`{r.get('command')}` · {r.get('machine', '-')} · {r.get('date', '-')} · "
                                  f"baseline: {bench.baseline}{link}"]
    if "error" in r:
        return [*lines, "", "**Failed in this run:**", "", "```", str(r["error"]).strip(), "```", ""]
    has_table = "table" in r and not _hidden("table", bench.hide)
    scalars: list[tuple[str, object]] = []
    pivots: list[str] = []
    for k, v in r.items():
        if k == "table" or _hidden(k, bench.hide) or (has_table and _is_nested(v)):  # a run's own table holds its nested results
            continue
        pivot = _pivot(k, v, bench.hide)
        if pivot:
            pivots += _only_rows("\n".join(pivot), bench.rows or ()) if cut else [*pivot, ""]
        else:
            scalars += [(fk, fv) for fk, fv in _flatten(k, v) if not _hidden(fk, bench.hide)]
    # a run whose results are its own table: every scalar is a setting; else the words are, the numbers results
    settings = [(k, v) for k, v in scalars
                if has_table or not isinstance(v, (int, float)) or _hidden(k, bench.settings, run_keys=False)]
    figures = [(k, v) for k, v in scalars if (k, v) not in settings]
    if settings:
        lines += ["<br>Settings: " + ", ".join(f"{k} {_fmt(v)}" for k, v in settings)]
    lines.append("")
    if figures:
        lines += [*_pairs(figures), ""]
    if has_table:
        lines += _only_rows(str(r["table"]), bench.rows or ()) if cut else [str(r["table"]).strip(), ""]
    return lines + pivots


def render_detail(r: dict[str, object]) -> str:
    """The page of a benchmark with ``rows``: its full section, every table of the run."""
    title, *rest = render_section(r)
    return "\n".join([DETAIL_MARK, "#" + title.removeprefix("##"), "",
                      "Every table of the run; [BENCHMARKS.md](../../BENCHMARKS.md) shows the headline rows.", "",
                      *rest]).rstrip() + "\n"


def details(results: list[dict[str, object]]) -> dict[str, str]:
    """Path (relative to ROOT) -> text of every detail page these results make."""
    return {detail_path(str(r["bench"])): render_detail(r) for r in results if _has_detail(r)}


def render(results: list[dict[str, object]], hand_section: str = "") -> str:
    lines = [
        "# Benchmarks",
        "",
        "Generated by `python bench/run_all.py` (`make bench`; `--render` re-writes it from bench/results.json, where "
        "each run's full JSON stays). Do not edit by hand except the Learning section.",
        "Each table: the command, the machine, the date of the run and the baseline measured in the same run. "
        "A shared 2-core machine varies by about ±20 % between runs: compare within a table.",
        "",
    ]
    order = list(BENCHES)
    for r in sorted(results, key=lambda r: order.index(str(r["bench"])) if r.get("bench") in BENCHES else 99):
        lines += render_section(r, summary=True)
    lines += [hand_section.strip() or f"{HAND_SECTION}\n\n{HAND_PLACEHOLDER}", ""]
    return "\n".join(lines)


def hand_section(text: str) -> str:
    """The `## Learning` section of an existing BENCHMARKS.md, up to the next `## ` heading ('' when absent)."""
    match = re.search(rf"^{re.escape(HAND_SECTION)}\s*$.*?(?=^## |\Z)", text, flags=re.M | re.S)
    return match.group(0) if match else ""


def write(results: list[dict[str, object]]) -> Path:
    """BENCHMARKS.md (its Learning section kept) and the detail pages; a stale generated page is removed."""
    out = ROOT / "BENCHMARKS.md"
    kept = hand_section(out.read_text()) if out.exists() else ""
    out.write_text(render(results, kept))
    pages = details(results)
    (ROOT / DETAIL_DIR).mkdir(parents=True, exist_ok=True)
    for old in (ROOT / DETAIL_DIR).glob("*.md"):
        if old.relative_to(ROOT).as_posix() not in pages and old.read_text().startswith(DETAIL_MARK):
            old.unlink()
    for rel, text in pages.items():
        (ROOT / rel).write_text(text)
    return out


def main(argv: list[str]) -> int:
    raw = HERE / "results.json"
    previous = json.loads(raw.read_text()) if raw.exists() else []
    if argv == ["--render"]:
        write(previous)
        return 0
    names = argv or [n for n, b in BENCHES.items() if not b.long]
    results = []
    for name in names:
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        results.append(run_one(name))
        print(f"[bench] {name}: {'FAILED' if 'error' in results[-1] else 'ok'}", file=sys.stderr, flush=True)
    done = {r["bench"] for r in results}
    results = [r for r in previous if r.get("bench") not in done] + results  # other sections keep their last run
    print(f"wrote {write(results)}", file=sys.stderr)
    raw.write_text(json.dumps(results, indent=1))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
