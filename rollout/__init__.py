"""Rollout side of streamgrpo: the multi-agent loop that produces the planner's training data.

- :mod:`.loop`: one group's trajectories in lockstep (analyse -> (plan -> command -> execute ->
  verify)* -> answer), emitting PlannerAction / ToolObservation / Verdict / RolloutCompleted;
- :mod:`.roles`: planner (trained), executor, verifier, synthesiser, analyser; one prompt
  template + version hash each; model or model-free modes;
- :mod:`.structured`: strict parse / near-JSON repair / recorded failure of role outputs;
- :mod:`.tools`: calculator, python, knowledge search, wikipedia, generalist, MCP;
- :mod:`.adapters`: follow adapter-events, verify sha256, hot-swap;
- :mod:`.worker`, :mod:`.runtime`, :mod:`.config`, :mod:`.cli`: the ``streamgrpo rollout`` worker
  and ``streamgrpo ask``.

Beside it: :mod:`streamgrpo.inference` (the planner backends and the vLLM server) and
:mod:`streamgrpo.sandbox` (the python tool's jail).

Importing this package imports nothing heavy (torch loads only with a local policy).
"""
