"""Each probe's record is read where it is declared (issue 50, item 1): the registry holds
every core probe, and no module outside ``probes/`` spells a field of a probe's record as
a string (the way a renderer reads the report's JSON: ``lat["p50_us"]``). A renderer
asks the probe's module instead (``iobench.latency_p50``, ``system.system_info_lines``,
``filestorage.storage_class_of``...), so a field renamed in its record cannot leave a
view reading the old name.

The names below are other things that happen to share a field's name, each with what it
is where it is spelled."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path
from typing import Any

from loadscope.probes.registry import CORE, PROBES
from loadscope.probes.result import ProbeResult

REPO = Path(__file__).resolve().parents[2]
#: Where the probes are declared (their records, runs and the lines each shows).
DECLARATIONS = REPO / "probes"
#: Everything else that ships, which reads the reports.
READERS = ("loadscope", "loaders", "tui", "base")

#: The same word, meaning something else where it is spelled.
OTHER_MEANINGS = {
    "version": "loadscope's own version in the report's head (the tool record)",
    "storage": "the report's section of the probes' figures (its id)",
    "fuse": "a storage class's name and a filesystem type's prefix",
    "wsl": "a storage class's name",
    "read_ahead_kb": "the sysfs file the readahead fix writes, and its evidence's label",
    "max_background": "the sysfs file of a FUSE connection the host settings write",
    "congestion_threshold": "the sysfs file of a FUSE connection the emulator writes",
    "bytes_read": "the warm command's own record",
    "residency": "the auto strategy's decision, as a trial's detail records it",
    "block_bytes": "a strategy's knob (the hints the trials are given, a copy's block)",
    "avg_request_bytes": "a trial's I/O counters (the bench's record)",
    "bytes_per_s": "a trial's own rate (the bench's record)",
    "python": "a code block's language",
    "sample_bytes": "the conversion trial's record",
    "parallel": "a strategy's read kind",
    "name": "a word every record uses",
    "kind": "a word every record uses",
    "path": "a word every record uses",
    "reason": "a word every record uses",
    "device": "a word every record uses",
    "source": "a word every record uses",
    "seconds": "a word every record uses",
    "model": "a word every record uses",
    "size_bytes": "a word every record uses",
    "file": "a word every record uses",
    "directory": "a word every record uses",
    "index": "a word every record uses",
    "detail": "a word every record uses",
    "note": "a word every record uses",
    "samples": "a word every record uses",
    "speed": "a word every record uses",
    "value": "a word every record uses",
    "options": "a word every record uses",
    "args": "a word every record uses",
    "kernel": "the host record's kernel (the report's head)",
    "hostname": "the host record's name (the report's head)",
    "method": "a word every record uses",
    "subtype": "a FUSE daemon's own name for its mount (the emulator's)",
    "mount": "the emulator's own record",
    "disks": "the emulator's own record",
    "transport": "a word every record uses",
}


def _fields(record: Any, seen: set[Any]) -> set[str]:
    """The field names of ``record`` and of every record it holds."""
    if record in seen:
        return set()
    seen.add(record)
    out: set[str] = set()
    origin = typing.get_origin(record)
    for arg in typing.get_args(record):
        out |= _fields(arg, seen)
    if origin is not None or not dataclasses.is_dataclass(record) or record is ProbeResult:
        return out
    hints = typing.get_type_hints(record)
    for f in dataclasses.fields(record):
        out.add(f.name)
        out |= _fields(hints.get(f.name), seen)
    return out


def test_the_registry_holds_every_core_probe() -> None:
    keys = [spec.key for spec in CORE]
    assert keys == ["files", "system", "page_cache", "latency", "throughput", "fio"]
    assert {"local_disks", "hf_cache", "gpus"} <= set(PROBES)
    assert all(PROBES[k] is spec for k, spec in zip(keys, CORE, strict=True))
    # Each declares what the probe block shows of it, and where.
    assert all(spec.shown is not None and spec.part in ("head", "middle") for spec in CORE)


def test_each_records_fields_are_spelled_only_in_its_declaration() -> None:
    names: set[str] = set()
    for spec in PROBES.values():
        names |= _fields(spec.record, set())
    assert {"p50_us", "storage_class", "ram_available_bytes", "read_ahead_kb"} <= names
    spelled: list[str] = []
    for folder in READERS:
        for py in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(py.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and node.value in names
                    and node.value not in OTHER_MEANINGS
                ):
                    spelled.append(f"{py.relative_to(REPO)}:{node.lineno} {node.value!r}")
    assert spelled == [], "read these through their probe's module:\n" + "\n".join(spelled)


def test_every_other_meaning_is_still_a_field_name() -> None:
    """An entry above whose field is gone from every record is a stale exemption."""
    names: set[str] = set()
    for spec in PROBES.values():
        names |= _fields(spec.record, set())
    assert sorted(set(OTHER_MEANINGS) - names) == []


#: The numeric fields that have no unit: counts, ids, settings in their own terms.
COUNTS = {
    "nr_requests": "requests the block layer queues",
    "conn_id": "a FUSE connection's id",
    "waiting": "requests a FUSE connection has waiting",
    "max_background": "requests a FUSE connection sends at once",
    "congestion_threshold": "requests a FUSE connection counts as congested",
    "pages_total": "pages",
    "pages_resident": "pages",
    "cpus_online": "CPUs",
    "cpus_usable": "CPUs",
    "version": "the cgroup's version",
    "index": "a GPU's index",
    "samples": "reads",
    "files_sampled": "files",
    "readers": "threads",
    "requests": "requests",
    "device_requests": "requests",
    "value": "fio's figure, in the unit its job's metric names",
    "detail": "fio's figures, each named with its unit",
    "numa_node": "a NUMA node's id",
    "width": "PCIe lanes",
    "objects": "objects in a store",
    "first_byte_gets": "GETs",
    "gets_in_flight": "GETs",
    "saturates_at": "GETs in flight",
    "generation": "a PCIe generation",
    "pcie_generation": "a PCIe generation",
    "pcie_width": "PCIe lanes",
}


def _numeric(record: Any, seen: set[Any], out: set[str]) -> set[str]:
    if record in seen:
        return out
    seen.add(record)
    for arg in typing.get_args(record):
        _numeric(arg, seen, out)
    if typing.get_origin(record) is not None or not dataclasses.is_dataclass(record):
        return out
    if record is ProbeResult:
        return out
    hints = typing.get_type_hints(record)
    for f in dataclasses.fields(record):
        kinds = (hints[f.name], *typing.get_args(hints[f.name]))
        if any(k in (int, float) for k in kinds) and bool not in kinds:
            out.add(f.name)
        _numeric(hints[f.name], seen, out)
    return out


def test_every_figure_of_a_probe_declares_its_unit_once() -> None:
    """By its name (``probes/spec.py``'s ``UNIT_RULES``): the schema says it, and one
    formatter lays it out for every medium."""
    from loadscope.probes.spec import figure, unit_of
    from loadscope.report.schema import generate

    numeric: set[str] = set()
    for spec in PROBES.values():
        _numeric(spec.record, set(), numeric)
    unitless = sorted(n for n in numeric if unit_of(n) is None)
    assert unitless == sorted(COUNTS), "a figure without a unit: name it by its unit"
    defs = generate()["$defs"]
    latency = defs["LatencyResult"]["properties"]
    assert latency["p50_us"]["x-unit"] == "us" and "x-unit" not in latency["samples"]
    point = defs["ThroughputPoint"]["properties"]
    assert (point["bytes_per_s"]["x-unit"], point["seconds"]["x-unit"]) == ("bytes/s", "s")
    assert [
        figure("ram_available_bytes", 3 << 30),
        figure("bytes_per_s", 1.5e9),
        figure("p50_us", 2100.0),
        figure("read_ahead_kb", 8192),
        figure("max_ratio", 20),
        figure("readers", 16),
        figure("p50_us", None),
    ] == ["3 GiB", "1.5 GB/s", "2.1 ms", "8192 KiB", "20%", "16", "?"]
