"""Loader strategies and the checkpoint formats they read (``loadscope.loaders``).

Owns: the safetensors header parser and torch archive reader (neither imports torch
nor safetensors), the strategy contract (``strategy.py``), each strategy as one module
declaring its knobs, its role in the doctor's plan and the stack routes it stands for
(``strategies/``; the code those routes share in ``stack_code.py``), the byte spans a
request covers and tensors built from a buffer of them (``buffers.py``), the worker and
fork server that run a trial in isolation, a trial's page-cache state set up and verified
(``cachestate.py``, for ``bench`` and rank 0 alike), and the public loader API's engine
(``api.py``).
May import: ``loadscope.probes`` (residency, memory headroom) and ``loadscope.base``;
never the core above it or Textual.
"""
