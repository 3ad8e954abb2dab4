"""The run engine: what is measured, and how.

Owns: :mod:`probing` (the storage probes run within a budget, one report), :mod:`sampling`
(which bytes a sampled trial reads, and the fit that extrapolates it), :mod:`planning`
(the one budget planner: rounds and sample sizes from a cost model), :mod:`trials` (what
both trial runners share: the interleaved plan, reference digests and their check, exit
reasons, process kills, the memory refusal, medians and speed-ups), :mod:`children` (how
both start a child and read its pipes), :mod:`supervise` (the one loop that watches
both runners' children: cancel, limits, exits, reaping), :mod:`summaries` (both runners' summaries);
``bench``, one trial per isolated worker: :mod:`bench` (the run), :mod:`trial_run` (one
trial), :mod:`sampled` (a sampled run's pilot, scopes and fit), :mod:`bench_records`;
``bench --ranks``, one launch of N ranks through torch.distributed: :mod:`broadcast` (the
run), :mod:`rank_launch` (the launch), :mod:`rank_records`; :mod:`profiler` (py-spy on a
running trial). No presentation: the probe's, the trials' and the ranks' text and tables
are ``loadscope.report``'s (``probe_text``, ``bench_text``, ``rank_text``).
May import: ``loadscope.model``, ``loadscope.loaders``, ``loadscope.probes``,
``loadscope.base``. Never Textual, never the judgement or the outputs above it.
"""
