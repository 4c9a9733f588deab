"""Issue 37, part 1: `streamgrpo serve` starts anywhere. The real `serve` process, called with the `mcp` SDK's Client
over stdio and over streamable HTTP; the planner is the tiny in-process model saved to disk (its adapters are real
peft LoRA files with their sha256); the run's broker is the embedded one (the `kafka_ns` fixture).

- no flags and no broker (an empty home, no bootstrap, as a desktop client starts it): `solve` is answered by v0 over
  stdio; stderr says once that nothing is recorded;
- beside a live `streamgrpo run` whose primary is v1 (in the run's own adapter store, not <home>/adapters): `serve`
  without flags serves the latest live run, `serve --run ID` the one named, each its primary, its calls recorded under
  that run's topic prefix (a live process stands for the `run` process, as in test_cli_run_discovery.py);
- HTTP with a bearer token refuses a request without it, or with another one (401), answers one with it, and never
  logs it;
- a 1 MB question is an error within a second, and the server keeps answering; calls at once do not keep `adapters`
  waiting.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.mcp_servers import free_port, wait_http

from streamgrpo import runs
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

QUESTION = "What is 2 plus 3?"
TOKEN = "s3cret-token-for-the-serve-test-0123456789"
SOLVES = 16
ROLLOUT = '[rollout]\nmax_new_tokens = 16\n\n[rollout.tools]\nenabled = ["calculator"]\n'


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

    path = tmp_path_factory.mktemp("tiny-planner")
    build_tiny_model().save_pretrained(path)
    build_tiny_tokenizer().save_pretrained(path)
    return path


def _bare_env(home: Path, **extra: str) -> dict[str, str]:
    """A second terminal (or a desktop client): this home, and no Kafka, config or serve settings at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_") or k.startswith("STREAMGRPO_TEST_")}
    return {**env, "STREAMGRPO_HOME": str(home), "STREAMGRPO_LOOP__MAX_TURNS": "1", **extra}


def _config(tmp: Path, model: Path) -> Path:
    path = tmp / "serve.toml"
    path.write_text(ROLLOUT.replace("[rollout]\n", f"[rollout]\nmodel = {str(model)!r}\n"))
    return path


async def _stdio(env: dict[str, str], args: list[str], errlog: Path,
                 calls: list[tuple[str, dict[str, Any], float]]) -> list[tuple[Any, float]]:
    """``streamgrpo <args>`` over stdio: each call with its timeout; (result, seconds) per call."""
    from mcp import Client, Implementation, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "streamgrpo.cli", *args], env=env)
    with errlog.open("w") as err:
        transport = stdio_client(params, errlog=err)
        async with Client(transport, client_info=Implementation(name="desktop", version="1")) as client:
            out = []
            for name, arguments, timeout in calls:
                t0 = time.monotonic()
                result = await client.call_tool(name, arguments, read_timeout_seconds=timeout)
                out.append((result, time.monotonic() - t0))
            return out


def test_serve_with_no_flags_and_no_broker_answers_solve_over_stdio(tiny_model_dir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"  # empty: no broker state, no runs
    env = _bare_env(home, STREAMGRPO_CONFIG=str(_config(tmp_path, tiny_model_dir)))
    errlog = tmp_path / "stderr.log"
    (solved, _), (versions, _), (big, took), (again, _), (fed, _) = asyncio.run(_stdio(env, ["serve"], errlog, [
        ("solve", {"question": QUESTION}, 120), ("adapters", {}, 30),
        ("solve", {"question": "x" * 1_000_000}, 10), ("solve", {"question": QUESTION}, 120),
        ("feedback", {"rollout_id": "r", "score": 1.0}, 30)]))
    stderr = errlog.read_text()
    assert not solved.is_error, (solved.content, stderr[-3000:])
    reply = solved.structured_content
    assert (reply["version"], reply["adapter"], reply["recorded"]) == (0, "planner@v0", False)
    assert "not recorded" in reply["note"] and "no Kafka broker configured" in reply["note"]
    assert [v["version"] for v in versions.structured_content["result"]] == [0]
    # a 1 MB question: a clear error at once, and the server keeps answering
    assert big.is_error and "1,000,000 bytes" in big.content[0].text and "at most 8,192" in big.content[0].text
    assert took < 1.0
    assert not again.is_error and again.structured_content["version"] == 0
    assert fed.is_error and "cannot be recorded" in fed.content[0].text
    # said once, on stderr (stdout is the protocol: the session above would have broken on a stray line)
    assert stderr.count("NOT recorded") == 1, stderr[-3000:]
    assert "no Kafka broker configured" in stderr


def _adapter_v1(store_root: Path) -> R.AdapterPublished:
    from support.evaluator import adapter, announcement

    from streamgrpo.models import adapter_store as store

    path = store.version_dir(store_root, "planner", 1)
    path.mkdir(parents=True)
    return announcement(1, path, adapter(path))




def _register(home: Path, run_id: str, kafka: KafkaSettings, pid: int, started: float, model: Path) -> Path:
    """A run as `streamgrpo run` leaves it: its record in <home>/runs and its settings file (the run's defaults:
    <run dir>/adapters as the adapter store) in its run directory."""
    import tomllib

    from streamgrpo.cli.run import merge_run_defaults, to_toml

    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True)
    base = tomllib.loads(ROLLOUT.replace("[rollout]\n", f"[rollout]\nmodel = {str(model)!r}\n"))
    (run_dir / "streamgrpo.toml").write_text(to_toml(merge_run_defaults(base, run_dir=run_dir, home=home)))
    runs.register(home, runs.RunRecord(run_id, kafka.bootstrap or "", kafka.topic_prefix, str(run_dir), pid, started))
    return run_dir


@pytest.mark.broker
def test_beside_a_live_run_serve_serves_its_primary_from_the_run_store(
        kafka: KafkaSettings, tiny_model_dir: Path, tmp_path: Path, run_process: subprocess.Popen[bytes]) -> None:
    from streamgrpo.topics.admin import ensure

    home = tmp_path / "home"
    trained = kafka.model_copy(update={"topic_prefix": f"t{os.urandom(5).hex()}."})  # run A: v1 is its primary
    newest = kafka.model_copy(update={"topic_prefix": f"t{os.urandom(5).hex()}."})  # run B: the latest, no versions
    for ns in (trained, newest):
        ensure(ns)
    run_a = _register(home, "20260101-120000", trained, run_process.pid, time.time() - 60, tiny_model_dir)
    _register(home, "20260101-130000", newest, run_process.pid, time.time(), tiny_model_dir)
    with EventProducer(trained, "trainer") as producer:
        producer.send(_adapter_v1(run_a / "adapters"))
    assert not (home / "adapters").exists()  # <home>/adapters holds nothing: only the run's store has v1

    env = _bare_env(home)
    calls = [("solve", {"question": QUESTION}, 120), ("adapters", {}, 60)]
    (picked, _), (listed, _) = asyncio.run(_stdio(env, ["serve", "--run", "20260101-120000"], tmp_path / "a.log", calls))
    assert not picked.is_error, (picked.content, (tmp_path / "a.log").read_text()[-3000:])
    reply = picked.structured_content
    assert (reply["version"], reply["adapter"], reply["recorded"]) == (1, "planner@v1", True), reply
    assert "fallback" not in reply
    serving = [r for r in listed.structured_content["result"] if r["serving"]]
    assert [(r["version"], r["STATUS"]) for r in serving] == [(1, "PRIMARY")]
    done = [r.event for r in read_topic(trained, "rollouts") if isinstance(r.event, R.RolloutCompleted)]
    assert [(d.envelope.rollout_id, d.adapter_version, d.source) for d in done] == [
        (reply["rollout_id"], 1, "mcp:desktop")]

    ((latest, _),) = asyncio.run(_stdio(env, ["serve"], tmp_path / "b.log", calls[:1]))
    assert not latest.is_error, (latest.content, (tmp_path / "b.log").read_text()[-3000:])
    assert (latest.structured_content["version"], latest.structured_content["recorded"]) == (0, True)
    tasks = [r.event for r in read_topic(newest, "tasks") if isinstance(r.event, R.Task)]
    assert [t.source for t in tasks] == ["mcp:desktop"]  # recorded under the latest run's prefix
    assert "run 20260101-130000" in (tmp_path / "b.log").read_text()


def _post(url: str, headers: dict[str, str]) -> int:
    body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",' \
           b'"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}'
    request = urllib.request.Request(url, data=body, method="POST", headers={  # noqa: S310 - a local test server
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


async def _http_calls(url: str, token: str) -> dict[str, Any]:
    import httpx2
    from mcp import Client, Implementation
    from mcp.client.streamable_http import streamable_http_client

    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=120))
    out: dict[str, Any] = {}
    async with Client(transport, client_info=Implementation(name="alice", version="1")) as c:
        t0 = time.monotonic()
        out["big"] = await c.call_tool("solve", {"question": "x" * 1_000_000}, read_timeout_seconds=10)
        out["big_s"] = time.monotonic() - t0
        out["comment"] = await c.call_tool("feedback", {"rollout_id": "r", "score": 1.0, "comment": "y" * 100_000},
                                           read_timeout_seconds=10)
        done: dict[str, float] = {}

        async def one(i: int) -> None:
            out[f"solve{i}"] = await c.call_tool("solve", {"question": QUESTION}, read_timeout_seconds=120)
            done[f"solve{i}"] = time.monotonic() - t1

        async def listing() -> None:
            await asyncio.sleep(0.3)
            out["adapters"] = await c.call_tool("adapters", {}, read_timeout_seconds=30)
            done["adapters"] = time.monotonic() - t1

        t1 = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(SOLVES)), listing())
        out["done"] = done
    return out


def test_http_with_a_token_refuses_a_request_without_it(tiny_model_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    env = _bare_env(tmp_path / "home", STREAMGRPO_CONFIG=str(_config(tmp_path, tiny_model_dir)),
                    STREAMGRPO_SERVE__AUTH_TOKEN=TOKEN, STREAMGRPO_SERVE__MAX_CONCURRENT_SOLVES="1")
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", "serve", "--transport", "http",  # noqa: S603
                                 "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_http(url, 120)
        statuses = {"none": _post(url, {}), "wrong": _post(url, {"Authorization": "Bearer " + "x" * len(TOKEN)}),
                    "basic": _post(url, {"Authorization": f"Basic {TOKEN}"}),
                    "right": _post(url, {"Authorization": f"Bearer {TOKEN}"})}
        got = asyncio.run(_http_calls(url, TOKEN))
    finally:
        proc.terminate()
        proc.wait(30)
    text = log.read_text()
    assert statuses == {"none": 401, "wrong": 401, "basic": 401, "right": 200}, text[-3000:]
    assert got["big"].is_error and "at most 8,192" in got["big"].content[0].text and got["big_s"] < 1.0
    assert got["comment"].is_error and "`comment` is 100,000 bytes" in got["comment"].content[0].text
    solves = [got[f"solve{i}"] for i in range(SOLVES)]
    assert all(not s.is_error and s.structured_content["version"] == 0 for s in solves), [s.content for s in solves]
    # 16 solves at once, one at a time ([serve] max_concurrent_solves = 1): `adapters`, asked 0.3 s in, does not
    # queue behind them (on one shared thread limiter it would come after the solves asked before it)
    assert not got["adapters"].is_error
    before = sorted(name for name, t in got["done"].items() if name != "adapters" and t < got["done"]["adapters"])
    assert len(before) < SOLVES // 2, got["done"]
    assert TOKEN not in text and "bearer token required" in text


def test_a_finished_run_is_served_from_its_archive_unrecorded(tiny_model_dir: Path, tmp_path: Path) -> None:
    from streamgrpo.archive.schema import Place
    from streamgrpo.archive.store import ArchiveWriter

    home = tmp_path / "home"
    run_dir = _register(home, "20260101-090000", KafkaSettings(bootstrap="127.0.0.1:1"), 999_999_999,
                        time.time() - 60, tiny_model_dir)
    runs.mark_finished(home, "20260101-090000")
    writer = ArchiveWriter(run_dir / "archive")
    writer.add(_adapter_v1(run_dir / "adapters"), Place("adapter-events", 0, 0, b"planner", int(time.time() * 1000)))
    writer.flush()
    errlog = tmp_path / "stderr.log"
    (solved, _), (listed, _) = asyncio.run(_stdio(_bare_env(home), ["serve", "--run", "20260101-090000"], errlog,
                                                  [("solve", {"question": QUESTION}, 120), ("adapters", {}, 60)]))
    assert not solved.is_error, (solved.content, errlog.read_text()[-3000:])
    reply = solved.structured_content
    assert (reply["version"], reply["recorded"]) == (1, False) and "has finished" in reply["note"]
    assert [(r["version"], r["serving"]) for r in listed.structured_content["result"]] == [(0, False), (1, True)]
    assert errlog.read_text().count("NOT recorded") == 1


def test_a_primary_this_server_refused_is_not_waited_for(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The failure of the issue (v1 primary, its files not in this server's store: every solve waited, then failed),
    in-process with the real follower and policy: v1 is refused once, and every call is answered at once by the newest
    version below it, saying so."""
    from mcp import Client, Implementation
    from support.evaluator import adapter, announcement

    from streamgrpo.config import load
    from streamgrpo.rollout.adapters import AdapterFollower
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.runtime import build_context, build_policy
    from streamgrpo.serve.agent import ServeAgent
    from streamgrpo.serve.server import build_server

    cfg = load(RolloutConfig, "rollout", path=_config(tmp_path, tiny_model_dir),
               overrides={"max_turns": 1, "policy": "local", "service": "mcp"})
    policy = build_policy(cfg)
    elsewhere = tmp_path / "elsewhere" / "planner" / "v1"  # the run's store, not this server's
    elsewhere.mkdir(parents=True)
    follower = AdapterFollower(policy, adapter_name="planner", store_root=tmp_path / "store")
    follower.handle_batch([announcement(1, elsewhere, adapter(elsewhere))])
    assert follower.primary("planner") == 1 and [r.version for r in follower.refusals] == [1]
    server = build_server(ServeAgent(cfg, build_context(cfg, policy), follower=follower))

    async def calls() -> list[tuple[Any, float]]:
        async with Client(server, client_info=Implementation(name="alice", version="1")) as c:
            out = []
            for name in ("solve", "solve", "adapters"):
                t0 = time.monotonic()
                out.append((await c.call_tool(name, {"question": QUESTION} if name == "solve" else {}),
                            time.monotonic() - t0))
            return out

    (first, t1), (second, t2), (listed, _) = asyncio.run(calls())
    for reply, took in ((first, t1), (second, t2)):
        assert not reply.is_error, reply.content
        assert reply.structured_content["version"] == 0 and took < 5.0  # not version_wait_s, then an error
        assert "planner@v1 is the primary but this server refused to load it" in reply.structured_content["fallback"]
    assert listed.structured_content["result"][0]["serving"] is True  # v0 (no events: the base model line)
