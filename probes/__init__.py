"""Storage and system probes (``loadscope.probes``): each one job, a time budget, a typed result.

Owns: what the machine is and how its storage behaves (mounts and filesystem types,
the block-device chain, readahead, cold latency, throughput by block size and
parallelism, the I/O sizes the kernel issues, page-cache residency and eviction, RAM
and the cgroup limit, GPUs, the Hugging Face cache). A probe that cannot measure says
*unavailable* and why. The probe contract (``spec.py``: what a probe declares so every
output shows it) and the registry of declared probes (``registry.py``: the GPU probe's,
a user's own from ``$LOADSCOPE_PROBE_MODULES``).
May import: ``loadscope.base`` only; never the loaders, the core or Textual.
"""
