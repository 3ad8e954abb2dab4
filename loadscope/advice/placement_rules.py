"""Rules that move the bytes closer before the load: prewarm the page cache, copy locally.

These are the two fixes loadscope's own apply carries out (``loadscope warm``,
``loadscope copy``), so each names its source and destination in ``apply``. The
copy's gain is estimated, not trialled (the copy does not exist yet):
:class:`CopyEstimate` holds the estimate, its cost and its break-even, and
:func:`copy_destination` the folder a copy goes to, which the app's apply dialog
uses too.
May import: :mod:`loadscope.advice.facts`, :mod:`loadscope.advice.results`,
:mod:`loadscope.advice.snippets`, ``loadscope.loaders.strategies``,
``loadscope.probes.localdisk``, ``loadscope.base``.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass

from loadscope.advice.facts import Facts
from loadscope.advice.results import WORTH_IT, Evidence, Recommendation, ids_of
from loadscope.advice.snippets import Snippet, commands, fix_snippets, offered
from loadscope.base import fix_ids
from loadscope.base.units import format_bytes, format_rate
from loadscope.loaders.strategies import DEFAULT
from loadscope.probes.localdisk import LocalDiskFacts


def rule_prewarm(f: Facts) -> list[Recommendation]:
    """Prewarm the page cache when loads repeat, RAM holds the model and warm is much faster."""
    cold, warm = f.seconds(DEFAULT), f.seconds(DEFAULT, "warm")
    if not cold or not warm or cold / warm < 3:
        return []
    if f.headroom_bytes is not None and f.model_bytes > f.headroom_bytes:
        return []
    return [
        Recommendation(
            id=fix_ids.PREWARM,
            title="Prewarm the page cache before loads that repeat",
            action=f"a warm load took {warm:.3g} s vs {cold:.3g} s cold ({cold / warm:.0f}x):"
            " read the files once ahead of time (the page cache decays, so shortly before)",
            evidence=[
                Evidence(f"{DEFAULT} warm", warm, "s", ids_of(f, (DEFAULT, "warm"))),
                Evidence(f"{DEFAULT} cold", cold, "s", ids_of(f, (DEFAULT, "cold"))),
            ],
            ram_bytes_needed=f.model_bytes,
            risk="page cache is shared and reclaimable: other memory pressure evicts it",
            confidence="medium",
            snippets=offered(fix_snippets(fix_ids.PREWARM, f))[0] + _torch_warm(f),
            apply={"kind": "warm", "source": f.model_path},
            optional=True,
        )
    ]


def _torch_warm(f: Facts) -> list[Snippet]:
    """For a torch model whose safetensors sit beside it: the stacks' lines warm the
    safetensors (what the HF stacks read); a script that keeps ``torch.load`` reads the
    torch files, so it gets its own line naming them (issue 41)."""
    if not f.safetensors_beside or not f.torch_files:
        return []
    if f.torch_index:
        target = os.path.join(f.model_root, f.torch_index)
    elif len(f.torch_files) == 1:
        target = os.path.join(f.model_root, f.torch_files[0])
    else:
        return []  # loose torch files: no one name loads just them
    return commands(
        [
            (
                "torch.load",
                f"loadscope warm {shlex.quote(target)}"
                "   # a script that keeps torch.load reads the torch files; the lines above"
                " warm the safetensors the HF stacks read",
            )
        ]
    )


def copy_destination(directory: str, model_root: str) -> str:
    """Where a copy to the local disk ``directory`` goes: one folder per model under
    ``loadscope-copies`` (the advice's snippet and the app's apply dialog agree)."""
    name = os.path.basename(model_root.rstrip("/")) or "model"
    return f"{directory.rstrip('/')}/loadscope-copies/{name}"


@dataclass(frozen=True, slots=True)
class CopyEstimate:
    """A copy to the local disk: its estimated cold load, what it costs and repays."""

    disk: LocalDiskFacts
    #: The default load here, cold, and the estimated cold load on the local disk.
    mmap_s: float
    local_s: float
    gain: float
    #: The fastest strategy measured in place, and its cold time.
    best_name: str
    best_s: float
    copy_s: float
    #: Cold loads after which the copy has paid for itself.
    break_even: int
    beats_in_place: bool
    #: The rate ``loadscope copy`` is expected to read the source at, and what it rests on.
    read_bytes_per_s: float
    read_basis: str


def copy_read_rate(f: Facts) -> tuple[float, str] | None:
    """The rate ``loadscope copy`` reads the source at, and what that rests on.

    Copy reads as ``auto`` reads a cold file (many large requests in flight, O_DIRECT
    where allowed), so the probe's measured read rate of this storage stands for it;
    without one, the fastest cold load measured here (a load reads the same bytes).
    None when neither was measured.
    """
    if f.limit_bytes_per_s:
        return f.limit_bytes_per_s, "the probe's best measured read rate here"
    in_place = {s: t for s in f.cold if (t := f.seconds(s))}
    if not in_place:
        return None
    best = min(in_place, key=lambda s: in_place[s])
    return f.model_bytes / in_place[best], f"the fastest cold load measured here ({best})"


def copy_estimate(f: Facts) -> CopyEstimate | None:
    """The copy's estimate when a local disk would load ``WORTH_IT`` faster, else None.

    The local load time is estimated from the candidate's measured cold read rate
    (the copy does not exist yet, so it cannot be trialled); the copy's cost from the
    slower of the rate copy reads the source at (:func:`copy_read_rate`) and the
    candidate's write rate, plus reading the copy back to verify it (its cold read rate).
    """
    disk, mmap_s = f.local_disk, f.seconds(DEFAULT)
    if disk is None or not mmap_s or f.storage_class in ("local-block", "memory"):
        return None
    # A load is never faster than the same load from the page cache (the warm trials).
    warm_floor = min((t for s in f.warm if (t := f.seconds(s, "warm"))), default=0.0)
    local_s = max(f.model_bytes / disk.cold_read_bytes_per_s, warm_floor)
    gain = mmap_s / local_s
    if gain < WORTH_IT:
        return None
    in_place = {s: t for s in f.cold if (t := f.seconds(s))}
    best_name = min(in_place, key=lambda s: in_place[s])
    best_s = in_place[best_name]
    read = copy_read_rate(f)
    if read is None:
        return None
    read_rate, read_basis = read
    # Reads and writes overlap (the slower sets the pace); the read-back follows them.
    copy_s = f.model_bytes / min(read_rate, disk.write_bytes_per_s)
    copy_s += f.model_bytes / disk.cold_read_bytes_per_s
    saved = mmap_s - local_s
    break_even = max(1, math.ceil(copy_s / saved))
    beats_in_place = local_s * WORTH_IT <= best_s
    return CopyEstimate(
        disk,
        mmap_s,
        local_s,
        gain,
        best_name,
        best_s,
        copy_s,
        break_even,
        beats_in_place,
        read_rate,
        read_basis,
    )


def rule_copy_local(f: Facts) -> list[Recommendation]:
    """Copy to a local disk with room when it is measured faster, with the break-even."""
    e = copy_estimate(f)
    if e is None:
        return []
    dest = copy_destination(e.disk.directory, f.model_root)
    return [
        Recommendation(
            id=fix_ids.COPY_TO_LOCAL_DISK,
            title="Copy the model to a local disk",
            action=_copy_action(e),
            expected_speedup=e.gain,
            evidence=_copy_evidence(f, e),
            risk=f"needs {format_bytes(f.model_bytes)} of disk space; the copy goes stale when"
            " the model is updated",
            confidence="medium",
            snippets=copy_snippets(f.model_root, dest),
            optional=not e.beats_in_place,
            measured=False,
            apply={"kind": "copy", "source": f.model_root, "dest": dest},
        )
    ]


def _copy_action(e: CopyEstimate) -> str:
    action = (
        f"copy the model to {e.disk.directory} (local disk, {format_bytes(e.disk.free_bytes)}"
        f" free): a cold load there ~{e.local_s:.3g} s vs {e.mmap_s:.3g} s here, {e.gain:.1f}x;"
        f" the copy takes an estimated ~{e.copy_s:.3g} s (reading the source at"
        f" {format_rate(e.read_bytes_per_s)}, {e.read_basis}; writing at the local disk's"
        f" measured {format_rate(e.disk.write_bytes_per_s)}; reading the copy back to verify"
        f" it), repaid after {e.break_even} cold load(s)"
    )
    if not e.beats_in_place:
        action += (
            f" (but '{e.best_name}' already loads in {e.best_s:.3g} s in place: a copy gains"
            f" {e.best_s / e.local_s:.1f}x over that)"
        )
    return action


def _copy_evidence(f: Facts, e: CopyEstimate) -> list[Evidence]:
    disk = e.disk
    return [
        Evidence(
            f"probe: {disk.directory} cold read"
            + ("" if disk.cold_verified else " (cold not verified)"),
            round(disk.cold_read_bytes_per_s),
            "B/s",
        ),
        Evidence(f"probe: {disk.directory} write", round(disk.write_bytes_per_s), "B/s"),
        Evidence(
            "estimated cold load there (its read rate, floored at the warm load)",
            round(e.local_s, 4),
            "s",
        ),
        Evidence(f"copy's source read rate: {e.read_basis}", round(e.read_bytes_per_s), "B/s"),
        Evidence(
            "estimated copy time (source read or local write, the slower; then read back)",
            round(e.copy_s, 3),
            "s",
        ),
        Evidence(f"{DEFAULT} cold here", e.mmap_s, "s", ids_of(f, (DEFAULT, "cold"))),
        Evidence(
            f"fastest in place ({e.best_name})", e.best_s, "s", ids_of(f, (e.best_name, "cold"))
        ),
        Evidence("break-even", e.break_even, "cold loads"),
    ]


#: The route name the copy fix's snippets carry: its trial (``diagnosis/copy_trial.py``)
#: copies a sample to the local disk and loads it there against in place.
COPY_ROUTE = "copy"


def copy_snippets(source: str, dest: str, shell_alt: str | None = None) -> list[Snippet]:
    """The copy fix in each stack: ``loadscope copy SOURCE DEST`` first, then the stack
    pointed at DEST; the shell's line names ``shell_alt`` (default: rsync) as the other way."""
    copy = f"loadscope copy {shlex.quote(source)} {shlex.quote(dest)}"
    first = f"# run first: {copy}\n"
    alt = (
        shell_alt
        if shell_alt is not None
        else (f"rsync -a {shlex.quote(source + '/')} {shlex.quote(dest + '/')}")
    )
    lines = [
        ("shell", f"{copy}   # verified, resumable" + (f"; or: {alt}" if alt else "")),
        (
            "transformers",
            f"{first}from transformers import AutoModelForCausalLM\n"
            f"model = AutoModelForCausalLM.from_pretrained({dest!r})",
        ),
        ("vllm", f"{copy} && vllm serve {shlex.quote(dest)}"),
        (
            "sglang",
            f"{copy} && python -m sglang.launch_server --model-path {shlex.quote(dest)}",
        ),
    ]
    # Each a path change (the stack's code is pointed at the copy); their number is the
    # copy trial's, set when it runs, else the fix's estimate stands alone.
    return [
        Snippet(
            stack=stack,
            code=code,
            strategy=COPY_ROUTE,
            route="a path change",
            what="the model copied to a local disk",
            note="estimated, not measured: the copy trial did not run",
        )
        for stack, code in lines
    ]
