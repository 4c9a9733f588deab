"""VLLMPolicy and OpenAITextModel against payloads captured from a real vLLM server, served over real HTTP
on 127.0.0.1 (fixtures: tests/fixtures/vllm/README.md). Here for what is fast and deterministic, and for
error paths a healthy server does not show (5xx, timeouts, a server restarting); the same behaviour
against the real server is in tests/integration/test_vllm_policy.py."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from streamgrpo.avro import records as R
from streamgrpo.inference.errors import (
    AdapterLoadError,
    AdapterNotResidentError,
    BackendUnavailableError,
    PolicyError,
)
from streamgrpo.inference.openai_text import OpenAITextModel
from streamgrpo.inference.stopping import JsonObjectEnd
from streamgrpo.inference.vllm import VLLMPolicy, request_seed

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm"
BASE = "smollm2-135m-instruct"  # the served name in the captured payloads


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def answer(name: str, delay_s: float = 0.0) -> tuple[int, Any, float]:
    """(status, json-or-text body, delay) to serve from a fixture file."""
    fx = fixture(name)
    if "response" in fx:
        return 200, fx["response"], delay_s
    return fx["status"], fx.get("body", fx.get("text")), delay_s


class FakeVLLM:
    """A tiny HTTP server: per path, a queue of answers (the last one repeats); records every request."""

    def __init__(self) -> None:
        self.routes: dict[str, list[tuple[int, Any, float]]] = {}
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                self._answer({})

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                self._answer(json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}"))

            def _answer(self, body: dict[str, Any]) -> None:
                owner.requests.append((self.path, body, {k.lower(): v for k, v in self.headers.items()}))
                queue = owner.routes.get(self.path) or [(404, {"detail": "Not Found"}, 0.0)]
                status, payload, delay = queue.pop(0) if len(queue) > 1 else queue[0]
                time.sleep(delay)
                raw = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain" if isinstance(payload, str) else "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def paths(self) -> list[str]:
        return [p for p, _, _ in self.requests]


@pytest.fixture()
def server() -> Iterator[FakeVLLM]:
    fake = FakeVLLM()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def policy(server: FakeVLLM, **kw: Any) -> VLLMPolicy:
    return VLLMPolicy(f"{server.url}/v1", kw.pop("model", BASE), SecretStr("sk-test-secret"),
                      timeout=kw.pop("timeout", 5.0), backoff_s=0.01, **kw)


def test_batched_completion_sends_token_ids_and_parses_token_ids_and_logprobs(server: FakeVLLM) -> None:
    fx = fixture("completions_batch")
    server.routes["/v1/load_lora_adapter"] = [answer("load_lora_adapter_ok")]
    server.routes["/v1/completions"] = [answer("completions_batch")]
    pol = policy(server)
    pol.load_adapter("planner", 1, Path("/store/planner/v1"))
    prompts = fx["request"]["prompt"]
    sampling = R.SamplingParams(temperature=0.7, top_p=1.0, max_new_tokens=8, seed=11)
    gens = pol.generate(prompts, sampling, adapter_name="planner", adapter_version=1)

    assert server.requests[0][1] == {"lora_name": "planner@v1", "lora_path": "/store/planner/v1"}
    path, sent, headers = server.requests[1]
    assert path == "/v1/completions" and sent == fx["request"]
    assert headers["authorization"] == "Bearer sk-test-secret"
    for gen, choice in zip(gens, fx["response"]["choices"], strict=True):
        assert gen.token_ids == [int(t.split(":")[1]) for t in choice["logprobs"]["tokens"]]
        assert gen.logprobs == choice["logprobs"]["token_logprobs"]
        assert gen.text == choice["text"] and gen.adapter_version == 1 and gen.adapter_name == "planner"
    assert [g.prompt_token_ids for g in gens] == prompts


def test_a_group_state_is_sent_once_with_n(server: FakeVLLM) -> None:
    fx = fixture("completions_group_n4")
    server.routes["/v1/completions"] = [answer("completions_group_n4")]
    prompt = fx["request"]["prompt"]
    gens = policy(server).generate([prompt] * 4, R.SamplingParams(temperature=1.0, max_new_tokens=4, seed=3),
                                   adapter_name="planner", adapter_version=0)
    assert len(server.requests) == 1 and server.requests[0][1] == fx["request"]  # model = base name for v0
    assert [len(g.token_ids) for g in gens] == [len(c["logprobs"]["tokens"]) for c in fx["response"]["choices"]]
    assert all(len(g.token_ids) == len(g.logprobs) for g in gens) and {g.engine for g in gens} == {"vllm"}


def test_unknown_adapter_is_refused_locally_and_a_404_is_a_clear_error(server: FakeVLLM) -> None:
    pol = policy(server)
    with pytest.raises(AdapterNotResidentError):
        pol.generate([[1, 2]], R.SamplingParams(), adapter_name="planner", adapter_version=9)
    assert server.requests == []  # refused before any HTTP call
    server.routes["/v1/load_lora_adapter"] = [answer("load_lora_adapter_ok")]
    server.routes["/v1/completions"] = [answer("error_404_unknown_model")]
    pol.load_adapter("planner", 9, Path("/store/planner/v9"))
    with pytest.raises(AdapterNotResidentError, match="does not exist"):
        pol.generate([[1, 2]], R.SamplingParams(), adapter_name="planner", adapter_version=9)


def test_500_is_retried_then_succeeds_or_gives_up(server: FakeVLLM) -> None:
    server.routes["/v1/completions"] = [answer("error_500_engine"), answer("error_500_engine"),
                                        answer("completions_group_n4")]
    prompt = fixture("completions_group_n4")["request"]["prompt"]
    gens = policy(server, max_retries=3).generate([prompt] * 4, R.SamplingParams(max_new_tokens=4),
                                                  adapter_name="planner", adapter_version=0)
    assert len(gens) == 4 and server.paths().count("/v1/completions") == 3
    server.routes["/v1/completions"] = [answer("error_500_engine")]
    server.requests.clear()
    with pytest.raises(BackendUnavailableError, match="EngineCore"):
        policy(server, max_retries=2).generate([prompt], R.SamplingParams(), adapter_name="p", adapter_version=0)
    assert server.paths().count("/v1/completions") == 3


def test_timeout_is_retried_then_reported(server: FakeVLLM) -> None:
    server.routes["/v1/completions"] = [answer("completions_group_n4", delay_s=1.0)]
    with pytest.raises(BackendUnavailableError, match="Timeout"):
        policy(server, timeout=0.2, max_retries=1).generate([[1, 2]], R.SamplingParams(), adapter_name="p",
                                                            adapter_version=0)
    assert server.paths().count("/v1/completions") == 2


def test_load_unload_and_eviction_over_http(server: FakeVLLM) -> None:
    server.routes["/v1/load_lora_adapter"] = [answer("load_lora_adapter_ok"), answer("error_400_already_loaded"),
                                              answer("load_lora_adapter_ok")]
    server.routes["/v1/unload_lora_adapter"] = [answer("unload_lora_adapter_ok")]
    pol = policy(server, keep_last=2)
    pol.load_adapter("planner", 1, Path("/s/v1"))
    pol.load_adapter("planner", 2, Path("/s/v2"))  # server already had it: still resident here
    pol.load_adapter("planner", 3, Path("/s/v3"))
    assert pol.resident_versions("planner") == [2, 3]
    assert server.requests[-1][0] == "/v1/unload_lora_adapter" and server.requests[-1][1] == {"lora_name": "planner@v1"}
    server.routes["/v1/load_lora_adapter"] = [answer("error_404_bad_lora_path")]
    with pytest.raises(AdapterLoadError, match="No adapter found"):
        pol.load_adapter("planner", 4, Path("/store/planner/v2"))
    assert pol.resident_versions("planner") == [2, 3]


def test_chat_prompt_uses_the_server_tokenizer(server: FakeVLLM) -> None:
    fx = fixture("tokenize_chat")
    server.routes["/tokenize"] = [answer("tokenize_chat")]
    ids = policy(server).chat_prompt(fx["request"]["messages"])
    assert ids == fx["response"]["tokens"] and server.requests[0][1] == fx["request"]


def test_tokens_without_token_id_prefix_are_a_clear_error(server: FakeVLLM) -> None:
    broken = fixture("completions_group_n4")["response"]
    for choice in broken["choices"]:
        choice["logprobs"]["tokens"] = ["Paris"] * len(choice["logprobs"]["tokens"])
    server.routes["/v1/completions"] = [(200, broken, 0.0)]
    with pytest.raises(PolicyError, match="return_tokens_as_token_ids"):
        policy(server).generate([[5]] * 4, R.SamplingParams(), adapter_name="p", adapter_version=0)


def test_openai_text_model_over_chat_completions(server: FakeVLLM) -> None:
    server.routes["/v1/chat/completions"] = [answer("chat_completion")]
    model = OpenAITextModel(f"{server.url}/v1", BASE, SecretStr("sk-role"), timeout=5.0, max_retries=0)
    text = model.complete([{"role": "user", "content": "2+2?"}], max_tokens=16, temperature=0.0)
    assert text == fixture("chat_completion")["response"]["choices"][0]["message"]["content"]
    path, sent, headers = server.requests[0]
    assert sent["model"] == BASE and sent["max_tokens"] == 16 and sent["messages"][0]["content"] == "2+2?"
    assert headers["authorization"] == "Bearer sk-role"
    server.routes["/v1/chat/completions"] = [answer("error_500_engine")]
    with pytest.raises(BackendUnavailableError):
        model.complete([{"role": "user", "content": "x"}], max_tokens=4, temperature=0.0)


def test_plain_string_key_and_local_tokenizer_are_accepted(server: FakeVLLM) -> None:
    from support.tiny_policy import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    pol = VLLMPolicy(f"{server.url}/v1", BASE, "sk-plain", timeout=5.0, tokenizer=tok)
    messages = [{"role": "user", "content": "hi"}]
    assert pol.chat_prompt(messages) == list(tok.apply_chat_template(messages, add_generation_prompt=True,
                                                                     tokenize=True)["input_ids"])
    assert server.requests == []  # no /tokenize round trip with a local tokenizer
    server.routes["/v1/completions"] = [answer("completions_group_n4")]
    pol.generate([[5]] * 4, R.SamplingParams(max_new_tokens=4), adapter_name="p", adapter_version=0)
    assert server.requests[0][2]["authorization"] == "Bearer sk-plain"


@pytest.fixture(scope="module")
def smollm2_tokenizer() -> Any:
    from streamgrpo.inference.vllm import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


@pytest.mark.model
def test_replies_are_cut_from_token_ids_not_from_vllms_text_offset(server: FakeVLLM, smollm2_tokenizer: Any) -> None:
    """The captured payload shows vLLM 0.32's text_offset counted over the "token_id:N" strings; the cut
    must (and does) come from the token ids decoded one by one."""
    fx = fixture("completions_planner_n8")
    choices = fx["response"]["choices"]
    assert any(c["logprobs"]["text_offset"][-1] > len(c["text"]) for c in choices)  # the server-side bug
    server.routes["/v1/completions"] = [answer("completions_planner_n8")]
    rule = JsonObjectEnd('{"')
    pol = policy(server, tokenizer=smollm2_tokenizer, dtype="float32")
    gens = pol.generate([fx["request"]["prompt"]] * 8, R.SamplingParams(temperature=0.7, max_new_tokens=64, seed=11),
                        adapter_name="planner", adapter_version=0, stop=rule)
    cut = 0
    for gen, choice in zip(gens, sorted(choices, key=lambda c: c["index"]), strict=True):
        ids = [int(t.split(":")[1]) for t in choice["logprobs"]["tokens"]]
        end = rule.end_of(choice["text"])
        assert gen.engine == "vllm/float32"
        if end is None:
            assert gen.token_ids == ids and gen.text == choice["text"]
            continue
        keep = len(gen.token_ids)
        assert gen.token_ids == ids[:keep] and gen.logprobs == choice["logprobs"]["token_logprobs"][:keep]
        assert choice["text"].startswith(gen.text) and rule.end_of(gen.text) == end  # closes where the reply did
        assert rule.end_of(smollm2_tokenizer.decode(ids[:keep - 1], skip_special_tokens=True)) is None  # shortest
        cut += keep < len(ids)
    assert cut >= 1


def test_without_a_local_tokenizer_replies_are_kept_whole(server: FakeVLLM) -> None:
    fx = fixture("completions_planner_n8")
    server.routes["/v1/completions"] = [answer("completions_planner_n8")]
    gens = policy(server).generate([fx["request"]["prompt"]] * 8, R.SamplingParams(max_new_tokens=64),
                                   adapter_name="planner", adapter_version=0, stop=JsonObjectEnd('{"'))
    assert [g.text for g in gens] == [c["text"] for c in sorted(fx["response"]["choices"], key=lambda c: c["index"])]


def test_an_adapter_the_server_lost_is_reloaded_from_its_path_once(server: FakeVLLM) -> None:
    server.routes["/v1/load_lora_adapter"] = [answer("load_lora_adapter_ok")]
    server.routes["/v1/completions"] = [answer("error_404_unknown_model"), answer("completions_group_n4")]
    pol = policy(server)
    pol.load_adapter("planner", 9, Path("/store/planner/v9"))
    prompt = fixture("completions_group_n4")["request"]["prompt"]
    gens = pol.generate([prompt] * 4, R.SamplingParams(max_new_tokens=4), adapter_name="planner", adapter_version=9)
    assert len(gens) == 4 and all(g.adapter_version == 9 for g in gens)
    assert server.paths() == ["/v1/load_lora_adapter", "/v1/completions", "/v1/load_lora_adapter", "/v1/completions"]
    assert server.requests[2][1] == {"lora_name": "planner@v9", "lora_path": "/store/planner/v9"}
    server.routes["/v1/completions"] = [answer("error_404_unknown_model")]  # still lost after the reload: an error
    with pytest.raises(AdapterNotResidentError):
        pol.generate([prompt], R.SamplingParams(max_new_tokens=4), adapter_name="planner", adapter_version=9)


def test_a_prompt_over_the_context_length_is_a_clear_error(server: FakeVLLM) -> None:
    server.routes["/v1/completions"] = [answer("error_400_context_length")]
    with pytest.raises(PolicyError, match="maximum context length"):
        policy(server).generate([[1] * 2100], R.SamplingParams(max_new_tokens=2), adapter_name="planner",
                                adapter_version=0)


def test_wait_ready_needs_health_and_the_served_model(server: FakeVLLM) -> None:
    models = {"object": "list", "data": [{"id": BASE, "object": "model"}]}
    server.routes["/health"] = [(503, {"detail": "loading"}, 0.0), (200, "", 0.0)]
    server.routes["/v1/models"] = [(200, {"object": "list", "data": []}, 0.0), (200, models, 0.0)]
    pol = policy(server)
    from streamgrpo.inference import vllm_server

    assert vllm_server.probe(pol.base_url, BASE) is not None  # 503 while loading
    assert vllm_server.probe(pol.base_url, BASE) is not None  # up, but not serving the model yet
    assert pol.wait_ready(timeout_s=30) >= 0 and pol.served_models() == [BASE]
    with pytest.raises(BackendUnavailableError, match="not ready"):
        policy(server, model="other").wait_ready(timeout_s=0.1)


def test_a_500_on_load_is_a_final_refusal_not_retried(server: FakeVLLM) -> None:
    """vLLM answers an adapter above --max-lora-rank with a 500 (captured); retrying cannot help."""
    server.routes["/v1/load_lora_adapter"] = [answer("error_500_lora_rank")]
    pol = policy(server, max_retries=3)
    with pytest.raises(AdapterLoadError, match="LoRA rank 32 is greater than max_lora_rank 16"):
        pol.load_adapter("planner", 3, Path("/store/planner/v3"))
    assert server.paths() == ["/v1/load_lora_adapter"] and pol.resident_versions("planner") == []
    server.routes["/v1/load_lora_adapter"] = [(503, {"detail": "busy"}, 0.0), answer("load_lora_adapter_ok")]
    pol.load_adapter("planner", 4, Path("/store/planner/v4"))  # a gateway error is retried
    assert pol.resident_versions("planner") == [4]


def test_row_seeds_become_one_seed_per_http_request_the_same_for_the_same_rows(server: FakeVLLM) -> None:
    """vLLM takes one seed per request: the rows' seeds are hashed into it (reproducible per call, not per row)."""
    fx = fixture("completions_group_n4")
    server.routes["/v1/completions"] = [answer("completions_group_n4")]
    prompt, pol = fx["request"]["prompt"], policy(server)
    sampling = R.SamplingParams(temperature=1.0, max_new_tokens=4)
    for seeds in ([11, 12, 13, 14], [11, 12, 13, 14], [11, 12, 13, 15]):
        pol.generate([prompt] * 4, sampling, adapter_name="planner", adapter_version=0, seeds=seeds)
    sent = [body for _, body, _ in server.requests]
    assert sent[0] == {**fx["request"], "seed": request_seed([11, 12, 13, 14])}
    assert sent[1]["seed"] == sent[0]["seed"] != sent[2]["seed"]
    with pytest.raises(PolicyError, match="3 seeds for 4 prompts"):
        pol.generate([prompt] * 4, sampling, adapter_name="planner", adapter_version=0, seeds=[1, 2, 3])
