"""The model a user names: resolved to weight files and checked before anything reads it.

Owns: :mod:`targets` (a path, a sharded index, an ``org/name`` in the Hugging Face cache,
a ``synthetic:`` spec -> the files), :mod:`weightfiles` (what a weight file and an index
are, the index parser, the errors), :mod:`twins` (the same model in the other format
beside it), :mod:`inspection` (every header checked, the shards
against each other and the index; what the checkpoint holds).
May import: ``loadscope.tools.synth`` (synthetic targets), ``loadscope.loaders`` (the
format readers), ``loadscope.probes``, ``loadscope.base``.
"""
