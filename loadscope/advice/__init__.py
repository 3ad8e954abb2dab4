"""The judgement: what the measurements say, and the fix for the stack the user runs.

Owns: :mod:`facts` (what the rules read, taken once from the probes and trials),
:mod:`results` (the verdict, recommendations and evidence, the thresholds, the
helpers the rules share), the rules by what they change — :mod:`storage_rules`
(readahead, WSL drive, a stalled read), :mod:`load_rules` (parallel, whole-file,
staged and broadcast reads), :mod:`placement_rules` (prewarm, copy to a local
disk), :mod:`memory_format_rules` (memory fit, pickles) — and :mod:`rules` (the
entry point: every rule run, the fixes ranked, the regime and the verdict, each
fix backed by a measured number or saying it was not measured);
:mod:`snippets` (the code or command per stack: safetensors, transformers, diffusers,
vLLM, SGLang, the shell, each tied to the trial of that code).
May import: ``loadscope.engine`` (its report types), ``loadscope.actions`` (theirs),
``loadscope.model``, ``loadscope.loaders`` (the strategies' declarations: their routes
and roles), ``loadscope.base``.
"""
