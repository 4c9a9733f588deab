"""Rollout side of streamgrpo: the multi-agent loop that produces the planner's training data.

- :mod:`.loop`: one group's trajectories in lockstep (analyse -> (plan -> command -> execute ->
  verify)* -> answer), emitting PlannerAction / ToolObservation / Verdict / RolloutCompleted;
- :mod:`.roles`: planner (trained), executor, verifier, synthesiser, analyser; one prompt
  template + version hash each; model or model-free modes;
- :mod:`.structured`: strict parse / near-JSON repair / recorded failure of role outputs;
- :mod:`.policy`: planner backends (in-process transformers, vLLM) and the role text models;
- :mod:`.tools`: calculator, python sandbox, knowledge search, wikipedia, generalist;
- :mod:`.adapters`: follow adapter-events, verify sha256, hot-swap;
- :mod:`.worker`, :mod:`.runtime`, :mod:`.config`, :mod:`.cli`: the ``streamgrpo rollout`` worker
  and ``streamgrpo ask``.

Importing this package imports nothing heavy (torch loads only with a local policy).
"""
