"""Size parsing and formatting."""

from __future__ import annotations

import pytest

from loadscope.base.units import format_bytes, format_speedup, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("1K", 1024),
        ("512MiB", 512 << 20),
        ("2GiB", 2 << 30),
        ("2gib", 2 << 30),
        ("1.5GB", 1_500_000_000),
        ("1.5 GiB", 3 << 29),
        ("10MB", 10_000_000),
        ("1T", 1 << 40),
        ("7b", 7),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "-1GiB", "1.2.3G", "3 parsecs", "1e9"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (512 << 20, "512 MiB"),
        ((1 << 30) - 4096, "1 GiB"),
        (99.96 * (1 << 20), "100 MiB"),
        (3 << 40, "3 TiB"),
        (5 << 50, "5 PiB"),
    ],
)
def test_format_bytes(n: float, expected: str) -> None:
    assert format_bytes(n) == expected


@pytest.mark.parametrize(
    ("x", "shown"),
    [
        (18.64, "18.6x"),
        (1.05, "1.1x"),
        (1.02, "1.02x"),
        (0.998, "1.00x"),  # not "slower" for a digit the text hides
        (0.95, "0.95x, slower here"),  # was "1.0x, slower here"
        (0.5, "0.50x, slower here"),
        (0.05, "0.1x, slower here"),
    ],
)
def test_format_speedup_never_shows_a_loss_as_1x(x: float, shown: str) -> None:
    assert format_speedup(x) == shown
