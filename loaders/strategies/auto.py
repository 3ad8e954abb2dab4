"""``auto``: loadscope's fast path — map what is resident, read the rest deep and large.

Per file (the decision and the reads: ``loaders/autoread.py``, which the public API
runs too): when the page cache already holds the file, map it (``load_file``:
zero-copy beats every copy warm); when it is cold, issue deep-parallel large
requests — O_DIRECT where the filesystem allows it, buffered ``pread`` threads
otherwise — with the thread count and block size the parallel-scaling probe
found best (passed in as hints) unless knobs override them. A cold file that
would not fit in the memory this process may use (RAM, or the cgroup limit) is
mapped instead. Every choice and its reason are recorded in the trial.
"""

from __future__ import annotations

from loadscope.loaders import autoread, strategy


class Auto(strategy.Strategy):
    name = "auto"
    summary = "map resident files; deep-parallel large reads (O_DIRECT when possible) when cold"
    requires = strategy.Requirements(ram_multiple=1.0)
    tuned = True  # the probe's best readers where no knob is given
    doctor_order = 20
    warm_trial = True
    reads = "deep"
    knobs = autoread.KNOBS

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        read = autoread.settings(ctx.knobs, ctx.hints)
        choices = ctx.notes.setdefault("choices", [])
        for f in files:
            choice = autoread.choose(f, read)
            choices.append(choice.note())
            yield from autoread.load(f, choice, read)
