"""The fix in the user's own stack: one snippet per stack, each with the trial of its own code.

A recommendation says *what* to change; its snippets say *how* in safetensors,
transformers, diffusers, vLLM, SGLang and the shell. Each loading snippet names the
strategy whose trial ran that very code (``ROUTES``: vLLM's prefetch flag is the
``vllm-prefetch`` trial, ``loadscope.load_file`` the ``api`` trial, "run
``loadscope warm`` first" the ``prewarm`` trial, ``disable_mmap``/``eager`` the
``fullread`` trial), and carries that trial's measured speed-up over the default
load — or "not measured here" with the reason, never another strategy's number.
Snippets that are commands rather than loads (re-measure, copy, dmesg) carry no
number at all. Paths in the code are the user's own, quoted for the language. A
library's lines are shown only for a folder saved for it (``Measured.layout``: no
``DiffusionPipeline`` for a language model), and each runs as printed
(``tests/unit/test_hf_routes_run.py`` executes every transformers and diffusers line).

This module only formats: the numbers come from a :class:`Measured` (the advice's
facts), so it imports nothing above the base layer.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from loadscope.base.hf_layout import (
    DIFFUSERS_MODEL,
    DIFFUSERS_PIPELINE,
    TRANSFORMERS,
    UNKNOWN,
)
from loadscope.base.units import speedup_shown

#: The stacks a load snippet is written for, in the order they are shown.
STACKS = ("safetensors", "transformers", "diffusers", "vllm", "sglang", "shell")


@dataclass(slots=True)
class Snippet:
    """Code for one stack, and what it rests on."""

    stack: str
    code: str
    #: The trial strategy that ran this code; None for a command that is not a load.
    strategy: str | None = None
    #: How it applies: "code change", "a flag", "no code change"; and in a few words.
    route: str = ""
    what: str = ""
    #: Measured cold speed-up over ``baseline`` (the stack's default load), and its trials.
    speedup: float | None = None
    baseline: str = "mmap"
    trial_ids: list[int] = field(default_factory=list)
    #: "not measured here: ..." when this snippet's strategy has no cold trial.
    note: str = ""
    #: Set when the number is a stand-in's: what was timed instead of the snippet's call.
    proxy: str = ""
    #: How the number was obtained: "measured" (whole loads) or "estimated ±E%" (a fit).
    how: str = "measured"

    def label(self) -> str:
        """The line shown under the stack's name: the number, or why there is none."""
        return label_of(asdict(self))


class Measured(Protocol):
    """What the snippets need from the trials (the advice's facts implement it)."""

    def speedup(self, strategy: str, cache: str = "cold", base_name: str = "mmap") -> float | None:
        """Cold speed-up of ``strategy`` over mmap, None when not measured."""
        ...

    def cold_trial_ids(self, strategy: str) -> list[int]:
        """The cold trials of ``strategy``."""
        ...

    def why_not_measured(self, strategy: str) -> str | None:
        """Why ``strategy`` has no cold trial here (skipped, failed), if known."""
        ...

    #: Which library the model's folder is saved for (``base/hf_layout.py``): a route for
    #: one library is shown only for its folders. Read with ``""`` (unknown) as default.
    layout: str

    def how_obtained(self, strategy: str, base_name: str = "mmap") -> str:
        """ "measured", or "estimated ±E%" when either figure is a fit's."""
        ...


@dataclass(frozen=True, slots=True)
class Route:
    stack: str
    route: str
    strategy: str
    #: The change in a few words ("--load-format fastsafetensors", "loadscope warm first").
    what: str
    #: Code with ``{py}`` (the model as loadscope and safetensors name it: a folder, a
    #: file, an index, as a Python string) and ``{sh}`` (for a shell); ``{dir_py}`` and
    #: ``{dir_sh}``: the folder (or repo id) the HF stacks and servers take.
    template: str
    #: The trial this route's speed-up is measured against: the stack's own default.
    baseline: str = "mmap"
    #: Shown only when this strategy has no trial (a generic stand-in for a stack-specific
    #: route: the transformers routes timed as ``load_file`` when from_pretrained was not;
    #: a peer's CPU mode where its GPU mode, the one the server runs there, was timed).
    unless: str | None = None
    #: What a stand-in's number is, said beside it (it is not the snippet's own call).
    proxy: str = ""
    #: How to measure a route the diagnosis does not run.
    measure_with: str = ""
    #: The folder layouts the code runs on (``Measured.layout``); empty: any.
    layouts: tuple[str, ...] = ()


#: transformers' code fails on a diffusers folder; unknown folders keep their lines.
_NOT_DIFFUSERS = (TRANSFORMERS, UNKNOWN)


#: ``loadscope.from_pretrained``: load_model's reads put into the model from_pretrained
#: would build, with no random init; the ``hf-load-model`` trial runs that same function.
_TRANSFORMERS_LOAD_MODEL = (
    "import loadscope  # AutoModelForCausalLM.from_pretrained, its weights read by loadscope\n"
    "model = loadscope.from_pretrained({py})"
)
#: from_pretrained as users call it (the ``hf-pretrained`` trial's code).
_TRANSFORMERS_PRETRAINED = (
    "from transformers import AutoModelForCausalLM\n"
    "model = AutoModelForCausalLM.from_pretrained({dir_py})"
)

#: Every way a stack can load the model differently, by the trial that measures it.
ROUTES: tuple[Route, ...] = (
    Route(
        "safetensors",
        "code change",
        "api",
        "loadscope.load_file",
        "import loadscope  # loadscope.load_file(p) is a drop-in for load_file(p)\n"
        "state = loadscope.load_model({py})",
    ),
    Route(
        "safetensors",
        "code change",
        "fullread",
        "load(f.read())",
        "from safetensors.torch import load\n"
        "with open(path, 'rb') as f:  # each .safetensors file\n"
        "    state = load(f.read())",
    ),
    Route(
        "transformers",
        "no code change",
        "hf-prewarm",
        "loadscope warm first",
        "# run first: loadscope warm {sh}\n" + _TRANSFORMERS_PRETRAINED,
        baseline="hf-pretrained",
        layouts=_NOT_DIFFUSERS,
    ),
    Route(
        "transformers",
        "code change",
        "hf-load-model",
        "loadscope.from_pretrained",
        _TRANSFORMERS_LOAD_MODEL,
        baseline="hf-pretrained",
        measure_with="loadscope bench MODEL --strategies hf-pretrained,hf-load-model",
        layouts=_NOT_DIFFUSERS,
    ),
    Route(
        "transformers",
        "no code change",
        "prewarm",
        "loadscope warm first",
        "# run first: loadscope warm {sh}\n" + _TRANSFORMERS_PRETRAINED,
        unless="hf-pretrained",
        proxy="the same reads timed with load_file; from_pretrained itself not timed here",
        layouts=_NOT_DIFFUSERS,
    ),
    Route(
        "transformers",
        "a flag",
        "fullread",
        "disable_mmap=True",
        # Each safetensors file read whole and its bytes load()ed: the fullread trial's reads.
        "from transformers import AutoModelForCausalLM  # disable_mmap: transformers >= 5.6\n"
        "model = AutoModelForCausalLM.from_pretrained({dir_py}, disable_mmap=True)",
        proxy="the same reads timed as load(f.read()); from_pretrained itself not timed here",
        layouts=_NOT_DIFFUSERS,
    ),
    Route(
        "diffusers",
        "no code change",
        "prewarm",
        "loadscope warm first",
        "# run first: loadscope warm {sh}\n"
        "from diffusers import DiffusionPipeline\n"
        "pipe = DiffusionPipeline.from_pretrained({dir_py})",
        proxy="the same reads timed with load_file; from_pretrained itself not timed here",
        layouts=(DIFFUSERS_PIPELINE,),
    ),
    Route(
        "diffusers",
        "a flag",
        "fullread",
        "disable_mmap=True",
        "from diffusers import DiffusionPipeline  # disable_mmap: diffusers >= 0.37\n"
        "pipe = DiffusionPipeline.from_pretrained({dir_py}, disable_mmap=True)",
        proxy="the same reads timed as load(f.read()); from_pretrained itself not timed here",
        layouts=(DIFFUSERS_PIPELINE,),
    ),
    Route(
        "diffusers",
        "no code change",
        "prewarm",
        "loadscope warm first",
        "# run first: loadscope warm {sh}\n"
        "from diffusers import AutoModel\n"
        "model = AutoModel.from_pretrained({dir_py})",
        proxy="the same reads timed with load_file; from_pretrained itself not timed here",
        layouts=(DIFFUSERS_MODEL,),
    ),
    Route(
        "diffusers",
        "a flag",
        "fullread",
        "disable_mmap=True",
        "from diffusers import AutoModel  # disable_mmap: diffusers >= 0.37\n"
        "model = AutoModel.from_pretrained({dir_py}, disable_mmap=True)",
        proxy="the same reads timed as load(f.read()); from_pretrained itself not timed here",
        layouts=(DIFFUSERS_MODEL,),
    ),
    Route(
        "vllm",
        "a flag",
        "vllm-prefetch",
        "--safetensors-load-strategy prefetch",
        "vllm serve {dir_sh} --safetensors-load-strategy prefetch",
    ),
    Route(
        "vllm",
        "a flag",
        "fullread",
        "--safetensors-load-strategy eager",
        "vllm serve {dir_sh} --safetensors-load-strategy eager",
    ),
    Route(
        "vllm",
        "a flag",
        "fastsafetensors",
        "--load-format fastsafetensors",
        "vllm serve {dir_sh} --load-format fastsafetensors",
        unless="mmap-cuda",
    ),
    Route(
        "vllm",
        "a flag",
        "fastsafetensors-gds",
        "--load-format fastsafetensors",
        "vllm serve {dir_sh} --load-format fastsafetensors",
        baseline="mmap-cuda",
    ),
    Route(
        "vllm",
        "a flag",
        "runai",
        "--load-format runai_streamer",
        "vllm serve {dir_sh} --load-format runai_streamer",
        unless="mmap-cuda",
    ),
    Route(
        "vllm",
        "a flag",
        "runai-cuda",
        "--load-format runai_streamer",
        "vllm serve {dir_sh} --load-format runai_streamer",
        baseline="mmap-cuda",
    ),
    Route(
        "vllm",
        "no code change",
        "prewarm",
        "loadscope warm first",
        "loadscope warm {sh} && vllm serve {dir_sh}",
    ),
    Route(
        "sglang",
        "a flag",
        "fullread",
        "--weight-loader-disable-mmap",
        "python -m sglang.launch_server --model-path {dir_sh} --weight-loader-disable-mmap",
    ),
    Route(
        "sglang",
        "a flag",
        "fastsafetensors",
        "--load-format fastsafetensors",
        "python -m sglang.launch_server --model-path {dir_sh} --load-format fastsafetensors",
        unless="mmap-cuda",
    ),
    Route(
        "sglang",
        "a flag",
        "fastsafetensors-gds",
        "--load-format fastsafetensors",
        "python -m sglang.launch_server --model-path {dir_sh} --load-format fastsafetensors",
        baseline="mmap-cuda",
    ),
    Route(
        "sglang",
        "a flag",
        "runai",
        "--load-format runai_streamer",
        "python -m sglang.launch_server --model-path {dir_sh} --load-format runai_streamer",
        unless="mmap-cuda",
    ),
    Route(
        "sglang",
        "a flag",
        "runai-cuda",
        "--load-format runai_streamer",
        "python -m sglang.launch_server --model-path {dir_sh} --load-format runai_streamer",
        baseline="mmap-cuda",
    ),
    Route(
        "sglang",
        "no code change",
        "prewarm",
        "loadscope warm first",
        "loadscope warm {sh} && python -m sglang.launch_server --model-path {dir_sh}",
    ),
    Route(
        "shell",
        "no code change",
        "prewarm",
        "loadscope warm",
        "loadscope warm {sh}   # before the stack starts",
    ),
    # The GPU route: measured against safetensors' own device load (``mmap-cuda``).
    Route(
        "safetensors",
        "code change",
        "api-cuda",
        "loadscope.load_file(p, device='cuda')",
        "import loadscope  # to the GPU through pinned buffers, copies overlapped with reads\n"
        "state = loadscope.load_model({py}, device='cuda')",
        baseline="mmap-cuda",
    ),
)

#: Which routes each kind of fix shows (by the strategies they run).
FIX_STRATEGIES: dict[str, frozenset[str]] = {
    # To the GPU without safetensors' pageable per-tensor copies: the public API's pinned
    # staging, and the servers' peer loaders in their GPU modes.
    "gpu-staged": frozenset({"api-cuda", "fastsafetensors-gds", "runai-cuda"}),
    # Many large requests in flight: the public API, the no-code-change prewarm, and the
    # stacks' own parallel or prefetching loaders.
    "parallel-reads": frozenset(
        {"api", "prewarm", "vllm-prefetch", "fastsafetensors", "runai", "hf-prewarm"}
        | {"hf-load-model"}
    ),
    "read-whole-files": frozenset({"fullread"}),
    "prewarm": frozenset({"prewarm", "vllm-prefetch", "hf-prewarm"}),
}


def load_snippets(fix: str, measured: Measured, model: str) -> list[Snippet]:
    """Every stack's routes for ``fix``, measured ones first (fastest first) within a stack."""
    wanted = FIX_STRATEGIES[fix]
    out: list[Snippet] = []
    for stack in STACKS:
        routes = [
            r for r in ROUTES if r.stack == stack and r.strategy in wanted and _applies(r, measured)
        ]
        made = [_filled(r, measured, model) for r in routes]
        made.sort(key=lambda s: -(s.speedup or 0.0))
        out.extend(made)
    return out


def offered(snippets: list[Snippet]) -> tuple[list[Snippet], list[Snippet]]:
    """``snippets`` split into the ones a fix may offer and the routes measured slower
    than their stack's default here (never offered as a fix; the details list them)."""
    slower = [s for s in snippets if s.speedup is not None and s.speedup < 1.0]
    return [s for s in snippets if s not in slower], slower


def _applies(route: Route, measured: Measured) -> bool:
    """A generic stand-in only without the stack's own baseline trial; a route measured
    against the stack's own baseline only when that baseline ran (else the stand-in,
    measured against the default load, says it for the stack); a library's route only for
    the folders its code runs on (a diffusers line never for a language model's folder)."""
    if route.layouts and getattr(measured, "layout", UNKNOWN) not in route.layouts:
        return False
    if route.unless and measured.speedup(route.unless, base_name=route.unless):
        return False
    if route.baseline != "mmap":
        return measured.speedup(route.baseline, base_name=route.baseline) is not None
    return True


def _filled(route: Route, measured: Measured, model: str) -> Snippet:
    speedup = measured.speedup(route.strategy, base_name=route.baseline)
    note = ""
    if speedup is None:
        why = measured.why_not_measured(route.strategy) or (
            f"run {route.measure_with}" if route.measure_with else None
        )
        note = (
            why
            if why and why.startswith("not measured")
            else f"not measured here: {why}"
            if why
            else "not measured here"
        )
    return Snippet(
        stack=route.stack,
        code=route.template.format(
            py=repr(model),
            sh=shlex.quote(model),
            dir_py=repr(folder_of(model)),
            dir_sh=shlex.quote(folder_of(model)),
        ),
        strategy=route.strategy,
        route=route.route,
        what=route.what,
        speedup=speedup,
        baseline=route.baseline,
        proxy=route.proxy,
        how=measured.how_obtained(route.strategy, route.baseline) if speedup else "measured",
        trial_ids=measured.cold_trial_ids(route.strategy) if speedup is not None else [],
        note=note,
    )


def folder_of(model: str) -> str:
    """The folder (or repo id) of ``model``: from_pretrained, ``vllm serve`` and
    ``--model-path`` take a folder, not an index or weight file."""
    name = model.rsplit("/", 1)[-1].lower()
    if name.endswith((".index.json", ".safetensors", ".bin", ".pt", ".pth")) and "/" in model:
        return model.rsplit("/", 1)[0] or "/"
    return model


def command(stack: str, code: str) -> Snippet:
    """A snippet that is a command or a config change, not a load: it carries no number."""
    return Snippet(stack=stack, code=code)


def commands(pairs: Iterable[tuple[str, str]]) -> list[Snippet]:
    return [command(stack, code) for stack, code in pairs]


def snippets_of(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """A report's snippets as a list of dicts, also from reports written before the list
    (where ``snippets`` was a ``{stack: code}`` map carrying no numbers)."""
    raw = rec.get("snippets") or []
    if isinstance(raw, dict):
        return [
            {"stack": str(k), "code": str(v), "strategy": None, "legacy": True}
            for k, v in raw.items()
        ]
    return [s for s in raw if isinstance(s, dict)]


def label_of(snippet: dict[str, Any]) -> str:
    """The line shown under a snippet (also one read back from a report): its measured
    speed-up over its stack's default and its trials, why it was not measured, or
    nothing for a command."""
    if snippet.get("legacy"):
        return "not measured here (a report from before per-stack trials)"
    if not snippet.get("strategy"):
        return ""
    speedup = snippet.get("speedup")
    if not isinstance(speedup, int | float):
        return str(snippet.get("note") or "not measured here")
    ids = ", ".join(f"#{i}" for i in snippet.get("trial_ids") or [])
    what = f"{snippet['strategy']}, trial {ids}" if ids else str(snippet["strategy"])
    base = snippet.get("baseline") or "mmap"
    against = "the default load" if base == "mmap" else f"{base} cold"
    shown, slower = speedup_shown(speedup)
    later = " (slower than the default here)" if slower else ""
    proxy = f"; {snippet['proxy']}" if snippet.get("proxy") else ""
    how = str(snippet.get("how") or "measured")
    return f"{how} {shown} vs {against}{later} ({what}{proxy})"


def snippet_heading(snippet: dict[str, Any]) -> str:
    """ "vllm (a flag) - measured 3.1x vs the default load (vllm-prefetch, trial #7)"."""
    route = f" ({snippet['route']})" if snippet.get("route") else ""
    label = label_of(snippet)
    return f"{snippet['stack']}{route}" + (f" - {label}" if label else "")


def short_label(snippet: dict[str, Any]) -> str:
    """One "also here" entry: "--load-format fastsafetensors 0.6x" / "... not measured"."""
    speedup = snippet.get("speedup")
    number = f"{speedup:.1f}x" if isinstance(speedup, int | float) else "not measured"
    return f"{snippet.get('what') or snippet.get('strategy')} {number}"
