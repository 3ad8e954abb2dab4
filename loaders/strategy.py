"""The common interface of loader strategies, and what a worker hands them.

A strategy declares its name, what it needs (a file format, a GPU, RAM as a
multiple of the model, an optional package) and its knobs; it loads the
requested tensors of a list of files and yields ``(name, tensor)`` as each one
becomes usable. The worker (``loaders/worker.py``) times it, touches every page
of every tensor inside the timed region (mmap results are lazy), and digests
the tensors afterwards. One declaration drives the CLI, the JSON and the TUI.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from loadscope.loaders.cuda import cuda_unavailable
from loadscope.probes.sources import ONLY_FILES

if TYPE_CHECKING:
    import torch

# The request's names, re-exported: a strategy imports them from here, with the rest.
from loadscope.loaders.requests import FileRequest as FileRequest  # noqa: PLC0414
from loadscope.loaders.requests import Knob as Knob  # noqa: PLC0414
from loadscope.loaders.requests import Tensors as Tensors  # noqa: PLC0414
from loadscope.loaders.requests import WeightFormat as WeightFormat  # noqa: PLC0414
from loadscope.loaders.requests import knob_value as knob_value  # noqa: PLC0414


@dataclass(frozen=True, slots=True)
class Requirements:
    formats: frozenset[WeightFormat] = frozenset({"safetensors"})
    gpu: bool = False
    #: Peak anonymous memory as a multiple of the bytes loaded (0 for zero-copy mmap).
    ram_multiple: float = 1.0
    #: An optional package, by import name, with the extra that installs it.
    package: str | None = None
    extra: str | None = None
    #: A filesystem that takes O_DIRECT (the doctor plans it only where the probe read so).
    o_direct: bool = False
    #: The kinds of source it reads (``probes/sources.py``): files unless it says so; a
    #: model in another source runs only the strategies that declare that source.
    sources: frozenset[str] = ONLY_FILES


#: How a strategy reads cold files, for the doctor's cost model: "buffered" through the
#: page cache in the mount's readahead windows, "deep" with many large O_DIRECT requests
#: in flight where the filesystem takes them, "parallel" with many large requests.
ReadKind = Literal["buffered", "deep", "parallel"]


@dataclass(frozen=True, slots=True)
class StackRoute:
    """One way a user's stack runs a strategy's code: the snippet the advice prints beside
    that strategy's measured number (declared on the strategy, so the trial and the code
    it stands for sit together).

    ``template`` takes ``{py}`` (the model as loadscope and safetensors name it, as a
    Python string), ``{sh}`` (for a shell), ``{dir_py}`` and ``{dir_sh}`` (the folder or
    repo id the HF stacks and servers take)."""

    stack: str
    #: How it applies: "code change", "a flag", "no code change".
    route: str
    #: The change in a few words ("--load-format fastsafetensors", "loadscope warm first").
    what: str
    template: str
    #: The trial its speed-up is measured against: the stack's own default (None: the
    #: default load of the strategy's device).
    baseline: str | None = None
    #: Shown only when this strategy has no trial (a generic stand-in for a stack-specific
    #: route: a transformers route timed as ``load_file`` when from_pretrained was not).
    unless: str | None = None
    #: What a stand-in's number is, said beside it (it is not the snippet's own call).
    proxy: str = ""
    #: False for a stand-in whose number is no user's of this stack (``load_file``'s for a
    #: transformers line, whose call also builds the model): shown as not measured, why,
    #: and that number as context, never as the route's own.
    proxy_number: bool = True
    #: How to measure a route the diagnosis does not run.
    measure_with: str = ""
    #: The folder layouts the code runs on (``base/hf_layout.py``); empty: any.
    layouts: tuple[str, ...] = ()
    #: The strategy whose trial ran this code (filled in by the registry).
    strategy: str = ""


@dataclass(slots=True)
class LoadContext:
    """What a strategy may consult: its knobs, and hints the parent measured (probes)."""

    knobs: dict[str, Any] = field(default_factory=dict)
    hints: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    #: Where the tensors must end up: "cpu", or "cuda" / "cuda:N" for GPU strategies.
    device: str = "cpu"

    def knob(self, strategy: Strategy, name: str) -> Any:
        """The value ``strategy`` runs with: the knob given, else (for loadscope's own tuned
        strategies only) the probe's hint, else the knob's default. A strategy that stands
        for a route (a stack's code, a loadscope command) never takes a hint: its trial
        runs with the settings the route's code uses."""
        return knob_value(strategy.knobs, name, self.knobs, self.hints if strategy.tuned else None)

    def settings(self, strategy: Strategy) -> dict[str, Any]:
        """Every knob of ``strategy`` as this context runs it (what the trial records)."""
        return {k.name: self.knob(strategy, k.name) for k in strategy.knobs}

    def knob_values(self, strategy: Strategy, *names: str) -> tuple[Any, ...]:
        """:meth:`knob` of each of ``names``, in order (``threads, block = ...``)."""
        return tuple(self.knob(strategy, name) for name in names)


class Strategy:
    """Base class; subclasses set the class attributes and implement :meth:`load`."""

    name: str = ""
    summary: str = ""
    requires: Requirements = Requirements()
    knobs: tuple[Knob, ...] = ()
    #: False for a strategy that loads whole files whatever tensors it is asked for (the
    #: peers): its time on a tensor sample cannot be extrapolated, so a sampled run gives
    #: it whole files of a subset (``sample_files``), runs it whole, or skips it.
    samples: bool = True
    #: Whether it loads only the files it is given (False: it loads the model's folder).
    sample_files: bool = True
    #: Libraries its :meth:`prepare` imports (the fork server imports them once for all
    #: trials), as a user's script imports them at its top; ``"transformers-model"`` also
    #: names the model's modeling module, whose import the server times once and each
    #: trial of ``from_pretrained`` adds to its time (``setup_s``), as a fresh process
    #: pays it inside the call; ``preload.WARM_COMMAND`` has the server time
    #: ``loadscope warm``'s start-up once.
    preload: tuple[str, ...] = ()
    #: It builds the model with transformers (needs the model's config.json).
    builds_model: bool = False
    #: False for a strategy whose parallelism is across files (one reader per file): a
    #: subset of whole files would read with fewer readers than the model, so its
    #: sample is always spans of every file; with ``samples`` False too (a peer that
    #: loads the files of a load together), it runs whole or is skipped, never scaled.
    sample_shards: bool = True
    #: True for loadscope's own tuned strategies (``auto``, ``direct``, ``parallel``, the
    #: GPU staging): where no knob is given they take the probe's measured best readers
    #: and request size. False for every strategy that stands for a route a user runs
    #: (the public API, ``loadscope warm``, a stack's flag): its trial runs with the
    #: route's own defaults, so the number printed beside the route is the route's.
    tuned: bool = False
    #: The default load of its device and format (``load_file``, ``torch.load``): every
    #: speed-up is taken against it, and without its cold trial nothing is judged.
    default_load: bool = False
    #: Its place among the doctor's CPU trials of a safetensors model (lower runs first;
    #: None: the doctor does not run it there), and whether it also runs on a GPU box (a
    #: route users apply on the CPU side there).
    doctor_order: int | None = None
    on_gpu_box: bool = False
    #: Whether its warm trial matters for the advice (the default loads, the fast paths).
    warm_trial: bool = False
    #: How it reads cold files (:data:`ReadKind`), for the doctor's cost model.
    reads: ReadKind = "parallel"
    #: The strategy whose reads this one's are (``from_pretrained`` reads as
    #: ``load_file`` does): a trial of it that only runs whole is estimated from that
    #: one's measured time when the bench decides whether it still fits.
    reads_as: str | None = None
    #: Holds the model in the process's own memory (where the others map the page cache).
    own_copy: bool = False
    #: The kinds of fix whose advice shows its routes ("parallel-reads", "prewarm", ...),
    #: and the code each stack runs for it.
    fixes: frozenset[str] = frozenset()
    routes: tuple[StackRoute, ...] = ()
    #: The rank round's mode that does with N local ranks what its routes do (every rank
    #: reading with O_DIRECT, one warm for the node, the node-shared load); its routes
    #: then say how many times the node reads the model (``loaders/rank.py``).
    rank_mode: str | None = None

    def unavailable(self) -> str | None:
        """Why this strategy cannot run in this environment, or None.

        A GPU strategy (``requires.gpu``) needs a usable CUDA device, asked first (which
        imports torch: only workers ask); then the optional package, if any.
        """
        reasons: list[str | None] = []
        if self.requires.gpu:
            reasons.append(cuda_unavailable())
        pkg = self.requires.package
        if pkg and importlib.util.find_spec(pkg) is None:
            extra = (
                f" (pip install 'loadscope[{self.requires.extra}]')" if self.requires.extra else ""
            )
            reasons.append(f"{pkg} is not installed{extra}")
        return "; ".join(r for r in reasons if r) or None

    def prepare(self, files: list[FileRequest], ctx: LoadContext) -> None:
        """Work before the clock starts that is not the load (importing a library)."""

    def load(self, files: list[FileRequest], ctx: LoadContext) -> Tensors:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        r = self.requires
        return {
            "name": self.name,
            "summary": self.summary,
            "formats": sorted(r.formats),
            "sources": sorted(r.sources),
            "gpu": r.gpu,
            "ram_multiple": r.ram_multiple,
            "package": r.package,
            "samples": self.samples,
            "sample_files": self.sample_files,
            "sample_shards": self.sample_shards,
            "tuned": self.tuned,
            "preload": list(self.preload),
            "default_load": self.default_load,
            "doctor_order": self.doctor_order,
            "on_gpu_box": self.on_gpu_box,
            "warm_trial": self.warm_trial,
            "reads": self.reads,
            "reads_as": self.reads_as,
            "own_copy": self.own_copy,
            "fixes": sorted(self.fixes),
            "routes": [{"stack": r.stack, "route": r.route, "what": r.what} for r in self.routes],
            "knobs": {
                k.name: {"default": k.default, "help": k.help, "takes": k.takes()}
                for k in self.knobs
            },
        }


class FileByFile(Strategy):
    """A strategy that loads its files one after another, each on its own: subclasses
    implement :meth:`load_one`, and :meth:`load` yields each file's tensors in turn."""

    def load(self, files: list[FileRequest], ctx: LoadContext) -> Tensors:
        for f in files:
            yield from self.load_one(f, ctx)

    def load_one(self, f: FileRequest, ctx: LoadContext) -> Tensors:
        raise NotImplementedError


def only_requested(request: FileRequest, items: Iterable[tuple[str, torch.Tensor]]) -> Tensors:
    """The ``(name, tensor)`` of ``items`` that ``request`` asks for (all, unless a sample)."""
    wanted = set(request.tensors) if request.tensors is not None else None
    for name, t in items:
        if wanted is None or name in wanted:
            yield name, t
