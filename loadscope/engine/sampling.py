"""Sampling a model too big for the budget, and extrapolating sampled trials to the whole.

Owns what a sampled run reads and how its times become whole-model times:

* :func:`choose_sample`: runs of consecutive tensors spread across every shard and
  across each file, for strategies that read exactly the tensors they are asked for;
* :func:`smaller_sample`: the fit's smaller sizes of the same kind (a quarter, and in
  runs of two rounds or more a half), so that each strategy's times at two sizes give a
  fixed cost and a rate, and at three the line's own error (a time that does not grow
  in proportion to the bytes shows as scatter around it);
* :func:`choose_shards`: a subset of *whole files* for strategies that load whole
  files whatever tensors they are asked for (the peers): their sample is whole shards;
* :func:`fit`: the fixed cost and rate from the trials' (bytes, seconds) points, the
  whole-model time they predict and that prediction's measured error.

A strategy in a sampled run is in one of three scopes, recorded per trial and per
summary: ``sampled`` (it read the sample), ``shards`` (it read whole files of a
subset), ``whole`` (it read the whole model: nothing extrapolated). One that fits
none of them is skipped by the caller with the reason.

Imports the loaders' header reader and the targets' file records only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from loadscope.loaders.safetensors_format import read_header
from loadscope.model.targets import WeightFile

Scope = Literal["sampled", "shards", "whole"]
SampleSet = dict[Path, tuple[str, ...]]
#: The second size is this fraction of the first (bytes): far enough apart that the
#: fixed cost and the rate separate, small enough to cost a quarter of a trial.
SMALL_FRACTION = 0.25
#: The third size, in runs of two rounds or more: a line through three sizes can be
#: checked against them, so the fit's error includes how far the times are from a line.
MIDDLE_FRACTION = 0.5


def fit_fractions(rounds: int) -> tuple[float, ...]:
    """The fit trials' sizes, as fractions of the sample, in a run of ``rounds`` rounds:
    a quarter after round 1, and a half after round 2 when there is one."""
    return (SMALL_FRACTION, MIDDLE_FRACTION) if rounds >= 2 else (SMALL_FRACTION,)


#: With only two points (nothing to check the line against), a fitted fixed cost above
#: this fraction of the smaller trial is not believed.
MAX_UNCHECKED_FIXED = 0.5
#: A whole-file sample may overshoot the asked bytes by this much.
SHARD_OVERSHOOT = 1.5


def choose_sample(
    files: list[WeightFile], sample_bytes: int, windows_per_file: int = 1
) -> SampleSet:
    """Runs of consecutive tensors, ``windows_per_file`` per file, totalling ~``sample_bytes``.

    Spread across every shard, so the sample meets the model's mix of tensors. One
    window per file by default: each window is read the way a file is (a fresh
    sequential run, one per file, as in the whole load), so its start-up costs are
    counted as often as the whole load pays them. Four windows per file measured
    +77% for ``auto`` and -75% for ``parallel`` against whole loads on the emulated
    disk (every window restarts readahead and the reader pool). When the tensors are
    too big for that many windows to reach the size, fewer and longer windows are taken.
    """
    for windows in range(windows_per_file, 0, -1):
        out = _windows(files, sample_bytes, windows)
        if windows == 1 or sample_size(files, out)[0] >= 0.6 * sample_bytes:
            return out
    return out


def _windows(files: list[WeightFile], sample_bytes: int, windows_per_file: int) -> SampleSet:
    total = sum(f.size_bytes for f in files) or 1
    out: SampleSet = {}
    for wf in files:
        header = read_header(wf.path)
        per_window = sample_bytes * wf.size_bytes / total / windows_per_file
        chosen: dict[str, None] = {}
        n = len(header.tensors)
        for w in range(windows_per_file):
            i = int(w * n / windows_per_file)
            got = 0
            while i < n and got < per_window:
                t = header.tensors[i]
                i += 1
                if t.name in chosen:
                    break  # the previous window: this one has met it
                if got + t.nbytes > 1.5 * per_window:
                    # A tensor that would overshoot the window by half ends it (or, at
                    # its start, moves the start past it): a window is one contiguous
                    # span, never a run with holes, which reads slower than the model
                    # does (readahead restarts at every hole: +20% per byte measured).
                    if got:
                        break
                    continue
                chosen[t.name] = None
                got += t.nbytes
        if not chosen and header.tensors:
            chosen[min(header.tensors, key=lambda t: t.nbytes).name] = None
        if chosen:
            # File order, so that each run of neighbours is read as one span.
            order = {t.name: i for i, t in enumerate(header.tensors)}
            out[wf.path] = tuple(sorted(chosen, key=order.__getitem__))
    return out


def sample_size(files: list[WeightFile], sample: SampleSet) -> tuple[int, int]:
    """Bytes and tensors the sample holds."""
    nbytes = count = 0
    for wf in files:
        names = set(sample.get(wf.path, ()))
        for t in read_header(wf.path).tensors:
            if t.name in names:
                nbytes += t.nbytes
                count += 1
    return nbytes, count


def smaller_sample(
    files: list[WeightFile], sample: SampleSet, fraction: float = SMALL_FRACTION
) -> SampleSet | None:
    """The same kind of sample at about ``fraction`` of the bytes, or None when it would
    not be clearly smaller (a sample of one tensor per file cannot shrink)."""
    big, _ = sample_size(files, sample)
    small = choose_sample(files, int(big * fraction))
    nbytes, _ = sample_size(files, small)
    return small if 0 < nbytes <= (fraction + 0.35) * big else None


def _spread(files: list[WeightFile], k: int) -> list[WeightFile]:
    """``k`` of the files at evenly spaced positions (first, middle, last ...)."""
    n = len(files)
    return [files[int((i + 0.5) * n / k)] for i in range(k)]


def choose_shards(files: list[WeightFile], sample_bytes: int) -> SampleSet | None:
    """Whole files, evenly spread, totalling about ``sample_bytes`` (at most 1.5x of it)
    and fewer than all of them; None when no such subset exists (one file, or files
    each much bigger than the sample)."""
    best: list[WeightFile] | None = None
    for k in range(1, len(files)):
        subset = _spread(files, k)
        nbytes = sum(f.size_bytes for f in subset)
        if nbytes > SHARD_OVERSHOOT * sample_bytes:
            break
        best = subset
        if nbytes >= sample_bytes:
            break
    if not best:
        return None
    return {f.path: tuple(t.name for t in read_header(f.path).tensors) for f in best}


def smaller_shards(files: list[WeightFile], shards: SampleSet) -> SampleSet | None:
    """Half of the chosen files (at least one, fewer than all), or None for one file."""
    chosen = [f for f in files if f.path in shards]
    if len(chosen) < 2:
        return None
    return {f.path: shards[f.path] for f in _spread(chosen, len(chosen) // 2)}


@dataclass(frozen=True, slots=True)
class Fit:
    """A whole-model time from sampled trials: ``seconds = fixed_s + bytes / bytes_per_s``."""

    seconds: float
    fixed_s: float
    bytes_per_s: float
    #: Relative standard error of ``seconds`` (the fit's prediction error at the whole
    #: model's size, from the scatter of the points around the line, plus how far a
    #: constrained fit moved it); None where the points cannot measure it.
    error: float | None
    #: Distinct sizes and points the fit stands on.
    sizes: int
    points: int
    note: str = ""
    #: Of ``fixed_s``, a set-up the trials measured apart (added to the fitted line).
    setup_s: float = 0.0


def fit(points: list[tuple[int, float]], total_bytes: int) -> Fit | None:
    """The fixed cost and rate that best explain ``(bytes, seconds)`` points, and the
    time they predict for ``total_bytes`` with its error; None without a point.

    Two or more sizes: least squares of seconds on bytes. A negative fixed cost (the
    times grow faster than the bytes, e.g. readahead still ramping up on the small
    size) is not physical: the line is then forced through zero and the distance
    between the two predictions is added to the error. One size: the time scales
    with the bytes (no fixed cost can be told apart); the error is then the
    repeats' spread.
    """
    pts = [(x, y) for x, y in points if x > 0 and y > 0]
    if not pts:
        return None
    n = len(pts)
    sizes = len({x for x, _ in pts})
    if sizes < 2:
        ys = [y for _, y in pts]
        err = statistics.stdev(ys) / statistics.median(ys) / math.sqrt(n) if n >= 2 else None
        return _scaled(pts, total_bytes, 1, "one size: scaled with the bytes", err)
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    intercept = my - slope * mx
    if slope <= 0:
        # The bigger loads were not slower: noise dominates; scale the biggest size. Its
        # error: how far the smallest size, scaled the same way, lands from it.
        return _scaled(
            pts,
            total_bytes,
            sizes,
            "the times did not grow with the bytes: scaled from the biggest size",
            _disagreement(
                _scaled(pts, total_bytes, sizes, "").seconds, _smallest(pts, total_bytes)
            ),
        )
    small = min(x for x, _ in pts)
    if n == 2 and intercept > MAX_UNCHECKED_FIXED * min(y for x, y in pts if x == small):
        # Two points always fit a line exactly: a fixed cost that is most of the smaller
        # trial cannot be told from noise there (a 2x slow small trial made a 5.8 s load
        # look like 1.0 s). Scale from the bigger size instead, and say so.
        # Its error: how far the line through the same two points lands from it (at 1 GiB
        # a 5% sample scaled said 1.28 s, the line 0.70 s, a whole load took 0.78 s).
        scaled = _scaled(
            pts,
            total_bytes,
            sizes,
            "two points with a fixed cost over half the smaller trial: scaled from the bigger size",
        )
        return replace(scaled, error=_disagreement(scaled.seconds, intercept + slope * total_bytes))
    linear = intercept + slope * total_bytes
    noise: float | None = None
    if n > 2:
        resid = sum((y - (intercept + slope * x)) ** 2 for x, y in pts) / (n - 2)
        noise = math.sqrt(resid * (1 / n + (total_bytes - mx) ** 2 / sxx))
    note = ""
    fixed = intercept
    if intercept < 0:
        slope = sum(x * y for x, y in pts) / sum(x * x for x, _ in pts)
        fixed = 0.0
        note = "the times grew faster than the bytes: no fixed cost fitted"
    seconds = fixed + slope * total_bytes
    moved = abs(linear - seconds)
    # Two points measure no scatter; a constrained line still says how far it moved.
    error = None if noise is None and moved == 0 else math.hypot(noise or 0.0, moved) / seconds
    return Fit(seconds, fixed, 1 / slope, error, sizes, n, note)


def _disagreement(estimate: float, other: float) -> float:
    """How far ``other``, another reading of the same points, lands from ``estimate``."""
    return abs(other - estimate) / estimate if estimate > 0 else math.inf


def _smallest(pts: list[tuple[int, float]], total_bytes: int) -> float:
    small = min(x for x, _ in pts)
    return statistics.median(y for x, y in pts if x == small) * total_bytes / small


def _scaled(
    pts: list[tuple[int, float]],
    total_bytes: int,
    sizes: int,
    note: str,
    error: float | None = None,
) -> Fit:
    """No fixed cost: the biggest size's median time scaled with the bytes."""
    big = max(x for x, _ in pts)
    med = statistics.median(y for x, y in pts if x == big)
    return Fit(med * total_bytes / big, 0.0, big / med, error, sizes, len(pts), note)


def extrapolate(seconds: float, nbytes: int, total_bytes: int, fitted: Fit) -> float:
    """One trial's whole-model time: the fitted fixed cost plus its own rate scaled."""
    fixed = min(fitted.fixed_s, seconds)
    return fixed + (seconds - fixed) * total_bytes / max(nbytes, 1)


def error_text(value: float | None) -> str:
    """A relative error as a report prints it: ``±6%``, ``±<1%``, or ``±?`` (unmeasured)."""
    return "±?" if value is None else f"±{value:.0%}" if value >= 0.01 else "±<1%"


def whole_seconds_text(summary: Mapping[str, Any]) -> str:
    """A bench summary's whole-model seconds for a report: measured (``12.3``), or
    extrapolated with the fit's error (``~12.3 ±6%``)."""
    extra = summary.get("extrapolated_median_seconds")
    if extra is None:
        return f"{summary['median_seconds']:.3g}"
    return f"~{extra:.3g} {error_text(summary.get('error_estimate'))}"


def whole_rate(summary: Mapping[str, Any], total_bytes: int) -> float | None:
    """The whole model's bytes per second behind :func:`whole_seconds_text`."""
    extra = summary.get("extrapolated_median_seconds")
    if extra and total_bytes:
        return total_bytes / float(extra)
    rate = summary.get("median_bytes_per_s")
    return float(rate) if rate else None
