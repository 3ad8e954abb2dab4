"""The fixes loadscope applies itself; they read the model and never modify it.

Owns: :mod:`warm` (the page cache filled by parallel large reads, or evicted, verified;
``--lock`` keeps it resident), :mod:`localcopy` (a verified, resumable copy to a local
disk, under temporary names renamed when complete).
May import: ``loadscope.model``, ``loadscope.loaders``, ``loadscope.probes``,
``loadscope.base``.
"""
