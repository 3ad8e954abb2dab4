"""Onboarding (pick the model) and the small dialogs: export, open, compare, profile, confirm."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import (
    Button,
    Checkbox,
    ContentSwitcher,
    DataTable,
    DirectoryTree,
    Footer,
    Header,
    Input,
    Label,
    LoadingIndicator,
    OptionList,
    RadioButton,
    RadioSet,
    Select,
    Static,
    TextArea,
)
from textual.widgets.option_list import Option

from loadscope.base.errors import LoadscopeError
from loadscope.base.units import format_bytes, format_rate, format_us, parse_size
from loadscope.cli.common import DEVICE_CHOICES, RANKS
from loadscope.engine.profiler import Profile
from loadscope.report.compare import Row

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".json")

STEPS = (
    "[b]What happens next[/b]\n"
    "1. [b]Probe[/b] the storage under the model: what kind of disk it is, how long one small"
    " read takes, how fast big and parallel reads go. Seconds, read-only.\n"
    "2. [b]Trials[/b]: load the model several ways in fresh processes, [i]cold[/i] (not in the"
    " page cache, the kernel's memory of recently read files: the first load after a reboot)"
    " and [i]warm[/i] (already cached). Live charts show the throughput.\n"
    "3. [b]Advice[/b]: the fix the numbers support, with the code to paste, or 'nothing to fix'."
)


class WeightTree(DirectoryTree):
    """A directory tree that shows folders and checkpoint files only."""

    def filter_paths(self, paths: Iterable[Path]) -> Iterable[Path]:
        return [
            p
            for p in paths
            if not p.name.startswith(".") and (p.is_dir() or p.name.endswith(WEIGHT_SUFFIXES))
        ]


class _Marked:
    """A toggle whose mark says its state without colour: its mark when on, blank when
    off (Textual's draws the same mark both ways, told apart by colour alone)."""

    MARK = "X"
    BUTTON_INNER: str
    value: bool

    def watch_value(self) -> None:
        self.BUTTON_INNER = self.MARK if self.value else " "
        super().watch_value()  # type: ignore[misc]

    def on_mount(self) -> None:
        self.BUTTON_INNER = self.MARK if self.value else " "


class MarkedCheckbox(_Marked, Checkbox):
    """The emulate box: X on, blank off."""


class MarkedRadioButton(_Marked, RadioButton):
    """A source choice: ● when chosen, blank otherwise."""

    MARK = "●"


class OnboardingScreen(Screen[Any]):
    """Pick the model (path, HF cache or synthetic), optionally emulate a slow disk, start."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+r", "start", "Start diagnosis", priority=True),
        Binding("escape", "dismiss_if_possible", "Back"),
    ]

    def __init__(self, *, browse_root: Path, fuse_reason: str | None, hf_cache: str | None) -> None:
        super().__init__()
        self.browse_root = browse_root
        self.fuse_reason = fuse_reason
        self.hf_cache = hf_cache
        #: Bumped by each start: a check answered after a newer one began is ignored.
        self._attempt = 0

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with VerticalScroll(id="onboarding"):
            yield Static(
                "[b]Diagnose how a model loads on this machine.[/b] Pick the model:", id="intro"
            )
            with RadioSet(id="source"):
                yield MarkedRadioButton(
                    "A synthetic checkpoint (no model needed)", value=True, id="src-synth"
                )
                yield MarkedRadioButton("A path on this machine", id="src-path")
                yield MarkedRadioButton("From the local Hugging Face cache", id="src-hf")
            with ContentSwitcher(initial="pane-synth", id="panes"):
                with Vertical(id="pane-synth"):
                    yield Label(
                        "Size (e.g. 256MiB, 2GiB): a Llama-shaped checkpoint, removed after"
                    )
                    yield Input(value="256MiB", id="synth-size")
                with Vertical(id="pane-path"):
                    yield Input(
                        placeholder="/path/to/model (a folder or a .safetensors file)",
                        id="path-input",
                    )
                    yield WeightTree(self.browse_root, id="tree")
                with Vertical(id="pane-hf"):
                    yield OptionList(id="hf-list")
            emulate = MarkedCheckbox(
                "Serve it through an emulated slow network disk (5 ms per read)",
                id="emulate",
                disabled=self.fuse_reason is not None,
            )
            yield emulate
            if self.fuse_reason is not None:
                yield Static(
                    Text(f"emulation unavailable: {self.fuse_reason}", style="dim"), id="fuse-why"
                )
            with Horizontal(id="where"):
                yield Label("Load to ")
                yield Select(
                    [(label, value) for value, label in DEVICE_CHOICES],
                    value=DEVICE_CHOICES[0][0],
                    allow_blank=False,
                    id="device",
                )
                yield Label("  ranks ")
                yield Input(placeholder="auto", id="ranks", restrict=r"[0-9]*", max_length=4)
            yield Static(STEPS, id="steps")
            yield Static("", id="onboarding-error")
            yield Button("Start diagnosis  (ctrl+r)", variant="primary", id="start")
        yield Footer()

    def on_mount(self) -> None:
        # The choice first: Down then Enter picks the highlighted source (it had started a
        # synthetic run from the size field when the user meant "A path on this machine").
        self.query_one("#source", RadioSet).focus()
        self._scan_hf_cache()

    @work(thread=True, exclusive=True, group="hf-scan", exit_on_error=False)
    def _scan_hf_cache(self) -> None:
        from huggingface_hub import scan_cache_dir
        from huggingface_hub.errors import CacheNotFound

        options: list[Option] = []
        try:
            info = scan_cache_dir(self.hf_cache)
            for repo in sorted(info.repos, key=lambda r: r.repo_id):
                if repo.repo_type != "model":
                    continue
                for rev in repo.revisions:
                    refs = ",".join(sorted(rev.refs)) or rev.commit_hash[:8]
                    options.append(
                        Option(
                            f"{repo.repo_id}@{refs}  {format_bytes(rev.size_on_disk)}",
                            id=f"{repo.repo_id}@{rev.commit_hash}",
                        )
                    )
            where = self.hf_cache or "the default location"
            empty = f"no models in the Hugging Face cache ({where})"
        except CacheNotFound as exc:
            empty = f"no Hugging Face cache here ({exc.cache_dir})"
        except OSError as exc:
            empty = f"Hugging Face cache unreadable: {exc}"
        self.app.call_from_thread(self._fill_hf, options, empty)

    def _fill_hf(self, options: list[Option], empty: str) -> None:
        hf = self.query_one("#hf-list", OptionList)
        hf.clear_options()
        if options:
            hf.add_options(options)
        else:
            hf.add_option(Option(empty, disabled=True))

    @on(RadioSet.Changed, "#source")
    def _source_changed(self, event: RadioSet.Changed) -> None:
        pane = {"src-synth": "pane-synth", "src-path": "pane-path", "src-hf": "pane-hf"}
        current = pane[event.pressed.id or "src-synth"]
        self.query_one("#panes", ContentSwitcher).current = current
        # Then on to what that source asks for: its size, its path, its list.
        field = {"pane-synth": "#synth-size", "pane-path": "#path-input", "pane-hf": "#hf-list"}
        self.query_one(field[current]).focus()

    @on(DirectoryTree.FileSelected, "#tree")
    def _file_picked(self, event: DirectoryTree.FileSelected) -> None:
        self.query_one("#path-input", Input).value = str(event.path)

    @on(DirectoryTree.DirectorySelected, "#tree")
    def _dir_picked(self, event: DirectoryTree.DirectorySelected) -> None:
        self.query_one("#path-input", Input).value = str(event.path)

    @on(Button.Pressed, "#start")
    def _pressed(self) -> None:
        self.action_start()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_start()

    def spec(self) -> str:
        """The target spec the choices make; raises ValueError with what is wrong."""
        current = self.query_one("#panes", ContentSwitcher).current
        if current == "pane-synth":
            text = self.query_one("#synth-size", Input).value.strip()
            size = parse_size(text)
            if size < 1 << 20:
                raise ValueError("a synthetic checkpoint needs at least 1 MiB")
            return f"synthetic:{text}"
        if current == "pane-path":
            text = self.query_one("#path-input", Input).value.strip()
            if not text:
                raise ValueError("type a path or pick one in the tree")
            return text
        hf = self.query_one("#hf-list", OptionList)
        if hf.highlighted is None or hf.get_option_at_index(hf.highlighted).disabled:
            raise ValueError("pick a model from the cache list")
        return str(hf.get_option_at_index(hf.highlighted).id)

    def action_start(self) -> None:
        try:
            spec = self.spec()
            ranks_text = self.query_one("#ranks", Input).value.strip()
            ranks = int(RANKS(ranks_text)) if ranks_text else None  # as doctor --ranks
        except argparse.ArgumentTypeError as exc:
            self._say(f"ranks: {exc} (or blank for one per GPU)")
            return
        except ValueError as exc:
            self._say(str(exc))
            return
        choice = {
            "spec": spec,
            "emulate": self.query_one("#emulate", Checkbox).value,
            "device": str(self.query_one("#device", Select).value),
            "ranks": ranks,
        }
        if spec.startswith("synthetic:"):
            self.dismiss(choice)
            return
        self._attempt += 1
        self._say(f"checking {spec} ...", style="dim")
        self._check(choice, self._attempt)

    def _say(self, text: str, style: str = "bold red") -> None:
        line = self.query_one("#onboarding-error", Static)
        line.update(Text(text, style=style))
        # At 80x24 the line sits below the fold: bring it into view, and say a problem
        # where the eye is too (a toast), so ctrl+r never seems to do nothing.
        line.scroll_visible(animate=False)
        if style != "dim":
            self.notify(text, title="cannot start", severity="warning")

    @work(thread=True, group="check", exit_on_error=False)
    def _check(self, choice: dict[str, Any], attempt: int) -> None:
        """The engine's own checks, off the UI thread: the path resolves (a FIFO or a device
        is refused by stat, never opened), every header is sound and no pickle would run
        code. A problem is one line here; the diagnosis only starts on a sound model."""
        from loadscope.model.inspection import check_target
        from loadscope.model.targets import resolve

        try:
            check_target(resolve(choice["spec"]), loads=True)
        except LoadscopeError as exc:
            self.app.call_from_thread(self._checked, choice, attempt, str(exc))
            return
        self.app.call_from_thread(self._checked, choice, attempt, None)

    def _checked(self, choice: dict[str, Any], attempt: int, problem: str | None) -> None:
        if attempt != self._attempt or self not in self.app.screen_stack:
            return  # a newer start is being checked, or the screen is gone
        if problem is not None:
            self._say(problem)
        elif not self.is_current:  # a dialog is on top: dismissing now would pop it instead
            self._say(f"{choice['spec']} looks sound: start again to diagnose it", style="dim")
        else:
            self._attempt += 1  # a second answer can no longer dismiss twice
            self.dismiss(choice)

    def action_dismiss_if_possible(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.dismiss(None)


class PromptScreen(ModalScreen[str | None]):
    """One line of input (a path), with a title and a hint; Enter accepts, Escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, hint: str, value: str = "") -> None:
        super().__init__()
        self.title_text, self.hint, self.value = title, hint, value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(self.hint, classes="dialog-hint")
            yield Input(value=self.value, id="prompt")

    def on_mount(self) -> None:
        self.query_one("#prompt", Input).focus()

    @on(Input.Submitted, "#prompt")
    def _ok(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class SnippetPickScreen(ModalScreen[int | None]):
    """Pick the stack whose snippet to copy: one row per snippet, with its measured number.

    The result is the chosen snippet's index, -1 for "all of them", None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, headings: list[str]) -> None:
        super().__init__()
        self.title_text, self.headings = title, headings

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Copy a snippet: {self.title_text}", classes="dialog-title")
            yield Static("Enter copies the highlighted one; Escape cancels.", classes="dialog-hint")
            options = [Option(h, id=str(i)) for i, h in enumerate(self.headings)]
            options.append(Option("all of them", id="-1"))
            yield OptionList(*options, id="snippet-pick")

    def on_mount(self) -> None:
        self.query_one("#snippet-pick", OptionList).focus()

    @on(OptionList.OptionSelected, "#snippet-pick")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id or "-1"))

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[str | None]):
    """Say exactly what a fix will do before it runs: Enter (or the button) applies it,
    Escape cancels. With ``value`` (a destination), the user may edit it first; the
    result is the (edited) value, "" when there is none, None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("enter", "ok", "Apply", priority=True),
    ]

    def __init__(self, title: str, body: str, value: str | None = None) -> None:
        super().__init__()
        self.title_text, self.body, self.value = title, body, value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(Text(self.body), classes="dialog-hint")
            if self.value is not None:
                yield Input(value=self.value, id="confirm-value")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Apply  (enter)", variant="warning", id="confirm-ok")
                yield Button("Cancel  (esc)", id="confirm-cancel")

    def on_mount(self) -> None:
        target = "#confirm-value" if self.value is not None else "#confirm-ok"
        self.query_one(target).focus()

    @on(Button.Pressed, "#confirm-ok")
    def action_ok(self) -> None:
        if self.value is None:
            self.dismiss("")
            return
        value = self.query_one("#confirm-value", Input).value.strip()
        if value:
            self.dismiss(value)

    @on(Button.Pressed, "#confirm-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class CompareScreen(ModalScreen[None]):
    """Reports side by side: one column per node, outliers marked."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "close", "Close")]

    def __init__(self, rows: list[Row]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label(f"{len(self.rows)} reports side by side", classes="dialog-title")
            yield DataTable(id="compare", cursor_type="row")

    def on_mount(self) -> None:
        table: DataTable[str] = self.query_one("#compare", DataTable)
        table.add_column("")
        for r in self.rows:
            table.add_column(Path(r.source).name[:24])
        fields: list[tuple[str, Any]] = [
            ("host", lambda r: r.host),
            ("storage", lambda r: r.storage_class),
            ("p50 4 KiB", lambda r: format_us(r.latency_p50_us) if r.latency_p50_us else "-"),
            ("best strategy", lambda r: r.best_strategy or "-"),
            ("its rate", lambda r: format_rate(r.best_bytes_per_s) if r.best_bytes_per_s else "-"),
            ("verdict", lambda r: r.verdict),
            (
                "outlier",
                lambda r: Text("; ".join(r.outlier), style="bold red") if r.outlier else "-",
            ),
        ]
        for name, get in fields:
            table.add_row(name, *[get(r) for r in self.rows])

    def action_close(self) -> None:
        self.dismiss(None)


class TextScreen(ModalScreen[None]):
    """Text the clipboard did not take, shown whole to be selected by hand."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close")]

    def __init__(self, title: str, text: str, hint: str) -> None:
        super().__init__()
        self.title_text, self.text, self.hint = title, text, hint

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label(self.title_text, classes="dialog-title")
            yield TextArea(self.text, read_only=True, id="text-to-copy", soft_wrap=False)
            yield Label(self.hint, classes="dialog-hint")

    def action_close(self) -> None:
        self.dismiss(None)


class ProfileScreen(ModalScreen[None]):
    """py-spy's view of the running worker: top frames (self and total) and the dump."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "close", "Close")]

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid = pid

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label(f"py-spy on worker {self.pid}", classes="dialog-title")
            yield LoadingIndicator(id="profiling")
            yield VerticalScroll(Static("", id="profile-body"), id="profile-scroll")

    def on_mount(self) -> None:
        self._run()

    @work(thread=True, exclusive=True, group="profile", exit_on_error=False)
    def _run(self) -> None:
        from loadscope.engine.profiler import profile

        result = profile(self.pid, duration_s=2.0)
        self.app.call_from_thread(self.show, result)

    def show(self, p: Profile) -> None:
        self.query_one("#profiling", LoadingIndicator).display = False
        out = Text()
        if p.error:
            out.append(p.error + "\n", style="bold red" if not p.ok else "yellow")
        if p.top_self:
            out.append(f"where samples landed (self), {p.samples} samples:\n", style="bold")
            for f in p.top_self:
                out.append(f"  {f.fraction:6.1%}  {f.name}\n")
        if p.top_total:
            out.append("on the stack (total):\n", style="bold")
            for f in p.top_total[:8]:
                out.append(f"  {f.fraction:6.1%}  {f.name}\n")
        if p.dump:
            out.append("py-spy dump:\n", style="bold")
            out.append(p.dump)
        self.query_one("#profile-body", Static).update(out)

    def action_close(self) -> None:
        self.dismiss(None)
