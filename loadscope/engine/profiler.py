"""Where a running trial spends its time: ``py-spy`` dump and a short record of a worker.

py-spy attaches with ptrace. Where that is not permitted (Yama
``ptrace_scope``, a container without ``CAP_SYS_PTRACE``) the result says so
and how to enable it, instead of an empty profile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")
HOW_TO_ENABLE = (
    "run as root, or 'sudo sysctl kernel.yama.ptrace_scope=0' (host-wide);"
    " in a container add --cap-add SYS_PTRACE (docker) or the SYS_PTRACE capability (k8s)"
)


@dataclass(slots=True)
class Frame:
    name: str
    samples: int
    fraction: float


@dataclass(slots=True)
class Profile:
    pid: int
    ok: bool
    #: ``py-spy dump`` text: every thread's current stack.
    dump: str = ""
    #: Frames where samples were taken (self time), most first, from ``py-spy record``.
    top_self: list[Frame] = field(default_factory=list)
    #: Frames on the stack in the most samples (inclusive time).
    top_total: list[Frame] = field(default_factory=list)
    samples: int = 0
    error: str = ""


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


def yama_scope() -> int | None:
    """``kernel.yama.ptrace_scope``, or None where Yama is not in the kernel."""
    try:
        return int(_YAMA.read_text().strip())
    except (OSError, ValueError):
        return None


def ptrace_blocked_reason(*, declared: bool = False) -> str | None:
    """Why attaching would fail before trying (Yama), or None when it may work.
    ``declared``: the process to trace names loadscope as its tracer before it runs
    (:func:`declare_tracer`), which Yama's scope 1 allows a user who is not root."""
    scope = yama_scope()
    if scope is None:
        return None
    if scope >= 3:
        return "kernel.yama.ptrace_scope is 3: ptrace is disabled until reboot"
    if scope == 2 and os.geteuid() != 0:
        return "kernel.yama.ptrace_scope is 2: only root may attach"
    if scope == 1 and os.geteuid() != 0 and not declared:
        return "kernel.yama.ptrace_scope is 1: only root may attach to a non-child"
    return None


#: ``prctl(PR_SET_PTRACER, pid)`` (linux/prctl.h: "Yama" in ASCII).
PR_SET_PTRACER = 0x59616D61


def tracer_declaration() -> Callable[[], None] | None:
    """Under Yama's scope 1 for a user who is not root: what a command spawned by
    loadscope runs before its program (``preexec_fn``) so that py-spy, which loadscope
    starts, may attach to it: it names loadscope (its parent) as its tracer, and Yama
    lets the declared tracer's descendants attach (the declaration outlives ``exec``;
    the command's own children are not covered). None where it is not needed."""
    if yama_scope() != 1 or os.geteuid() == 0:
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    parent = os.getpid()

    def declare() -> None:  # in the child, between fork and exec: no allocation, no lock
        prctl(PR_SET_PTRACER, parent, 0, 0, 0)

    return declare


def explain(stderr: str) -> str:
    """py-spy's failure in one line: where ptrace was refused, how to allow it."""
    text = stderr.strip().splitlines()[-1] if stderr.strip() else "py-spy failed"
    if "ermission" in stderr or "EPERM" in stderr or "Operation not permitted" in stderr:
        return f"ptrace not permitted ({text}): {HOW_TO_ENABLE}"
    return text


def parse_collapsed(text: str, top: int = 12) -> tuple[list[Frame], list[Frame], int]:
    """Top self and inclusive frames from collapsed stacks ('a;b;c 12' per line)."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    n = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        frames = stack.split(";")
        n += c
        own[frames[-1]] += c
        for f in set(frames[1:]):  # the first entry is the process/thread
            total[f] += c

    def rank(counter: Counter[str]) -> list[Frame]:
        return [Frame(k, v, v / n) for k, v in counter.most_common(top)] if n else []

    return rank(own), rank(total), n


def profile(pid: int, *, duration_s: float = 2.0, native: bool = True) -> Profile:
    """``py-spy dump`` then ``py-spy record`` for ``duration_s`` against ``pid``."""
    exe = py_spy()
    if exe is None:
        return Profile(pid, False, error="py-spy is not installed (pip install py-spy)")
    if (why := ptrace_blocked_reason()) is not None:
        return Profile(pid, False, error=f"{why}: {HOW_TO_ENABLE}")
    extra = ["--native"] if native else []
    try:
        dump = subprocess.run(
            [exe, "dump", "--pid", str(pid), *extra],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Profile(pid, False, error="py-spy dump did not answer within 15 s")
    if dump.returncode != 0:
        if native and "native" in dump.stderr.lower():
            return profile(pid, duration_s=duration_s, native=False)
        return Profile(pid, False, error=explain(dump.stderr or dump.stdout))
    with tempfile.TemporaryDirectory(prefix="loadscope-pyspy-") as tmp:
        out = Path(tmp) / "stacks.txt"
        try:
            rec = subprocess.run(
                [
                    exe,
                    "record",
                    "--pid",
                    str(pid),
                    "--duration",
                    str(max(1, round(duration_s))),
                    "--format",
                    "raw",
                    "--output",
                    str(out),
                    "--nonblocking",
                    *extra,
                ],
                capture_output=True,
                text=True,
                timeout=duration_s + 20,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Profile(pid, True, dump=dump.stdout, error="py-spy record timed out")
        collapsed = out.read_text(errors="replace") if out.exists() else ""
    own, total, n = parse_collapsed(collapsed)
    error = "" if n else explain(rec.stderr) if rec.returncode else "the process ended first"
    return Profile(
        pid, True, dump=dump.stdout, top_self=own, top_total=total, samples=n, error=error
    )
