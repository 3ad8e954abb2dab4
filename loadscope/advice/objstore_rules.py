"""The verdict and the fixes for a model in an object store (``s3://``, ``gs://``,
``az://``), from the object-store probe and the store strategies' cold trials.

The bound comes from the probe (request latency, one connection's bandwidth, the link);
the servers' route is Run:ai's streamer, which vLLM and SGLang pick for such a path: at
its defaults it is the baseline every number here is taken against, and the fix is its
concurrency raised to where the probe found the rate stops rising, timed as
``runai-store-tuned`` (the streamer with ``RUNAI_STREAMER_CONCURRENCY`` set, which is what
``--model-loader-extra-config '{"concurrency": N}'`` sets). A route whose trial did not
run says so, with no number.

May import: ``loadscope.advice.facts``, ``loadscope.advice.results``,
``loadscope.advice.snippets``, ``loadscope.advice.source_rules`` (the cold medians),
``loadscope.base``.
"""

from __future__ import annotations

import json
import shlex

from loadscope.advice.facts import Facts
from loadscope.advice.results import Advice, Evidence, Recommendation, Verdict
from loadscope.advice.snippets import Snippet
from loadscope.advice.source_rules import cold_medians, unmeasured
from loadscope.base.units import format_bytes, format_rate, format_speedup

#: The store strategies (``loaders/strategies/objstore.py``), by role.
BASELINE = "runai-store"
TUNED = "runai-store-tuned"
OWN = "store-ranged"
NAIVE = "store-get"
#: The recommendations' ids.
STREAM_CONCURRENCY = "stream-concurrency"
MANY_GETS = "many-ranged-gets"
#: What makes a route worth printing as a fix (x its baseline).
WORTH_IT = 1.2
#: The settings an S3-compatible endpoint needs for Run:ai's streamer (its trials ran
#: with them; ``loaders/strategies/objstore.py`` sets the same).
COMPATIBLE_ENV = "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0 AWS_EC2_METADATA_DISABLED=true"


def bound_words(f: Facts) -> str:
    """The probe's bound in a few words ("the link at 946 MB/s from 32 GETs in flight")."""
    bound = f.probed.get("store_bound")
    ceiling = f.probed.get("store_ceiling_bytes_per_s")
    saturates = f.probed.get("store_saturates_at")
    if not bound or not ceiling:
        return "the store's bound was not measured"
    where = f" from {saturates} GETs in flight" if saturates else ""
    named = "the link" if bound == "link" else bound
    return f"bound by {named} (ceiling {format_rate(ceiling)}{where})"


def advise_object_store(
    f: Facts, source_title: str, address: str, compatible_endpoint: bool
) -> Advice:
    """The verdict, and the streamer's concurrency as the fix where it measured faster."""
    timed = cold_medians(f)
    if not timed:
        return unmeasured(source_title)
    best_s, best = timed[0]
    problem = f"{source_title}, {bound_words(f)}"
    headline = (
        f"{problem}: {best} loads the {format_bytes(f.model_bytes)} in {best_s:.3g} s"
        f" ({format_rate(f.model_bytes / best_s)})"
    )
    base = f.cold.get(BASELINE)
    if base is not None and base.median_seconds and best != BASELINE:
        headline += (
            f", {format_speedup(base.median_seconds / best_s)} Run:ai streamer at its defaults"
        )
    notes = []
    recommendations = []
    # Against the servers' route at its defaults where it ran, else a single stream.
    baseline = BASELINE if base is not None and base.median_seconds else NAIVE
    own = _gain(f, baseline, OWN)
    if own is not None and own[1] >= WORTH_IT:
        recommendations.append(_own_reader_fix(address, baseline, *own))
    tuned = f.cold.get(TUNED)
    by_tuning = _gain(f, BASELINE, TUNED)
    # (Printed only with the probe's N, which the command carries.)
    if by_tuning is not None and by_tuning[1] >= WORTH_IT and f.probed.get("store_saturates_at"):
        recommendations.append(
            _concurrency_fix(f, address, compatible_endpoint, by_tuning[0], by_tuning[1])
        )
    elif base is None or tuned is None:
        notes.append(
            "Run:ai streamer not measured here (pip install 'loadscope[object-store]'"
            " runai-model-streamer-s3): the servers' route has no number"
        )
    recommendations.sort(key=lambda r: -(r.expected_speedup or 0.0))
    verdict = Verdict("problem" if recommendations else "healthy", headline, problem=problem)
    return Advice(verdict, recommendations, notes)


def _gain(f: Facts, base: str, other: str) -> tuple[float, float] | None:
    """``base``'s cold median, and it over ``other``'s; None where either has none."""
    a, b = f.cold.get(base), f.cold.get(other)
    if a is None or b is None or not a.median_seconds or not b.median_seconds:
        return None
    return a.median_seconds, a.median_seconds / b.median_seconds


def _concurrency_fix(
    f: Facts, address: str, compatible: bool, base_s: float, speedup: float
) -> Recommendation:
    concurrency = f.probed.get("store_saturates_at") or 0
    median = base_s / speedup
    config = shlex.quote(json.dumps({"concurrency": concurrency}))
    env = f"{COMPATIBLE_ENV} " if compatible else ""
    flag = f"--load-format runai_streamer --model-loader-extra-config {config}"
    where = shlex.quote(address)
    proxy = (
        f"timed: runai-model-streamer with RUNAI_STREAMER_CONCURRENCY={concurrency},"
        " the setting this flag makes"
    )
    snippets = [
        Snippet(
            "vllm",
            f"{env}vllm serve {where} {flag}",
            TUNED,
            "a flag",
            "concurrency",
            speedup,
            BASELINE,
            proxy=proxy,
        ),
        Snippet(
            "sglang",
            f"{env}python -m sglang.launch_server --model-path {where} {flag}",
            TUNED,
            "a flag",
            "concurrency",
            speedup,
            BASELINE,
            proxy=proxy,
        ),
    ]
    return Recommendation(
        STREAM_CONCURRENCY,
        f"Stream with {concurrency} GETs in flight",
        f"Run:ai's streamer keeps 8 GETs in flight by default; the store's rate here stops"
        f" rising at {concurrency}: {format_speedup(speedup)} faster in the trials",
        strategy=TUNED,
        route="--model-loader-extra-config concurrency",
        expected_speedup=speedup,
        evidence=[
            Evidence("Run:ai streamer at its defaults", base_s, "s"),
            Evidence(f"at {concurrency} GETs in flight", median, "s"),
        ],
        snippets=snippets,
    )


def load_model_code(address: str) -> str:
    """The code the many-GETs fix prints for a model at ``address``."""
    return f"import loadscope\nstate = loadscope.load_model({address!r})"


def _own_reader_fix(address: str, baseline: str, base_s: float, speedup: float) -> Recommendation:
    """``loadscope.load_model(address)``: its trial is ``store-ranged``, that very call."""
    own_s = base_s / speedup
    against = "Run:ai streamer at its defaults" if baseline == BASELINE else "one GET per object"
    code = load_model_code(address)
    return Recommendation(
        MANY_GETS,
        "Read with many ranged GETs in flight",
        f"loadscope.load_model reads a bucket's model with many ranged GETs in flight into"
        f" one buffer per object: {format_speedup(speedup)} faster than {against} here",
        strategy=OWN,
        route="loadscope.load_model (s3)",
        expected_speedup=speedup,
        evidence=[Evidence(against, base_s, "s"), Evidence("loadscope.load_model", own_s, "s")],
        snippets=[
            Snippet(
                "safetensors", code, OWN, "code change", "loadscope.load_model", speedup, baseline
            )
        ],
    )
