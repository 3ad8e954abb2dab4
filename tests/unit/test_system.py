"""System probe on fake /proc and /sys trees: cgroup v1 and v2 limits, WSL, VMs, containers."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadscope.probes.memory import cgroup_memory
from loadscope.probes.system import (
    container_kind,
    cpu_model,
    is_wsl,
    package_versions,
    probe_system,
    virtualization,
)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_tightest_ancestor(tmp_path: Path) -> None:
    _write(tmp_path, "proc/self/cgroup", "0::/kubepods/pod1/ctr\n")
    _write(tmp_path, "sys/fs/cgroup/kubepods/memory.max", "max\n")
    _write(tmp_path, "sys/fs/cgroup/kubepods/pod1/memory.max", "8589934592\n")
    _write(tmp_path, "sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "17179869184\n")
    _write(tmp_path, "sys/fs/cgroup/kubepods/pod1/ctr/memory.current", "1073741824\n")
    cg = cgroup_memory(tmp_path)
    assert cg is not None and cg.version == 2
    assert cg.limit_bytes == 8 << 30
    assert cg.usage_bytes == 1 << 30
    assert cg.limit_file is not None and cg.limit_file.endswith("pod1/memory.max")


def test_cgroup_v2_unlimited(tmp_path: Path) -> None:
    _write(tmp_path, "proc/self/cgroup", "0::/user.slice\n")
    _write(tmp_path, "sys/fs/cgroup/user.slice/memory.max", "max\n")
    cg = cgroup_memory(tmp_path)
    assert cg is not None and cg.limit_bytes is None


def test_cgroup_v1_limit_and_unlimited_sentinel(tmp_path: Path) -> None:
    _write(tmp_path, "proc/self/cgroup", "4:memory:/docker/abc\n3:cpu:/\n")
    _write(tmp_path, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    _write(tmp_path, "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "4294967296\n")
    _write(tmp_path, "sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", "100\n")
    cg = cgroup_memory(tmp_path)
    assert (
        cg is not None and cg.version == 1 and cg.limit_bytes == 4 << 30 and cg.usage_bytes == 100
    )
    _write(
        tmp_path, "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n"
    )
    cg = cgroup_memory(tmp_path)
    assert cg is not None and cg.limit_bytes is None


def test_cgroup_namespace_path_missing_falls_back_to_mount_root(tmp_path: Path) -> None:
    # In a cgroup namespace the path in /proc/self/cgroup need not exist under the mount.
    _write(tmp_path, "proc/self/cgroup", "0::/not/here\n")
    _write(tmp_path, "sys/fs/cgroup/memory.max", "2147483648\n")
    cg = cgroup_memory(tmp_path)
    assert cg is not None and cg.limit_bytes == 2 << 30


def test_no_cgroup_visible(tmp_path: Path) -> None:
    assert cgroup_memory(tmp_path) is None


def test_wsl_detection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WSL_DISTRO_NAME", raising=False)
    _write(tmp_path, "proc/sys/kernel/osrelease", "5.15.153.1-microsoft-standard-WSL2\n")
    assert is_wsl(tmp_path)
    assert virtualization(tmp_path)[0] == "wsl2"
    _write(tmp_path, "proc/sys/kernel/osrelease", "6.8.0-45-generic\n")
    assert not is_wsl(tmp_path)


@pytest.mark.parametrize(
    ("vendor", "product", "expected"),
    [
        ("Amazon EC2", "g5.12xlarge", "aws-nitro"),
        ("Google", "Google Compute Engine", "gce"),
        ("Microsoft Corporation", "Virtual Machine", "hyper-v"),
        ("QEMU", "Standard PC (Q35 + ICH9, 2009)", "kvm"),
    ],
)
def test_vm_from_dmi(tmp_path: Path, vendor: str, product: str, expected: str) -> None:
    _write(tmp_path, "sys/class/dmi/id/sys_vendor", vendor)
    _write(tmp_path, "sys/class/dmi/id/product_name", product)
    kind, evidence = virtualization(tmp_path)
    assert kind == expected and vendor in evidence[0]


def test_vm_from_cpu_flag(tmp_path: Path) -> None:
    _write(
        tmp_path, "proc/cpuinfo", "model name\t: Intel Xeon\nflags\t\t: fpu vme hypervisor sse\n"
    )
    assert virtualization(tmp_path)[0] == "vm"
    assert cpu_model(tmp_path) == "Intel Xeon"


def test_container_detection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert container_kind(tmp_path) is None
    _write(tmp_path, "proc/1/cgroup", "0::/kubepods.slice/pod\n")
    assert container_kind(tmp_path) == "kubepods"
    _write(tmp_path, ".dockerenv", "")
    assert container_kind(tmp_path) == "docker"


def test_versions_without_importing_torch() -> None:

    versions = package_versions()
    assert versions["safetensors"] is not None
    assert "torch" in versions


def test_live_probe_is_consistent() -> None:
    s = probe_system()
    assert 0 < s.ram_available_bytes <= s.ram_total_bytes
    assert 1 <= s.cpus_usable <= s.cpus_online
    assert s.memory_headroom_bytes <= s.ram_available_bytes
    assert s.gpu_note


def test_gpus_come_from_the_driver_never_from_torch(tmp_path: Path) -> None:
    """A driver present: nvidia-smi is asked (bounded); torch is never imported for it."""
    import subprocess
    import sys

    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from loadscope.probes.system import gpus_via_driver\n"
        f"gpus, note = gpus_via_driver(Path({str(tmp_path)!r}))\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "print(len(gpus), note)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "NVIDIA driver present" in done.stdout or "nvidia-smi" in done.stdout


def test_driver_and_cuda_build_reach_the_system_info_block(tmp_path: Path) -> None:
    """Issue 20: the System Info block had no CUDA or driver version and printed GPUs as
    raw dicts; what a maintainer asks for first."""
    import json

    from loadscope.probes.system import nvidia_driver_version, torch_cuda_build
    from loadscope.report.markdown import to_markdown

    version = tmp_path / "proc/driver/nvidia/version"
    version.parent.mkdir(parents=True)
    version.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n"
    )
    assert nvidia_driver_version(tmp_path) == "570.86.15"
    assert nvidia_driver_version(tmp_path / "none") is None
    import torch

    assert torch_cuda_build() == (torch.version.cuda or "cpu")  # read without importing
    from loadscope.probes.system import gpu_build

    assert gpu_build("cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n") == "12.8"
    assert gpu_build("cuda: Optional[str] = None\nhip: Optional[str] = '6.2.4'\n") == "ROCm 6.2.4"
    assert gpu_build("cuda = None\nhip = None\n") == "cpu"
    assert gpu_build("something else") is None
    golden = Path(__file__).parents[1] / "golden" / "doctor_emulated.json"
    doc = json.loads(golden.read_text())
    system = doc["probe"]["system"]
    system.update(
        nvidia_driver="570.86.15",
        torch_cuda="12.8",
        gpus=[{"index": 0, "name": "NVIDIA H200", "memory_bytes": 141 << 30}],
    )
    md = to_markdown(doc)
    assert "- torch CUDA build: 12.8" in md and "- NVIDIA driver version: 570.86.15" in md
    assert "  - GPU 0: NVIDIA H200, 141 GiB" in md and "{'index'" not in md
