"""The judgement: what the measurements say, and the fix for the stack the user runs.

Owns: :mod:`rules` (facts from the probes and trials -> the regime, the verdict and
the recommendations, each backed by a measured number or saying it was not measured),
:mod:`snippets` (the code or command per stack: safetensors, transformers, diffusers,
vLLM, SGLang, the shell, each tied to the trial of that code).
May import: ``loadscope.engine`` (its report types), ``loadscope.actions`` (theirs),
``loadscope.model``, ``loadscope.base``.
"""
