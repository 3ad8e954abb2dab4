"""The run engine: what is measured, and how.

Owns: :mod:`probing` (the storage probes run within a budget, one report), :mod:`sampling`
(which bytes a sampled trial reads, and the fit that extrapolates it), :mod:`planning`
(the one budget planner: rounds and sample sizes from a cost model), :mod:`trials` (what
both trial runners share: the interleaved plan, reference digests, exit reasons, process
kills, medians and speed-ups), :mod:`bench`
(trials in isolated workers, cold verified and warm, medians and summaries),
:mod:`broadcast` (multi-rank trials through torch.distributed), :mod:`profiler`
(py-spy on a running trial).
May import: ``loadscope.model``, ``loadscope.loaders``, ``loadscope.probes``,
``loadscope.base``. Never Textual, never the judgement or the outputs above it.
"""
