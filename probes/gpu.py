"""NVIDIA GPUs as the machine describes them: PCIe links from sysfs, names from nvidia-smi.

No torch here (probes run in the parent). For each PCI function with vendor
0x10de and a display-controller class (0x03xxxx) it reads the negotiated and
the maximum link speed and width (``current_link_speed``, ``current_link_width``,
``max_link_speed``, ``max_link_width``) and the NUMA node; a link trained below
its maximum (a x16 GPU running at x8, Gen5 at Gen3) caps every host-to-device
copy. Names, memory and the link as the driver reports it come from
``nvidia-smi`` when it is installed (run with a timeout: a wedged driver can hang
it). The link's data rate after line encoding is derived from the negotiated
speed and width and labelled as such: an upper bound, not a measurement (the
measured ceiling is ``python -m loadscope.loaders.h2d``).

Call ``probe_gpus()``; ``sysfs_root`` and ``nvidia_smi`` re-root it for tests.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadscope.base.units import format_bytes, format_rate
from loadscope.probes.result import ProbeResult, Unavailable, run_probe
from loadscope.probes.sources import EVERY_SOURCE
from loadscope.probes.spec import Lines, ProbeContext, ProbeSpec
from loadscope.probes.sysfs import read_int, read_text

NVIDIA_VENDOR = 0x10DE
#: PCI base class 0x03: display controllers (0x0300 VGA, 0x0302 3D controller, e.g. H100).
DISPLAY_CLASS = 0x03
NVIDIA_SMI_QUERY = (
    "index,pci.bus_id,name,memory.total,pcie.link.gen.current,pcie.link.width.current"
)
NVIDIA_SMI_TIMEOUT_S = 10.0

#: Bits carried per transfer after line encoding, by per-lane rate in GT/s: 8b/10b for
#: PCIe 1 and 2, 128b/130b for 3 to 5, FLIT mode (242/256 payload) for 6.
_ENCODING = {2.5: 8 / 10, 5.0: 8 / 10, 8.0: 128 / 130, 16.0: 128 / 130, 32.0: 128 / 130}
_FLIT = 242 / 256
_GENERATION = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclass(frozen=True, slots=True)
class PcieLink:
    #: As sysfs writes it, e.g. "16.0 GT/s PCIe" (None when the file is absent).
    speed: str | None
    speed_gts: float | None
    width: int | None
    generation: int | None
    #: Derived from speed x width x line encoding: an upper bound, not a measurement.
    data_rate_bytes_per_s: float | None


@dataclass(frozen=True, slots=True)
class PciGpu:
    address: str  # e.g. "0000:17:00.0"
    device_id: str | None  # e.g. "0x2330"
    pci_class: str  # e.g. "0x030200"
    numa_node: int | None  # None when the kernel reports -1 (no NUMA) or nothing
    current_link: PcieLink
    max_link: PcieLink
    #: The link trained slower or narrower than it can (None when sysfs does not say).
    link_degraded: bool | None


def degraded(current: PcieLink, top: PcieLink) -> bool | None:
    if (
        current.speed_gts is None
        or top.speed_gts is None
        or current.width is None
        or top.width is None
    ):
        return None
    return current.speed_gts < top.speed_gts or current.width < top.width


@dataclass(frozen=True, slots=True)
class SmiGpu:
    index: int | None
    bus_id: str | None
    name: str
    memory_total_bytes: int | None
    pcie_generation: int | None
    pcie_width: int | None


@dataclass(frozen=True, slots=True)
class GpuFacts:
    pci: tuple[PciGpu, ...]
    smi: tuple[SmiGpu, ...]
    #: How nvidia-smi went: "ok", or why there is nothing from it.
    smi_note: str


def parse_link_speed(text: str | None) -> float | None:
    """GT/s from sysfs's ``current_link_speed`` ("16.0 GT/s PCIe", "2.5 GT/s"); else None."""
    if not text:
        return None
    m = re.match(r"\s*([\d.]+)\s*GT/s", text)
    return float(m.group(1)) if m else None


def link(speed: str | None, width: int | None) -> PcieLink:
    gts = parse_link_speed(speed)
    rate = None
    if gts is not None and width:
        encoding = _ENCODING.get(gts, _FLIT if gts >= 64 else None)
        if encoding is not None:
            rate = gts * 1e9 * encoding * width / 8
    return PcieLink(speed, gts, width or None, _GENERATION.get(gts) if gts else None, rate)


def pci_gpus(sysfs_root: Path = Path("/")) -> tuple[PciGpu, ...]:
    """Every NVIDIA display-class PCI function under ``sysfs_root``/sys/bus/pci/devices."""
    base = sysfs_root / "sys/bus/pci/devices"
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return ()
    out = []
    for dev in entries:
        vendor = _hex(read_text(dev / "vendor"))
        pci_class = _hex(read_text(dev / "class"))
        if vendor != NVIDIA_VENDOR or pci_class is None or pci_class >> 16 != DISPLAY_CLASS:
            continue
        numa = read_int(dev / "numa_node")
        current = link(read_text(dev / "current_link_speed"), read_int(dev / "current_link_width"))
        top = link(read_text(dev / "max_link_speed"), read_int(dev / "max_link_width"))
        out.append(
            PciGpu(
                address=dev.name,
                device_id=read_text(dev / "device"),
                pci_class=f"0x{pci_class:06x}",
                numa_node=numa if numa is not None and numa >= 0 else None,
                current_link=current,
                max_link=top,
                link_degraded=degraded(current, top),
            )
        )
    return tuple(out)


def _hex(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(text.split()[0], 16)
    except (ValueError, IndexError):
        return None


def parse_nvidia_smi(text: str) -> tuple[SmiGpu, ...]:
    """Rows of ``nvidia-smi --query-gpu=<NVIDIA_SMI_QUERY> --format=csv,noheader,nounits``."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 6:
            raise ValueError(f"unexpected nvidia-smi line (want 6 fields): {line!r}")
        index, bus_id, name, memory_mib, gen, width = cells
        mib = _number(memory_mib)
        out.append(
            SmiGpu(
                index=_number(index),
                bus_id=bus_id if _known(bus_id) else None,
                name=name,
                memory_total_bytes=mib << 20 if mib is not None else None,
                pcie_generation=_number(gen),
                pcie_width=_number(width),
            )
        )
    return tuple(out)


def _known(cell: str) -> bool:
    """nvidia-smi writes "[N/A]", "[Not Supported]" or "N/A" where it has no value."""
    return bool(cell) and not cell.startswith("[") and cell.upper() != "N/A"


def _number(cell: str) -> int | None:
    if not _known(cell):
        return None
    try:
        return int(float(cell))
    except ValueError:
        return None


def query_nvidia_smi(
    command: str | None = "nvidia-smi", timeout_s: float = NVIDIA_SMI_TIMEOUT_S
) -> tuple[tuple[SmiGpu, ...], str]:
    """GPUs as nvidia-smi lists them, and "ok" or why there are none from it."""
    if command is None:
        return (), "nvidia-smi not asked for"
    exe = shutil.which(command)
    if exe is None:
        return (), "nvidia-smi not installed"
    try:
        proc = subprocess.run(
            [exe, f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return (), f"nvidia-smi timed out after {timeout_s:g} s (a hung driver?)"
    except OSError as exc:
        return (), f"nvidia-smi could not run: {exc}"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return (), f"nvidia-smi failed (exit {proc.returncode}): {tail[0]}".rstrip(": ")
    try:
        return parse_nvidia_smi(proc.stdout), "ok"
    except ValueError as exc:
        return (), f"nvidia-smi output not understood: {exc}"


def gpu_facts(
    sysfs_root: Path = Path("/"),
    nvidia_smi: str | None = "nvidia-smi",
    timeout_s: float = NVIDIA_SMI_TIMEOUT_S,
) -> GpuFacts:
    """:class:`GpuFacts`, or :class:`Unavailable` when neither source finds an NVIDIA GPU."""
    pci = pci_gpus(sysfs_root)
    smi, note = query_nvidia_smi(nvidia_smi, timeout_s)
    if not pci and not smi:
        raise Unavailable(
            f"no NVIDIA GPU found (no PCI device with vendor 0x{NVIDIA_VENDOR:04x}, {note})"
        )
    return GpuFacts(pci, smi, note)


def probe_gpus(
    sysfs_root: Path = Path("/"),
    nvidia_smi: str | None = "nvidia-smi",
    timeout_s: float = NVIDIA_SMI_TIMEOUT_S,
) -> ProbeResult[GpuFacts]:
    """The GPU probe: status ok with :class:`GpuFacts`, or unavailable with the reason."""
    return run_probe("gpu", lambda: gpu_facts(sysfs_root, nvidia_smi, timeout_s))


def _lines(block: dict[str, Any]) -> Lines:
    """Each GPU as nvidia-smi names it, then each PCI function's link (and whether it
    trained below its maximum)."""
    lines = []
    for g in block.get("smi") or []:
        mem = format_bytes(g["memory_total_bytes"]) if g.get("memory_total_bytes") else "memory ?"
        width = g.get("pcie_width")
        link = f"PCIe gen {g.get('pcie_generation')} x{width}" if width else "link ?"
        lines.append(("gpu", f"{g.get('index')}: {g.get('name')}, {mem}, {link} (nvidia-smi)"))
    for pci in block.get("pci") or []:
        cur = pci.get("current_link") or {}
        rate = cur.get("data_rate_bytes_per_s")
        text = f"{pci.get('address')}: link {cur.get('speed') or '?'} x{cur.get('width') or '?'}"
        text += f" ({format_rate(rate)})" if rate else ""
        text += " — DEGRADED vs its max link" if pci.get("link_degraded") else ""
        lines.append(("gpu pci", text))
    return lines


def _facts(block: dict[str, Any]) -> dict[str, Any]:
    """``degraded_links``: (address, current link, maximum link) of each link trained
    below its maximum (host-to-device copies are capped by it)."""
    out = []
    for pci in block.get("pci") or []:
        if pci.get("link_degraded"):
            cur, top = pci.get("current_link") or {}, pci.get("max_link") or {}
            out.append(
                (
                    str(pci.get("address")),
                    f"{cur.get('speed')} x{cur.get('width')}",
                    f"{top.get('speed')} x{top.get('width')}",
                )
            )
    return {"degraded_links": out}


def _run(ctx: ProbeContext) -> GpuFacts:
    return gpu_facts(Path("/"), "nvidia-smi", NVIDIA_SMI_TIMEOUT_S)


#: The GPU probe's declaration (``probes/spec.py``).
SPEC = ProbeSpec("gpus", "GPUs", GpuFacts, _run, _lines, facts=_facts, sources=EVERY_SOURCE)
