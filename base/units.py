"""Byte sizes: parse what users type (``2GiB``, ``512M``, ``1.5GB``) and print sizes for people."""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 10**3,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 10**6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 10**9,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 10**12,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Parse a byte size. ``K/M/G/T`` and ``KiB/MiB/...`` are binary (as in dd and fio),
    ``KB/MB/GB/TB`` are decimal. Raises ``ValueError`` with a readable message."""
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (examples: 512MiB, 2GiB, 1.5GB, 4096)")
    number, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(
            f"unknown size unit {unit!r} in {text!r} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
        )
    return int(float(number) * factor) if "." in number else int(number) * factor


def format_bytes(n: int | float) -> str:
    """``1536 -> '1.5 KiB'``; binary units, three significant digits."""
    value = float(n)
    if abs(value) < 1024:
        return f"{int(value)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        text = f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
        if abs(float(text)) < 1024 or unit == "PiB":
            return f"{text} {unit}"
    raise AssertionError("unreachable")


def format_rate(bytes_per_s: float) -> str:
    """Throughput in decimal units, as dd and fio print it: ``'1.52 GB/s'``."""
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.3g} {unit}"
    return f"{bytes_per_s:.0f} B/s"


def format_us(us: float) -> str:
    """A latency in the unit that reads best: ``'87 us'``, ``'1.29 ms'``, ``'2.1 s'``."""
    if us < 1000:
        return f"{us:.0f} us"
    if us < 1_000_000:
        return f"{us / 1000:.3g} ms"
    return f"{us / 1_000_000:.3g} s"


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "": 1.0}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zµ]*)\s*$")


def speedup_shown(x: float) -> tuple[str, bool]:
    """(``3.1x``, slower as shown): near 1 two decimals (``1.02x``), so that a loss is
    never shown as ``1.0x``, and 0.998 (``1.00x``) is not called slower for a digit the
    text hides."""
    shown = f"{x:.1f}" if x >= 1.05 or x < 0.095 else f"{x:.2f}"
    return f"{shown}x", float(shown) < 1


def format_speedup(x: float) -> str:
    """``3.1x``, ``1.02x``; below 1 as shown, ``0.95x, slower here``."""
    shown, slower = speedup_shown(x)
    return f"{shown}, slower here" if slower else shown


def parse_duration(text: str) -> float:
    """``'2ms' -> 0.002``; units ns, us, ms, s (bare numbers are seconds)."""
    match = _DURATION_RE.match(text)
    if not match or match.group(2) not in _DURATION_UNITS:
        raise ValueError(f"not a duration: {text!r} (examples: 2ms, 500us, 0.5s)")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def parse_rate(text: str) -> float:
    """``'200MB/s' -> 2e8`` bytes per second (the size units of :func:`parse_size`)."""
    body = text.strip()
    if body.lower().endswith("/s"):
        body = body[:-2]
    try:
        return float(parse_size(body))
    except ValueError:
        raise ValueError(f"not a rate: {text!r} (examples: 200MB/s, 1.5GB/s, 100MiB/s)") from None
