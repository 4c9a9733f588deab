"""Loop logic with a deterministic scripted planner policy (a real PlannerPolicy subclass) and real tools."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.avro.codec import Codec
from streamgrpo.inference.base import Generation, PlannerPolicy
from streamgrpo.inference.errors import PolicyError
from streamgrpo.inference.stopping import JsonObjectEnd
from streamgrpo.rollout.loop import LoopContext, run_group
from streamgrpo.rollout.roles import planner
from streamgrpo.rollout.tools.calculator import Calculator


class ScriptedPolicy(PlannerPolicy):
    """Returns fixed texts: ``scripts[i][turn-1]`` for the i-th prompt of each call (by position)."""

    def __init__(self, scripts: list[list[str]], served_version: int | None = None, fail_at_call: int | None = None):
        super().__init__()
        self.scripts = scripts
        self.calls: list[int] = []  # batch size of each generate call
        self.served_version = served_version
        self.fail_at_call = fail_at_call
        self._turn_of: dict[int, int] = {}
        self.prompts: list[list[list[int]]] = []
        self.stops: list[object] = []  # the stop rule of each generate call

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        text = "\n".join(m["content"] for m in messages)
        return [ord(c) % 50000 for c in text]

    def generate(self, prompts, sampling, *, adapter_name, adapter_version, stop=None):
        if self.fail_at_call is not None and len(self.calls) == self.fail_at_call:
            raise PolicyError("scripted failure")
        turn = len(self.calls)
        self.calls.append(len(prompts))
        self.prompts.append(prompts)
        self.stops.append(stop)
        out = []
        for i, prompt in enumerate(prompts):
            slot = self._active_slots(turn)[i]
            text = self.scripts[slot][turn]
            ids = [ord(c) for c in text]
            out.append(Generation(prompt_token_ids=prompt, text=text, token_ids=ids,
                                  logprobs=[-0.5] * len(ids), adapter_name=adapter_name,
                                  adapter_version=self.served_version if self.served_version is not None
                                  else adapter_version, latency_ms=3))
        return out

    def _active_slots(self, turn: int) -> list[int]:
        return [i for i, s in enumerate(self.scripts) if len(s) > turn]

    def load_adapter(self, adapter_name, version, path: Path) -> None:  # pragma: no cover - unused
        raise NotImplementedError

    def unload_adapter(self, adapter_name, version) -> None:  # pragma: no cover - unused
        raise NotImplementedError

    def resident_versions(self, adapter_name):
        return []


def requests(n: int, max_turns: int = 3, version: int = 2, question: str = "What is 12 squared?"):
    out = []
    for i in range(n):
        env = R.Envelope.new("test", task_id="task-1", group_id="group-1", rollout_id=f"ro-{i}")
        out.append(R.RolloutRequest(envelope=env, question=question, source="test", rollout_index=i, group_size=n,
                                    adapter_name="planner", adapter_version=version, max_turns=max_turns,
                                    sampling=R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=48)))
    return out


def run(scripts, n_turns=3, **policy_kw):
    policy = ScriptedPolicy(scripts, **policy_kw)
    events: list[R.Event] = []
    ctx = LoopContext(policy=policy, tools={"calculator": Calculator()})
    result = run_group(requests(len(scripts), n_turns), ctx, events.append)
    return policy, events, result


def of(events, cls, rollout_id=None):
    return [e for e in events if isinstance(e, cls) and (rollout_id is None or e.envelope.rollout_id == rollout_id)]


def test_lockstep_batches_active_trajectories_and_emits_all_events():
    scripts = [
        ['{"answer": "144"}'],                                                   # answers at once
        ['{"tool": "calculator", "input": "12**2"}', '{"answer": "144"}'],       # tool then answer
        ['{"tool": "calculator", "input": "12*12"}', "no json here", '{"answer": "x"}'],
        ['{"tool": "calculator", "input": "1/0"}', '{"tool": "calculator", "input": "2+2"}', "garbage"],
    ]
    policy, events, result = run(scripts)
    assert policy.calls == [4, 3, 2]  # one generate per turn with every active trajectory
    assert policy.prompts[0][0] == policy.prompts[0][3]  # turn 1: shared state
    by_id = {r.rollout_id: r for r in result.results}
    assert by_id["ro-0"].status is R.RolloutStatus.ANSWERED and by_id["ro-0"].final_answer == "144"
    assert by_id["ro-1"].status is R.RolloutStatus.ANSWERED and by_id["ro-1"].turns == 2
    assert by_id["ro-2"].status is R.RolloutStatus.ANSWERED and by_id["ro-2"].turns == 3
    assert by_id["ro-3"].status is R.RolloutStatus.MAX_TURNS
    assert by_id["ro-3"].final_answer == ""  # never answered: no tool output is handed in as its answer
    assert by_id["ro-3"].tool_calls == {"calculator": 2}
    for i, script in enumerate(scripts):
        rid = f"ro-{i}"
        actions = of(events, R.PlannerAction, rid)
        assert [a.envelope.turn for a in actions] == list(range(1, len(script) + 1))
        assert all(len(a.action_token_ids) == len(a.behaviour_logprobs) > 0 for a in actions)
        assert all(a.prompt_hash == planner.PROMPT_HASH and a.adapter_version == 2 for a in actions)
        assert all(a.role == planner.ROLE == "planner" for a in actions)  # the agent role (contract v4)
        assert len(of(events, R.Verdict, rid)) == len(script)
        done = of(events, R.RolloutCompleted, rid)
        assert len(done) == 1 and done[0].envelope.group_id == "group-1" and done[0].envelope.task_id == "task-1"
    statuses = Counter(a.parse_status for a in of(events, R.PlannerAction))
    assert statuses[R.ParseStatus.FAILED] == 2
    obs = of(events, R.ToolObservation, "ro-3")
    assert obs[0].error and "zero" in obs[0].error.lower() and obs[1].output.strip() == "4"
    assert all(o.executor_mode == "passthrough" for o in of(events, R.ToolObservation))
    assert of(events, R.PlannerAction, "ro-0")[0].is_final
    # every event survives real Avro encoding
    codec = Codec()
    for e in events:
        assert codec.decode(codec.encode(e)) == e


def test_event_ids_are_deterministic_across_redelivery():
    scripts = [['{"tool": "calculator", "input": "3*3"}', '{"answer": "9"}']] * 2
    _, first, _ = run(scripts)
    _, second, _ = run(scripts)
    assert [e.event_id for e in first] == [e.event_id for e in second]
    assert len({e.event_id for e in first}) == len(first)
    action = of(first, R.PlannerAction, "ro-1")[1]
    assert action.event_id == ids.derived_id("planner_action", "ro-1", 2)
    assert of(first, R.RolloutCompleted, "ro-0")[0].event_id == ids.derived_id("rollout_completed", "ro-0")


def test_policy_failure_ends_active_rollouts_as_error_with_reason():
    scripts = [['{"answer": "1"}', '{"answer": "2"}'], ['{"tool": "calculator", "input": "1+1"}', '{"answer": "2"}']]
    _, events, result = run(scripts, fail_at_call=1)
    by_id = {r.rollout_id: r for r in result.results}
    assert by_id["ro-0"].status is R.RolloutStatus.ANSWERED
    assert by_id["ro-1"].status is R.RolloutStatus.ERROR and "scripted failure" in (by_id["ro-1"].error or "")
    done = of(events, R.RolloutCompleted, "ro-1")
    assert len(done) == 1 and done[0].status is R.RolloutStatus.ERROR and done[0].final_answer == ""


def test_unknown_tool_is_observed_not_crashed_and_served_version_recorded():
    scripts = [['{"tool": "teleport", "input": "mars"}', '{"answer": "no"}']]
    _, events, result = run(scripts, served_version=1)
    obs = of(events, R.ToolObservation)
    assert obs[0].tool == "teleport" and "unknown tool" in (obs[0].error or "")
    assert {a.adapter_version for a in of(events, R.PlannerAction)} == {1}  # what actually served
    assert of(events, R.RolloutCompleted)[0].adapter_version == 1
    assert result.results[0].tool_calls == {"teleport": 1}


def test_prompt_stays_within_budget_by_dropping_old_steps():
    long_calls = ['{"tool": "calculator", "input": "' + "+".join(["1"] * 30) + '"}'] * 5
    policy = ScriptedPolicy([long_calls + ['{"answer": "30"}']])
    ctx = LoopContext(policy=policy, tools={"calculator": Calculator()}, max_prompt_tokens=900)
    events: list[R.Event] = []
    run_group(requests(1, max_turns=6), ctx, events.append)
    assert all(len(p[0]) <= 900 for p in policy.prompts)
    assert len(policy.prompts) == 6


@pytest.mark.parametrize("max_turns", [1, 2])
def test_max_turns_is_enforced(max_turns):
    scripts = [['{"tool": "calculator", "input": "1+1"}'] * 3]
    policy = ScriptedPolicy(scripts)
    events: list[R.Event] = []
    result = run_group(requests(1, max_turns=max_turns), LoopContext(policy=policy, tools={"calculator": Calculator()}),
                       events.append)
    assert result.results[0].status is R.RolloutStatus.MAX_TURNS and result.results[0].turns == max_turns
    assert len(of(events, R.PlannerAction)) == max_turns


def test_response_prefix_is_part_of_the_state_and_of_the_parsed_text():
    from support.tiny_policy import build_tiny_tokenizer

    policy = ScriptedPolicy([['tool": "calculator", "input": "2+2"}', 'answer": "4"}']])
    policy.tokenizer = build_tiny_tokenizer()
    ctx = LoopContext(policy=policy, tools={"calculator": Calculator()}, response_prefix='{"')
    events: list[R.Event] = []
    result = run_group(requests(1), ctx, events.append)
    prefix_ids = policy.tokenizer.encode('{"', add_special_tokens=False)
    assert len(prefix_ids) == 2 and all(p[0][-2:] == prefix_ids for p in policy.prompts)
    actions = of(events, R.PlannerAction)
    assert [a.parse_status for a in actions] == [R.ParseStatus.STRICT, R.ParseStatus.STRICT]
    assert actions[0].action_text.startswith('tool"') and actions[0].prompt_token_ids[-2:] == prefix_ids
    assert result.results[0].final_answer == "4"
    assert policy.stops == [JsonObjectEnd('{"')] * 2  # replies end where the object opened by the prefix closes
    # without a tokenizer the prefix cannot be forced, so it is not assumed when parsing
    plain = ScriptedPolicy([['tool": "calculator", "input": "2+2"}']])
    _ = run_group(requests(1, max_turns=1), LoopContext(policy=plain, tools={"calculator": Calculator()},
                                                        response_prefix='{"'), events.append)
    last_action = of(events, R.PlannerAction)[-1]
    assert last_action.envelope.turn == 1 and last_action.parse_status is R.ParseStatus.FAILED
    assert plain.stops == [JsonObjectEnd("")]  # no forced prefix: the reply's own first '{' opens the object
    off = ScriptedPolicy([['answer": "4"}']])
    run_group(requests(1, max_turns=1), LoopContext(policy=off, tools={}, stop_at_json_end=False), events.append)
    assert off.stops == [None]


class _Sink:
    def __init__(self) -> None:
        self.events: list[R.Event] = []

    def send(self, event: R.Event) -> None:
        self.events.append(event)

    def flush(self) -> None:
        pass


def _worker(policy: PlannerPolicy, sink: _Sink, config_max_turns: int = 2):
    from streamgrpo.config import KafkaSettings
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.worker import RolloutWorker

    ctx = LoopContext(policy=policy, tools={"calculator": Calculator()})
    return RolloutWorker(RolloutConfig(max_turns=config_max_turns, follow_adapters=False), KafkaSettings(), ctx, sink)


def test_the_worker_honours_a_requests_turn_budget_beyond_its_own_setting():
    """Regression: the worker used to cut a request's max_turns to its own [rollout] max_turns silently."""
    script = ['{"tool": "calculator", "input": "1+1"}'] * 5 + ['{"answer": "2"}']
    sink = _Sink()
    results = _worker(ScriptedPolicy([script], served_version=0), sink).run_group_sync(requests(1, 6, version=0))
    assert results[0].status is R.RolloutStatus.ANSWERED and results[0].turns == 6
    assert len(of(sink.events, R.PlannerAction)) == 6


def test_a_request_beyond_the_hard_turn_limit_ends_as_error_with_a_reason():
    sink = _Sink()
    policy = ScriptedPolicy([['{"answer": "2"}']], served_version=0)
    results = _worker(policy, sink).run_group_sync(requests(1, 10_000, version=0))
    assert results[0].status is R.RolloutStatus.ERROR and policy.calls == []
    (done,) = of(sink.events, R.RolloutCompleted)
    assert done.status is R.RolloutStatus.ERROR and "hard safety limit" in (done.error or "")


def test_the_recorded_prompt_hash_is_the_hash_of_the_example_the_prompt_showed():
    """[rollout] planner_examples = "analysis": an archive question's prompt shows the knowledge_search example, and
    every PlannerAction records that example's hash (the trainer and `analyse` group prompts by it)."""
    from streamgrpo.rollout.tools.knowledge_search import KnowledgeSearch
    from streamgrpo.tasks.builtin import builtin_corpus

    tools = {"calculator": Calculator(), "knowledge_search": KnowledgeSearch(builtin_corpus())}
    question = "According to the archive, what is the capital of the Kingdom of Iskavel?"
    for mode, key in (("analysis", "knowledge_search"), ("fixed", "calculator")):
        policy = ScriptedPolicy([['{"tool": "knowledge_search", "input": "capital of Iskavel"}', '{"answer": "x"}']])
        events: list[R.Event] = []
        ctx = LoopContext(policy=policy, tools=tools, planner_examples=mode)
        run_group(requests(1, 3, question=question), ctx, events.append)
        actions = of(events, R.PlannerAction)
        assert len(actions) == 2 and {a.prompt_hash for a in actions} == {planner.EXAMPLE_HASHES[key]}
        shown = "".join(chr(c) for c in policy.prompts[0][0])
        assert ("capital of the Kingdom of Velmora" in shown) is (key == "knowledge_search")
