"""The test bench loadscope builds for itself: synthetic checkpoints and slow disks.

Owns: :mod:`synth` (deterministic checkpoints shaped like a decoder LLM), :mod:`emulator`
(a FUSE mount with a latency per request, a bandwidth cap and faults: the client side and
the public names; its server in :mod:`fuseserver`, its mounts' recognition and removal in
:mod:`emumounts`, its settings and checks in :mod:`emucommon`), :mod:`blockemu`
(ext4 on a loop device whose image sits on that slow disk: a network block volume).
May import: ``loadscope.loaders``, ``loadscope.probes``, ``loadscope.base``; nothing above.
"""
