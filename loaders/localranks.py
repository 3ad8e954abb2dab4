"""Which local rank of which job this process loads as: from torchrun's, SLURM's or the
caller's word, or None (one process, or node sharing turned off).

Apart from the node-shared read itself (:mod:`loadscope.loaders.nodeshare`), which a
single process never needs: the public API asks this on every load and imports the
sharing only where there are ranks to share with.

May import: the standard library.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LocalRanks:
    """This process's place among the local ranks of one job."""

    rank: int
    world: int
    #: What tells one job's ranks from another's on the same node.
    job: str


def local_ranks(
    explicit: tuple[int, int] | None = None, env: Mapping[str, str] | None = None
) -> LocalRanks | None:
    """The local ranks this process loads with, or None (one process, or sharing off)."""
    env = os.environ if env is None else env
    if env.get("LOADSCOPE_NODE_SHARE", "") == "0":
        return None
    job = (
        env.get("TORCHELASTIC_RUN_ID")
        or ":".join(filter(None, (env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID"))))
        or ":".join(filter(None, (env.get("MASTER_ADDR"), env.get("MASTER_PORT"))))
        or f"ppid-{os.getppid()}"
    )
    if explicit is not None:
        rank, world = explicit
    elif "LOCAL_RANK" in env and "LOCAL_WORLD_SIZE" in env:
        rank, world = _int(env["LOCAL_RANK"]), _int(env["LOCAL_WORLD_SIZE"])
    elif "SLURM_LOCALID" in env:
        rank = _int(env["SLURM_LOCALID"])
        # "4" or "4(x2)": tasks on each of the step's nodes.
        per = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_STEP_TASKS_PER_NODE") or ""
        world = _int(re.split(r"[(,]", per)[0]) if per else -1
    else:
        return None
    if world < 2 or not 0 <= rank < world:
        return None
    return LocalRanks(rank, world, job)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1
