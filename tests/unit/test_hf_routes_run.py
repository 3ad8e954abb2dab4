"""Every transformers and diffusers line the advice prints, run as printed on real folders.

Issue 37 item 5: the transformers ``fullread`` line passed ``state_dict=`` with a model
name (a ValueError on transformers 5) and an undefined ``shard_paths``; the
``hf-load-model`` line (``from_config`` + ``load_state_dict``) refused every model whose
config ties weights and paid a random init; diffusers lines were printed for language
models. Here tiny checkpoints saved by transformers itself (a tied Llama in bf16 and a
GPT-2 in fp32; one safetensors file, shards with an index, a torch ``.bin``) are loaded by
each route's code exactly as :func:`~loadscope.advice.snippets._filled` formats it, and
the model must equal ``AutoModelForCausalLM.from_pretrained(folder)``'s: every tensor, the
dtypes, the tied weights still tied, and the logits of one forward pass bit for bit.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from loadscope.advice.snippets import FIX_STRATEGIES, ROUTES, Route, _filled, load_snippets
from loadscope.base.hf_layout import (
    DIFFUSERS_MODEL,
    DIFFUSERS_PIPELINE,
    TRANSFORMERS,
    UNKNOWN,
    folder_layout,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@dataclass
class _Trials:
    """A :class:`~loadscope.advice.snippets.Measured` where every strategy ran, 2x."""

    layout: str = UNKNOWN

    def speedup(self, strategy: str, cache: str = "cold", base_name: str = "mmap") -> float:
        return 2.0

    def cold_trial_ids(self, strategy: str) -> list[int]:
        return [1]

    def why_not_measured(self, strategy: str) -> str | None:
        return None

    def how_obtained(self, strategy: str, base_name: str = "mmap") -> str:
        return "measured"

    def speedup_range(self, strategy: str, base_name: str = "mmap") -> tuple[float, float] | None:
        return None

    def ranks_note(self, mode: str | None) -> str:
        return ""


def _printed(route: Route, model: str | os.PathLike[str], layout: str) -> str:
    """The route's code as the advice prints it for ``model``."""
    return _filled(route, _Trials(layout), os.fspath(model)).code


def _run(code: str) -> dict[str, Any]:
    """``code`` run as a user pastes it: a fresh namespace, nothing imported for it."""
    namespace: dict[str, Any] = {"__name__": "__snippet__"}
    exec(compile(code, "<snippet>", "exec"), namespace)
    return namespace


def _too_old(code: str) -> str | None:
    """Why not to run ``code`` here: the installed library is older than the ``>= X`` the
    printed line says it needs."""
    said = re.search(r"# disable_mmap: (\w+) >= ([\d.]+)", code)
    if said is None:
        return None
    package, least = said.groups()
    have = tuple(int(p) for p in re.findall(r"\d+", version(package))[:2])
    if have < tuple(int(p) for p in least.split(".")):
        return f"the line says {package} >= {least}; {version(package)} is installed"
    return None


def _needs_version(code: str) -> None:
    if (why := _too_old(code)) is not None:
        pytest.skip(why)


# -- the checkpoints ---------------------------------------------------------------------


def _tiny_llama() -> Any:
    config = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(1)
    return transformers.AutoModelForCausalLM.from_config(config, **_dtype_kw(torch.bfloat16))


def _tiny_gpt2() -> Any:
    config = transformers.GPT2Config(
        vocab_size=96, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=1,
        eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(2)
    return transformers.AutoModelForCausalLM.from_config(config, **_dtype_kw(torch.float32))


def _dtype_kw(dtype: Any) -> dict[str, Any]:
    new = tuple(int(p) for p in transformers.__version__.split(".")[:2]) >= (4, 56)
    return {"dtype" if new else "torch_dtype": dtype}


def _save(model: Any, folder: Path, form: str) -> None:
    if form == "single":
        model.save_pretrained(folder)
    elif form == "sharded":
        model.save_pretrained(folder, max_shard_size="40KB")
        assert (folder / "model.safetensors.index.json").is_file()
    else:  # a torch checkpoint, the tied tensors sharing storage as torch.save keeps them
        model.config.save_pretrained(folder)
        model.generation_config.save_pretrained(folder)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{"llama-sharded": folder, ...}``: each tiny model in each of the three forms."""
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for name, make in (("llama", _tiny_llama), ("gpt2", _tiny_gpt2)):
        model = make()
        for form in ("single", "sharded", "torch"):
            folder = root / f"{name} {form}"  # a space: the path must be quoted as printed
            _save(model, folder, form)
            out[f"{name}-{form}"] = folder
    return out


def _reference(folder: Path, **kw: Any) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(str(folder), **kw)


def _assert_same_model(got: Any, want: Any) -> None:
    """The same class, dtypes, tensors, tie and mode, and the same logits bit for bit."""
    assert type(got) is type(want)
    assert not got.training and not want.training
    assert {n: p.dtype for n, p in got.named_parameters()} == {
        n: p.dtype for n, p in want.named_parameters()
    }
    got_sd, want_sd = got.state_dict(), want.state_dict()
    assert set(got_sd) == set(want_sd)
    for name, tensor in want_sd.items():
        assert got_sd[name].dtype == tensor.dtype, name
        assert torch.equal(got_sd[name], tensor), name
    if want.config.tie_word_embeddings:
        assert got.get_output_embeddings().weight is got.get_input_embeddings().weight
    ids = torch.tensor([[3, 17, 5, 42, 8, 1, 60]])
    with torch.no_grad():
        got_logits, want_logits = got(ids).logits, want(ids).logits
    assert got_logits.dtype == want_logits.dtype
    assert torch.equal(got_logits, want_logits)


# -- transformers --------------------------------------------------------------------------

TRANSFORMERS_ROUTES = [r for r in ROUTES if r.stack == "transformers"]


def test_every_transformers_route_is_run_here() -> None:
    """A route added to ROUTES is run by the tests below (they take the list from ROUTES)."""
    assert {r.strategy for r in TRANSFORMERS_ROUTES} == {
        "hf-prewarm", "hf-load-model", "prewarm", "fullread",
    }  # fmt: skip


@pytest.mark.parametrize("route", TRANSFORMERS_ROUTES, ids=lambda r: r.strategy)
@pytest.mark.parametrize("ckpt", ["llama-single", "llama-sharded", "llama-torch", "gpt2-single",
                                  "gpt2-sharded", "gpt2-torch"])  # fmt: skip
def test_transformers_route_runs_as_printed(
    saved: dict[str, Path], route: Route, ckpt: str, caplog: pytest.LogCaptureFixture
) -> None:
    folder = saved[ckpt]
    code = _printed(route, folder, TRANSFORMERS)
    _needs_version(code)
    with caplog.at_level(logging.WARNING, logger="loadscope"):
        model = _run(code)["model"]
    # loadscope.from_pretrained's own path, not its fallback to from_pretrained
    assert "loadscope.from_pretrained:" not in caplog.text
    _assert_same_model(model, _reference(folder))


def test_the_routes_take_the_index_the_user_named(saved: dict[str, Path]) -> None:
    """Named by its index, the model loads the same through every route (from_pretrained
    is given the folder, loadscope the index)."""
    folder = saved["llama-sharded"]
    index = folder / "model.safetensors.index.json"
    want = _reference(folder)
    for route in TRANSFORMERS_ROUTES:
        code = _printed(route, index, TRANSFORMERS)
        if route.strategy == "hf-load-model":
            assert repr(str(index)) in code
        if _too_old(code):
            continue
        _assert_same_model(_run(code)["model"], want)


def test_the_printed_code_is_short_and_imports_what_it_uses() -> None:
    for route in TRANSFORMERS_ROUTES:
        code = _printed(route, "/m/llama", TRANSFORMERS)
        assert len(code.splitlines()) <= 3, code
        assert "state_dict=" not in code and "shard_paths" not in code
    load_model = next(r for r in TRANSFORMERS_ROUTES if r.strategy == "hf-load-model")
    assert _printed(load_model, "/m/llama", TRANSFORMERS).endswith(
        "model = loadscope.from_pretrained('/m/llama')"
    )


def test_from_pretrained_pays_no_random_init(
    saved: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No weight is drawn at random on a real tensor (from_config, the old route's first
    step, draws every one: the instrument's own check)."""
    import loadscope

    drawn: list[tuple[str, int]] = []
    for method in ("normal_", "uniform_"):
        real = getattr(torch.Tensor, method)

        def spy(self: Any, *args: Any, _real: Any = real, _m: str = method, **kw: Any) -> Any:
            if not self.is_meta:
                drawn.append((_m, self.numel()))
            return _real(self, *args, **kw)

        monkeypatch.setattr(torch.Tensor, method, spy)
    model = loadscope.from_pretrained(saved["llama-single"])
    assert drawn == []
    transformers.AutoModelForCausalLM.from_config(model.config)
    assert drawn, "the spy saw no random init in from_config: it would see none anywhere"


def test_dtype_asked_for_is_the_dtype_from_pretrained_gives(saved: dict[str, Path]) -> None:
    import loadscope

    folder = saved["llama-sharded"]
    got = loadscope.from_pretrained(folder, dtype=torch.float32)
    _assert_same_model(got, _reference(folder, **_dtype_kw(torch.float32)))
    # A model class rather than an Auto class, as from_pretrained also takes.
    got = loadscope.from_pretrained(folder, model_class=transformers.LlamaForCausalLM)
    _assert_same_model(got, transformers.LlamaForCausalLM.from_pretrained(str(folder)))
    got = loadscope.from_pretrained(folder, dtype="auto")  # the config's: bf16 kept
    assert got.get_input_embeddings().weight.dtype == torch.bfloat16
    _assert_same_model(got, _reference(folder, **_dtype_kw("auto")))


def test_a_checkpoint_it_cannot_place_falls_back_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A base model's checkpoint (no ``model.`` prefix, no head) loaded as a causal LM:
    from_pretrained renames the keys on load; this does not guess, it falls back."""
    import loadscope

    base = _tiny_llama().model  # LlamaModel: keys without the "model." prefix
    base.save_pretrained(tmp_path)
    record = loadscope.LoadRecord()
    with caplog.at_level(logging.WARNING, logger="loadscope"):
        got = loadscope.from_pretrained(tmp_path, record=record)
    assert any("are not the model's" in note for note in record.notes), record.notes
    assert "from_pretrained(" in caplog.text
    _assert_same_model(got, _reference(tmp_path))
    # The trial of that line says it timed the fallback (its note joins the trial's detail).
    from loadscope.loaders.strategies.transformers_load import FromConfigLoadModel
    from loadscope.loaders.strategy import FileRequest, LoadContext

    ctx = LoadContext()
    weights = tmp_path / "model.safetensors"
    FromConfigLoadModel().build(
        [FileRequest(str(weights), weights.stat().st_size, "safetensors")], ctx
    )
    assert "are not the model's" in ctx.notes["fallback"]


def test_the_hf_load_model_trial_runs_the_printed_function(
    saved: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trial under the ``hf-load-model`` line calls the very function
    ``loadscope.from_pretrained`` calls, on a tied model the old trial could not load."""
    import loadscope
    from loadscope.loaders import pretrained
    from loadscope.loaders.strategies import transformers_load
    from loadscope.loaders.strategy import FileRequest, LoadContext

    assert transformers_load.load_pretrained is pretrained.load_pretrained
    calls: list[str] = []
    real = pretrained.load_pretrained

    def spy(folder: Any, *args: Any, **kw: Any) -> Any:
        calls.append(os.fspath(folder))
        return real(folder, *args, **kw)

    monkeypatch.setattr(pretrained, "load_pretrained", spy)
    monkeypatch.setattr(transformers_load, "load_pretrained", spy)
    folder = saved["llama-sharded"]
    files = [
        FileRequest(str(p), p.stat().st_size, "safetensors")
        for p in sorted(folder.glob("*.safetensors"))
    ]
    ctx = LoadContext()
    trial = transformers_load.FromConfigLoadModel().build(files, ctx)
    printed = loadscope.from_pretrained(folder)
    assert calls == [str(folder), str(folder)]
    assert "fallback" not in ctx.notes
    want = _reference(folder)
    _assert_same_model(trial, want)
    _assert_same_model(printed, want)


# -- which library's folder ----------------------------------------------------------------


def test_folder_layouts(tmp_path: Path) -> None:
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pipe" / "model_index.json").write_text('{"_class_name": "DDPMPipeline"}')
    (tmp_path / "unet").mkdir()
    (tmp_path / "unet" / "config.json").write_text('{"_diffusers_version": "0.42.1"}')
    (tmp_path / "llm").mkdir()
    (tmp_path / "llm" / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("[1, 2")
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "config.json")  # refused, never waited on
    assert folder_layout(tmp_path / "pipe") == DIFFUSERS_PIPELINE
    assert folder_layout(tmp_path / "unet") == DIFFUSERS_MODEL
    assert folder_layout(tmp_path / "llm") == TRANSFORMERS
    for unknown in ("bad", "fifo", "nothing here", "llm/config.json"):
        assert folder_layout(tmp_path / unknown) == UNKNOWN, unknown
    assert folder_layout("org/name") == UNKNOWN


@pytest.mark.parametrize("layout", [UNKNOWN, TRANSFORMERS, DIFFUSERS_PIPELINE, DIFFUSERS_MODEL])
def test_a_library_is_offered_only_for_its_own_folders(layout: str) -> None:
    printed = [s for fix in FIX_STRATEGIES for s in load_snippets(fix, _Trials(layout), "/m/x")]
    stacks = {s.stack for s in printed}
    diffusers = [s.code for s in printed if s.stack == "diffusers"]
    if layout in (UNKNOWN, TRANSFORMERS):
        assert "transformers" in stacks and not diffusers
    else:
        assert "transformers" not in stacks and diffusers
        wanted = "DiffusionPipeline" if layout == DIFFUSERS_PIPELINE else "AutoModel"
        assert all(f"from diffusers import {wanted}" in code for code in diffusers)
    assert {"safetensors", "vllm", "shell"} <= stacks  # the other stacks are for any folder


def test_the_facts_read_the_layout_of_the_models_folder(saved: dict[str, Path]) -> None:
    from loadscope.advice.facts import Facts

    assert "layout" in Facts.__dataclass_fields__
    assert folder_layout(saved["llama-torch"]) == TRANSFORMERS


# -- diffusers -----------------------------------------------------------------------------

DIFFUSERS_ROUTES = [r for r in ROUTES if r.stack == "diffusers"]


@pytest.fixture(scope="module")
def pipeline_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A tiny DDPM pipeline saved by diffusers (a UNet and a scheduler), and the UNet."""
    diffusers = pytest.importorskip(
        "diffusers", reason="diffusers is not installed (pip install -e '.[dev]' brings it)"
    )
    torch.manual_seed(3)
    unet = diffusers.UNet2DModel(
        sample_size=8,
        in_channels=1,
        out_channels=1,
        layers_per_block=1,
        block_out_channels=(8, 16),
        norm_num_groups=4,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
    )
    folder = tmp_path_factory.mktemp("diffusers") / "tiny ddpm"
    diffusers.DDPMPipeline(unet=unet, scheduler=diffusers.DDPMScheduler()).save_pretrained(folder)
    return folder, unet


@pytest.mark.parametrize("route", DIFFUSERS_ROUTES, ids=lambda r: f"{r.layouts[0]}-{r.strategy}")
def test_diffusers_route_runs_as_printed(pipeline_folder: tuple[Path, Any], route: Route) -> None:
    folder, unet = pipeline_folder
    (layout,) = route.layouts
    target = folder if layout == DIFFUSERS_PIPELINE else folder / "unet"
    assert folder_layout(target) == layout
    code = _printed(route, target, layout)
    _needs_version(code)
    ran = _run(code)
    loaded = ran["pipe"].unet if layout == DIFFUSERS_PIPELINE else ran["model"]
    assert type(loaded) is type(unet)
    want = unet.state_dict()
    got = loaded.state_dict()
    assert set(got) == set(want)
    assert all(torch.equal(got[k], want[k]) and got[k].dtype == want[k].dtype for k in want)


def test_a_config_without_a_model_type_preloads_no_modeling_module(tmp_path: Path) -> None:
    """The fork server's preload list read config.json's model_type itself and raised
    KeyError (a traceback) on a config.json without one; it uses the strategies' own
    reading, which says it cannot tell."""
    import json as _json

    from loadscope.engine.trial_run import _preload_for
    from loadscope.model.targets import WeightFile

    (tmp_path / "config.json").write_text(_json.dumps({"architectures": ["X"]}))
    files = [WeightFile(tmp_path / "model.safetensors", 1, "safetensors")]
    assert not [m for m in _preload_for("hf-pretrained", files) if "modeling_" in m]
    (tmp_path / "config.json").write_text(_json.dumps({"model_type": "llama"}))
    assert "transformers.models.llama.modeling_llama" in _preload_for("hf-pretrained", files)
