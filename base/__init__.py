"""The base every layer stands on: the error hierarchy and exit codes, safe I/O, units.

Owns: :mod:`errors` (``LoadscopeError`` and its kinds, each with its exit code),
:mod:`safeio` (bounded reads that refuse FIFOs and devices, stall detection), :mod:`units`
(sizes, rates, durations), :mod:`tempdirs` (temporary folders named by their owner, reaped
once it is gone), :mod:`processes` (child processes in a session of their own), :mod:`memory`
(fresh private memory to read into), :mod:`plugins` (the modules a user names to add a
strategy or a probe), ``_version``.
May import: the standard library only. Everything else in loadscope may import it.
Installed as ``loadscope.base`` (the ``base/`` folder at the repository root).
"""
