"""Will speculation pay off here, and with which settings? Cost model, profiler and planner.

- :mod:`~draftlab.cost.model`: the cycle-time formulas (pure);
- :mod:`~draftlab.cost.engine_numbers`: solve them from numbers read off an engine, what-ifs;
- :mod:`~draftlab.cost.timing`: the measurement harness (wall clock, device synchronized);
  :mod:`~draftlab.cost.measurement` holds its results (pure data, read by the planner without torch);
- :mod:`~draftlab.cost.profiler`, :mod:`~draftlab.cost.runtime_workload`: time the reference runtime's passes;
- :mod:`~draftlab.cost.overhead`: the decoder's own per-cycle work, from its real cycles less their passes;
- :mod:`~draftlab.cost.allreduce`: tensor-parallel all-reduce latency over P processes;
- :mod:`~draftlab.cost.profile`: PROFILE.json and the cost curves read from it;
- :mod:`~draftlab.cost.probes`: accept lengths from probe results;
- :mod:`~draftlab.cost.plan`, :mod:`~draftlab.cost.plot`: predictions, best config, verdict, PNG;
- :mod:`~draftlab.cost.auto_plan`: probe, profile and plan a target/drafter pair in one call.
"""
