"""The machine a model loads on: CPUs, RAM and its cgroup limit, kernel, VM, versions, GPUs.

RAM is reported three ways because each can be the one that bites: what the
machine has, what is available now, and what this process's cgroup allows
(v2 ``memory.max`` or v1 ``memory.limit_in_bytes``, the tightest over the
ancestors) — in a container the last is the real ceiling for a full read.
GPUs are listed by the driver (nvidia-smi, with a timeout) only when one is
visible; the parent never imports torch for them. The memory figures themselves (RAM
available, the cgroup, the OOM counters) are :mod:`loadscope.probes.memory`'s.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadscope.base.units import format_bytes
from loadscope.probes.memory import (
    CgroupMemory,
    cgroup_memory,
    headroom_bytes,
)
from loadscope.probes.sources import EVERY_SOURCE
from loadscope.probes.spec import Lines, ProbeSpec, Shown, block_of, figure, ok, status_text
from loadscope.probes.sysfs import read_text

_PACKAGES = (
    "torch",
    "safetensors",
    "huggingface_hub",
    "transformers",
    "accelerate",
    "diffusers",
    "vllm",
    "sglang",
    "fastsafetensors",
    "runai-model-streamer",
    "numpy",
    "textual",
)


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    name: str
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class SystemInfo:
    hostname: str
    kernel: str
    machine: str
    cpu_model: str | None
    cpus_online: int
    cpus_usable: int  # sched_getaffinity: what this process may run on
    ram_total_bytes: int
    ram_available_bytes: int
    swap_total_bytes: int
    swap_free_bytes: int
    cgroup: CgroupMemory | None
    #: min(available RAM, cgroup limit - cgroup usage): what a full read may take.
    memory_headroom_bytes: int
    virtualization: (
        str | None
    )  # e.g. "kvm", "wsl2", "docker", with evidence in virtualization_evidence
    virtualization_evidence: tuple[str, ...]
    container: str | None
    wsl: bool
    python: str
    packages: dict[str, str | None] = field(default_factory=dict)
    gpus: tuple[Gpu, ...] = ()
    gpu_note: str = ""
    #: The NVIDIA kernel driver's version (/proc/driver/nvidia/version), None without one.
    nvidia_driver: str | None = None
    #: The CUDA version the installed torch was built for ("ROCm 6.2" for a ROCm build,
    #: "cpu": a CPU-only build; None: no torch), read from torch/version.py, not imported.
    torch_cuda: str | None = None


def nvidia_driver_version(root: Path = Path("/")) -> str | None:
    """``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ...`` -> ``550.54.15``."""
    text = read_text(root / "proc/driver/nvidia/version") or ""
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
    return match[1] if match else None


def torch_cuda_build() -> str | None:
    """``torch.version.cuda`` (or ``"ROCm <hip>"`` for a ROCm build) without the seconds an
    import of torch costs: the installed package's version.py, read as text (None when
    torch is not installed)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        text = read_text(Path(folder) / "version.py") or ""
        if (build := gpu_build(text)) is not None:
            return build
    return None


def gpu_build(version_py: str) -> str | None:
    """What torch's version.py says it was built for: its CUDA version, "ROCm <hip>",
    "cpu" (neither), or None when the text is not torch's version.py."""
    cuda, hip = (_version_py_value(version_py, name) for name in ("cuda", "hip"))
    if cuda or hip:
        return cuda or f"ROCm {hip}"
    return "cpu" if re.search(r"^cuda\s*(?::[^=]*)?=", version_py, re.M) else None


def _version_py_value(text: str, name: str) -> str | None:
    """``name = '12.8'`` (or ``name: Optional[str] = '12.8'``) in torch's version.py."""
    match = re.search(rf"^{name}\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\")", text, re.M)
    return (match[1] or match[2] or None) if match else None


def probe_system(root: Path = Path("/")) -> SystemInfo:
    """Collect :class:`SystemInfo` (``root`` re-roots /proc and /sys for tests)."""
    import psutil

    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    cgroup = cgroup_memory(root)
    headroom = headroom_bytes(vm.available, cgroup)
    virt, evidence = virtualization(root)
    wsl = is_wsl(root)
    gpus, gpu_note = gpus_via_driver(root)
    return SystemInfo(
        hostname=platform.node(),
        kernel=platform.release(),
        machine=platform.machine(),
        cpu_model=cpu_model(root),
        cpus_online=os.cpu_count() or 1,
        cpus_usable=len(os.sched_getaffinity(0)),
        ram_total_bytes=vm.total,
        ram_available_bytes=vm.available,
        swap_total_bytes=swap.total,
        swap_free_bytes=swap.free,
        cgroup=cgroup,
        memory_headroom_bytes=headroom,
        virtualization=virt,
        virtualization_evidence=evidence,
        container=container_kind(root),
        wsl=wsl,
        python=platform.python_version(),
        packages=package_versions(),
        gpus=gpus,
        gpu_note=gpu_note,
        nvidia_driver=nvidia_driver_version(root),
        torch_cuda=torch_cuda_build(),
    )


def cpu_model(root: Path = Path("/")) -> str | None:
    text = read_text(root / "proc/cpuinfo") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware"):
            return value.strip()
    return None


def is_wsl(root: Path = Path("/")) -> bool:
    release = (read_text(root / "proc/sys/kernel/osrelease") or "").lower()
    return "microsoft" in release or "wsl" in release or bool(os.environ.get("WSL_DISTRO_NAME"))


def virtualization(root: Path = Path("/")) -> tuple[str | None, tuple[str, ...]]:
    """Hypervisor or WSL, with the files that said so."""
    evidence: list[str] = []
    if is_wsl(root):
        release = read_text(root / "proc/sys/kernel/osrelease") or ""
        return ("wsl2" if "wsl2" in release.lower() else "wsl"), (f"osrelease: {release}",)
    vendor = read_text(root / "sys/class/dmi/id/sys_vendor")
    product = read_text(root / "sys/class/dmi/id/product_name")
    known = {
        "QEMU": "kvm",
        "KVM": "kvm",
        "Amazon EC2": "aws-nitro",
        "Google": "gce",
        "Microsoft Corporation": "hyper-v",
        "VMware": "vmware",
        "innotek GmbH": "virtualbox",
        "Xen": "xen",
    }
    for text in (vendor, product):
        if text:
            for needle, name in known.items():
                if needle.lower() in text.lower():
                    return name, (f"dmi: {vendor or ''} / {product or ''}".strip(),)
    flags = read_text(root / "proc/cpuinfo") or ""
    if " hypervisor" in flags:
        evidence.append("cpu flag 'hypervisor'")
        hv = read_text(root / "sys/hypervisor/type")
        if hv:
            evidence.append(f"/sys/hypervisor/type: {hv}")
        return (hv or "vm"), tuple(evidence)
    return None, ()


def container_kind(root: Path = Path("/")) -> str | None:
    if (root / ".dockerenv").exists():
        return "docker"
    if (root / "run/.containerenv").exists():
        return "podman"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    init_cgroup = read_text(root / "proc/1/cgroup") or ""
    for needle in ("kubepods", "docker", "containerd", "lxc"):
        if needle in init_cgroup:
            return needle
    return None


def package_versions() -> dict[str, str | None]:
    """Installed versions, read from metadata (importing torch would cost seconds)."""
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def gpus_via_driver(root: Path = Path("/")) -> tuple[tuple[Gpu, ...], str]:
    """GPUs as the driver lists them (nvidia-smi, bounded), asked only when one is present.

    Never torch: importing it here would cost the parent seconds, and the GPU probe
    (``probes.gpu``) has the PCIe facts; this is the short list for the system line.
    """
    nvidia = (root / "proc/driver/nvidia").exists()
    rocm = (root / "dev/kfd").exists()
    if not (nvidia or rocm):
        return (), "no GPU driver (/proc/driver/nvidia and /dev/kfd absent)"
    if not nvidia:
        return (), "ROCm driver present (/dev/kfd); only NVIDIA GPUs are listed"
    from loadscope.probes.gpu import query_nvidia_smi

    smi, note = query_nvidia_smi()
    gpus = tuple(
        Gpu(g.index if g.index is not None else i, g.name, g.memory_total_bytes or 0)
        for i, g in enumerate(smi)
    )
    return gpus, "nvidia-smi" if gpus else f"NVIDIA driver present; {note}"


def system_lines(block: dict[str, Any], model_bytes: int) -> Lines:
    """The machine, from its block in the probe report's JSON: the memory beside the
    model's size (whether it fits), the CPUs, the kernel, where it runs."""
    if not ok(block):
        return [("system", status_text(block))]

    def size(name: str) -> str:
        return figure(name, block.get(name))

    _available, limit = memory_figures(block)
    fits = "fits" if int(block.get("memory_headroom_bytes") or 0) >= model_bytes else "does NOT fit"
    memory = (
        f"{size('ram_available_bytes')} available of {size('ram_total_bytes')};"
        f" cgroup limit {figure('limit_bytes', limit) if limit else 'none'};"
        f" model {format_bytes(model_bytes)} ({fits} in RAM)"
    )
    where = block.get("virtualization") or "bare metal?"
    container = f", {block['container']}" if block.get("container") else ""
    system = (
        f"{block.get('cpus_usable')} CPUs ({block.get('cpu_model') or '?'}),"
        f" kernel {block.get('kernel')}, {where}{container}"
    )
    return [("memory", memory), ("system", system)]


def _shown(doc: Mapping[str, Any]) -> Shown:
    model = int(block_of(doc.get("target")).get("total_bytes") or 0)
    return list(system_lines(block_of(doc.get("system")), model))


SPEC = ProbeSpec(
    "system",
    "system",
    SystemInfo,
    lambda _ctx: probe_system(),
    lambda _block: [],
    core=True,
    part="head",
    shown=_shown,
    sources=EVERY_SOURCE,
)


def system_info_lines(block: Mapping[str, Any], host_kernel: str = "?") -> list[str]:
    """The machine as the block people paste into an issue has it (the shape of
    ``transformers env``, after loadscope's own version line), from its block in the
    probe report's JSON; none when it did not run ok."""
    if not ok(block):
        return []
    lines = [
        f"- Platform: Linux-{block.get('kernel') or host_kernel}-{block.get('machine', '?')}",
        f"- Python version: {block.get('python', '?')}",
    ]
    packages = block.get("packages")
    for name, version in (packages if isinstance(packages, dict) else {}).items():
        if version:
            lines.append(f"- {name} version: {version}")
    cpus = f"{block.get('cpus_usable', '?')} usable of {block.get('cpus_online', '?')}"
    lines.append(f"- CPU: {block.get('cpu_model', '?')} ({cpus})")
    available, limit = memory_figures(block)
    ram = block.get("ram_total_bytes")
    if ram:
        lines.append(
            f"- RAM: {figure('ram_total_bytes', ram)}"
            f" ({figure('ram_available_bytes', available or 0)} available)"
        )
    cgroup = block_of(block.get("cgroup"))
    lines.append(
        f"- cgroup v{cgroup.get('version', '?')} memory limit: "
        f"{figure('limit_bytes', limit) if limit else 'none'}"
    )
    virt = [x for x in (block.get("virtualization"), block.get("container")) if x]
    if virt or block.get("wsl"):
        lines.append(f"- Environment: {', '.join(virt + (['WSL'] if block.get('wsl') else []))}")
    cuda = block.get("torch_cuda")
    if cuda:
        lines.append(f"- torch CUDA build: {'none (CPU-only torch)' if cuda == 'cpu' else cuda}")
    if block.get("nvidia_driver"):
        lines.append(f"- NVIDIA driver version: {block['nvidia_driver']}")
    found = block.get("gpus")
    gpus: list[Any] = found if isinstance(found, list) else []
    note = f" ({block['gpu_note']})" if not gpus and block.get("gpu_note") else ""
    lines.append(f"- GPUs: {len(gpus) or 'none'}{note}")
    return lines + [_gpu_line(g) for g in gpus]


def _gpu_line(gpu: Any) -> str:
    """``  - GPU 0: NVIDIA H100 80GB HBM3, 80 GiB`` (a report's GPU entry, any shape)."""
    if not isinstance(gpu, dict):
        return f"  - {gpu}"
    memory = gpu.get("memory_bytes")
    size = f", {format_bytes(memory)}" if isinstance(memory, int) and memory > 0 else ""
    return f"  - GPU {gpu.get('index', '?')}: {gpu.get('name', '?')}{size}"


def memory_figures(block: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """``(RAM available, the cgroup's limit)`` in bytes from the machine's block (None:
    not known, or no limit)."""
    if not ok(block):
        return None, None
    available = block.get("ram_available_bytes")
    limit = block_of(block.get("cgroup")).get("limit_bytes")
    return (
        int(available) if isinstance(available, int | float) else None,
        int(limit) if isinstance(limit, int | float) and limit else None,
    )
