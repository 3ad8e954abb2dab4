"""The fixes loadscope applies itself; they read the model and never modify it.

Owns: :mod:`warm` (the page cache filled by parallel large reads, or evicted, verified;
``--lock`` keeps it resident), :mod:`localcopy` (a verified, resumable copy to a local
disk, under temporary names renamed when complete; :mod:`blockcopy` copies one file's
blocks and reads them back), :mod:`convert` (a sample of a pickle
converted to safetensors in a folder it makes and removes, to measure the gain),
:mod:`throughput` (the rate and timing fields the results of warm and copy share).
May import: ``loadscope.model``, ``loadscope.loaders``, ``loadscope.probes``,
``loadscope.base``.
"""
