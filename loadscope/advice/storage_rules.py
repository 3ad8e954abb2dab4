"""Rules on the storage itself: its readahead, a Windows drive under WSL, a stalled read.

These fixes change the mount or where the files live, not the loading code:
raise a small readahead where mmap is latency-bound on network or FUSE storage,
move the model off a WSL drive, and — before any speed advice — find out why a
read got no answer.
May import: :mod:`loadscope.advice.facts`, :mod:`loadscope.advice.results`,
:mod:`loadscope.advice.snippets`, ``loadscope.base``.
"""

from __future__ import annotations

import shlex

from loadscope.advice.facts import Facts
from loadscope.advice.results import HEALTHY_FRACTION, Evidence, Recommendation
from loadscope.advice.snippets import command
from loadscope.base.units import format_rate


def rule_readahead(f: Facts) -> list[Recommendation]:
    """Raise a small readahead on network or FUSE storage where mmap is latency-bound."""
    if f.storage_class not in ("fuse", "network-fs", "network-block", "wsl"):
        return []
    if f.read_ahead_kb is None or f.read_ahead_kb >= 4096:
        return []
    mmap_bps = f.rate("mmap")
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
            id="raise-readahead",
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
            snippets=[command("shell", cmd)],
        )
    ]


def rule_wsl(f: Facts) -> list[Recommendation]:
    if f.storage_class != "wsl":
        return []
    return [
        Recommendation(
            id="move-off-wsl-drive",
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
        id="storage-stalled",
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
