"""Rules on the storage itself: its readahead, a Windows drive under WSL, a stalled read.

These fixes change the mount or where the files live, not the loading code:
raise a small readahead where mmap is latency-bound on network or FUSE storage,
move the model off a WSL drive, and — before any speed advice — find out why a
read got no answer.
May import: :mod:`loadscope.advice.facts`, :mod:`loadscope.advice.results`,
:mod:`loadscope.advice.snippets`, ``loadscope.loaders.strategies``, ``loadscope.base``.
"""

from __future__ import annotations

import shlex

from loadscope.advice.facts import Facts
from loadscope.advice.results import HEALTHY_FRACTION, Evidence, Recommendation
from loadscope.advice.snippets import Snippet, command, folder_of
from loadscope.base import fix_ids
from loadscope.base.units import format_rate
from loadscope.loaders.strategies import DEFAULT

#: The route name the readahead fix's snippets carry: its trial is ``mmap`` rerun with the
#: mount's readahead raised (the doctor's readahead check), not a loader strategy.
READAHEAD_ROUTE = "readahead"

#: The stacks that read through mmap by default, so raising the readahead speeds them up
#: with no change to their code, and how each starts after it.
MMAP_STACKS = (
    ("transformers", "model = AutoModelForCausalLM.from_pretrained({dir_py})"),
    ("diffusers", "pipe = DiffusionPipeline.from_pretrained({dir_py})"),
    ("vllm", "vllm serve {dir_sh}"),
    ("sglang", "python -m sglang.launch_server --model-path {dir_sh}"),
)

#: How to keep the raised value: a sysfs write lasts until the mount is made again.
_LASTING = (
    "# it lasts until the next mount; to keep it:\n"
    "#  block device / NFS: a udev rule, e.g. /etc/udev/rules.d/99-readahead.rules:\n"
    '#    SUBSYSTEM=="bdi", ACTION=="add", ATTR{{read_ahead_kb}}="8192"\n'
    "#  FUSE: the daemon's mount option, where it has one (e.g. -o max_readahead=8388608)\n"
    "#  Kubernetes: the same echo in a privileged init container of the pod, or a\n"
    "#    DaemonSet on the nodes, before the server starts"
)


#: Storage whose readahead the fix raises (where a small one makes mmap latency-bound).
READAHEAD_STORAGE = ("fuse", "network-fs", "network-block", "wsl")
#: A readahead at least this large is not what holds mmap back.
LARGE_READAHEAD_KB = 4096


def small_readahead(storage_class: str, read_ahead_kb: int | None) -> bool:
    """Network or FUSE storage with a readahead the fix would raise."""
    return (
        storage_class in READAHEAD_STORAGE
        and read_ahead_kb is not None
        and read_ahead_kb < LARGE_READAHEAD_KB
    )


def rule_readahead(f: Facts) -> list[Recommendation]:
    """Raise a small readahead on network or FUSE storage where mmap is latency-bound."""
    if not small_readahead(f.storage_class, f.read_ahead_kb):
        return []
    mmap_bps = f.rate(DEFAULT)
    if f.limit_bytes_per_s and mmap_bps and mmap_bps >= HEALTHY_FRACTION * f.limit_bytes_per_s:
        return []
    cmd = f"echo 8192 | sudo tee {shlex.quote(f.bdi_path + '/read_ahead_kb')}" if f.bdi_path else ""
    if f.fuse:
        # The mount's own fusectl folder when the probe found it (its number changes at
        # every mount); else where to look it up.
        conn = f.fuse_connection_path
        if conn:
            cmd += f"\n# and for FUSE: echo 64 | sudo tee {shlex.quote(conn + '/max_background')}"
        else:
            cmd += (
                "\n# and for FUSE (N: the mount's device minor, mountpoint -d MOUNT):"
                "\n# echo 64 | sudo tee /sys/fs/fuse/connections/N/max_background"
            )
    return [
        Recommendation(
            id=fix_ids.RAISE_READAHEAD,
            title="Raise the mount's readahead",
            action=f"readahead is {f.read_ahead_kb} KiB on {f.storage_class} storage; raise it"
            " to 8 MiB so mmap streams in large requests (host-wide setting for this mount)",
            evidence=[
                Evidence("read_ahead_kb", f.read_ahead_kb, "KiB"),
                Evidence("mmap cold throughput", format_rate(mmap_bps) if mmap_bps else None),
                Evidence(
                    "probe: storage limit",
                    format_rate(f.limit_bytes_per_s) if f.limit_bytes_per_s else None,
                ),
            ],
            risk="host-wide for this mount; root; resets at remount",
            confidence="medium",
            measured=False,
            snippets=[
                Snippet(
                    stack="shell",
                    code=cmd + "\n" + _LASTING.format(),
                    strategy=READAHEAD_ROUTE,
                    route="no code change",
                    what="the mount's readahead raised",
                    note="not measured yet",
                ),
                *_stack_lines(f, cmd),
            ],
        )
    ]


def _stack_lines(f: Facts, cmd: str) -> list[Snippet]:
    """The readahead fix under every stack that loads through mmap: no code change, the
    same command first; the number is the readahead trial's, set when it runs."""
    folder = folder_of(f.model_path)
    out = []
    for stack, start in MMAP_STACKS:
        if (stack == "transformers") == (f.layout == "diffusers") and stack in (
            "transformers",
            "diffusers",
        ):
            continue  # each HF library's line only for a folder it loads
        first = "\n".join(
            f"# run first (root): {line.lstrip('# ').removeprefix('and for FUSE: ')}"
            for line in cmd.splitlines()
        )
        start_line = start.format(dir_py=repr(folder), dir_sh=shlex.quote(folder))
        if stack == "transformers":
            start_line = "from transformers import AutoModelForCausalLM\n" + start_line
        if stack == "diffusers":
            start_line = "from diffusers import DiffusionPipeline\n" + start_line
        out.append(
            Snippet(
                stack=stack,
                code=f"{first}\n{start_line}",
                strategy=READAHEAD_ROUTE,
                route="no code change",
                what="the mount's readahead raised",
                note="not measured yet",
            )
        )
    return out


def rule_wsl(f: Facts) -> list[Recommendation]:
    if f.storage_class != "wsl":
        return []
    return [
        Recommendation(
            id=fix_ids.MOVE_OFF_WSL_DRIVE,
            title="Move the model off the Windows drive",
            action="the files are on a Windows drive seen through WSL's 9P/drvfs; copy them"
            " into the Linux filesystem (e.g. ~/models)",
            evidence=[Evidence("storage class", "wsl")],
            risk="needs disk space in the WSL virtual disk",
            confidence="high",
            snippets=[command("shell", f"cp -r {shlex.quote(f.model_root)} ~/models/")],
        )
    ]


def rule_stalled(f: Facts) -> Recommendation:
    """No speed advice means anything while reads go unanswered: fix the storage first."""
    assert f.stalled is not None
    return Recommendation(
        id=fix_ids.STORAGE_STALLED,
        title="Find out why the storage stopped answering",
        action=f"{f.stalled}; until reads come back no load can finish here: check the"
        " server or FUSE daemon (dmesg, its logs), then run the diagnosis again",
        evidence=[Evidence("stalled read", f.stalled)],
        risk="a hard NFS mount waits forever by design; 'soft,timeo=' makes reads fail instead",
        confidence="high",
        snippets=[
            command(
                "shell",
                "dmesg | tail -50            # 'server not responding', hung tasks\n"
                "grep -E 'nfs|fuse' /proc/mounts   # mount options: hard/soft, timeo\n"
                "cat /sys/fs/fuse/connections/*/waiting  # FUSE requests not answered",
            )
        ],
        measured=False,
    )
