"""Target resolution: files, directories, indexes, the local HF cache, synthetic specs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadscope.base.errors import PathNotFound
from loadscope.model.targets import (
    BadTargetSpec,
    NoWeightFiles,
    SyntheticSpec,
    hub_cache_dir,
    open_target,
    parse_synthetic,
    resolve,
    safetensors_twin,
)
from loadscope.tools.synth import SyntheticCheckpoint, synthesize
from tests.malformed_cases import good_st


def test_single_file(synth_single: SyntheticCheckpoint) -> None:
    path = synth_single.files[0]
    target = resolve(str(path))
    assert target.kind == "file"
    assert [f.path for f in target.files] == [path]
    assert target.files[0].size_bytes == path.stat().st_size
    assert target.files[0].format == "safetensors"


def test_directory_follows_index(synth_sharded: SyntheticCheckpoint) -> None:
    target = resolve(str(synth_sharded.root))
    assert target.kind == "directory"
    assert target.index == synth_sharded.root / "model.safetensors.index.json"
    assert [f.path for f in target.files] == sorted(synth_sharded.files)
    assert target.weight_map is not None and len(target.weight_map) == synth_sharded.tensor_count


def test_an_index_named_as_the_target_is_its_model(synth_sharded: SyntheticCheckpoint) -> None:
    index = synth_sharded.root / "model.safetensors.index.json"
    target = resolve(str(index))
    assert target.kind == "directory" and target.root == synth_sharded.root
    assert target.index == index
    assert [f.path for f in target.files] == sorted(synth_sharded.files)


def test_a_torch_index_named_as_the_target_is_read_as_torch(
    synth_both: SyntheticCheckpoint,
) -> None:
    target = resolve(str(synth_both.root / "pytorch_model.bin.index.json"))
    assert target.formats == {"torch"} and len(target.files) == 2


def test_safetensors_beside_a_torch_model_are_its_alternates(
    synth_both: SyntheticCheckpoint, tmp_path: Path
) -> None:
    """A torch index named in a folder that also holds the model as safetensors: those are
    found (by their own index), so that the advice can say "load those", not "convert"."""
    target = resolve(str(synth_both.root / "pytorch_model.bin.index.json"))
    assert target.formats == {"torch"}
    assert {f.format for f in target.alternates} == {"safetensors"}
    assert sorted(f.path.name for f in target.alternates) == sorted(
        f.name for f in synth_both.files if f.name.endswith(".safetensors")
    )
    # A single torch file too, by its twin's name (model.safetensors for pytorch_model.bin,
    # x.safetensors for x.bin); a torch-only folder has nothing beside it.
    single = synthesize(tmp_path / "one", 256 << 10, fmt="both", seed=4).root
    beside = resolve(str(single / "pytorch_model.bin")).alternates
    assert [f.path.name for f in beside] == ["model.safetensors"]
    (single / "pytorch_model.bin").rename(single / "ckpt.bin")
    assert resolve(str(single / "ckpt.bin")).alternates == ()
    # ... until its own twin is there (as the advice's conversion code writes it).
    (single / "model.safetensors").rename(single / "ckpt.safetensors")
    twin = resolve(str(single / "ckpt.bin")).alternates
    assert [f.path.name for f in twin] == ["ckpt.safetensors"]
    # A safetensors file stands alone, pickles beside it or not (they may be anything).
    assert resolve(str(synth_both.root / "model-00001-of-00002.safetensors")).alternates == ()
    only = synthesize(tmp_path / "torch", 256 << 10, fmt="torch", seed=5).root
    assert resolve(str(only / "pytorch_model.bin")).alternates == ()


@pytest.mark.parametrize(
    ("torch_name", "twin"),
    [
        ("pytorch_model.bin", "model.safetensors"),
        ("pytorch_model-00001-of-00002.bin", "model-00001-of-00002.safetensors"),
        ("pytorch_model.bin.index.json", "model.safetensors.index.json"),
        ("diffusion_pytorch_model.bin", "diffusion_pytorch_model.safetensors"),
        ("diffusion_pytorch_model.fp16.bin", "diffusion_pytorch_model.fp16.safetensors"),
        ("unet/pytorch_model.bin", "unet/model.safetensors"),
        ("ckpt.pt", "ckpt.safetensors"),
    ],
)
def test_safetensors_twin_is_the_name_hf_looks_for(torch_name: str, twin: str) -> None:
    assert safetensors_twin(torch_name) == twin


def test_only_the_twins_count_as_beside(tmp_path: Path) -> None:
    """An adapter's or a variant's safetensors in the folder are not the model's: only
    the torch file's twin is taken (all *.safetensors were, and bench loaded both)."""
    synthesize(tmp_path, 256 << 10, fmt="both", seed=6)
    good_st(tmp_path / "adapter_model.safetensors")
    good_st(tmp_path / "model.fp16.safetensors")
    beside = resolve(str(tmp_path / "pytorch_model.bin")).alternates
    assert [f.path.name for f in beside] == ["model.safetensors"]
    d = tmp_path / "diffusers"
    d.mkdir()
    (d / "diffusion_pytorch_model.bin").symlink_to(tmp_path / "pytorch_model.bin")
    good_st(d / "diffusion_pytorch_model.fp16.safetensors")
    assert resolve(str(d / "diffusion_pytorch_model.bin")).alternates == ()


def test_safetensors_sharded_otherwise_than_the_pickles_are_found(tmp_path: Path) -> None:
    """A repo saved once as one pytorch_model.bin and again as two safetensors shards (or
    the other way round): the safetensors were missed, so the doctor said "convert" and
    its code would have written a second copy beside them."""
    import shutil

    one = synthesize(tmp_path / "one", 1 << 20, fmt="torch", seed=3).root
    for f in synthesize(tmp_path / "st2", 1 << 20, shards=2, seed=3).root.iterdir():
        shutil.copy(f, one / f.name)
    target = resolve(str(one / "pytorch_model.bin"))
    assert [f.path.name for f in target.alternates] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert target.alternates_index == one / "model.safetensors.index.json"
    two = synthesize(tmp_path / "two", 1 << 20, shards=2, fmt="torch", seed=3).root
    shutil.copy(synthesize(tmp_path / "st1", 1 << 20, seed=3).root / "model.safetensors", two)
    target = resolve(str(two / "pytorch_model.bin.index.json"))
    assert [f.path.name for f in target.alternates] == ["model.safetensors"]
    # Not under HF's torch names: a model.safetensors beside ckpt.bin may be anything.
    (two / "pytorch_model-00001-of-00002.bin").rename(two / "ckpt.bin")
    assert resolve(str(two / "ckpt.bin")).alternates == ()


def test_unusable_safetensors_beside_are_said_not_passed_over(
    synth_both: SyntheticCheckpoint, tmp_path: Path
) -> None:
    """The safetensors beside a torch model, with a shard missing: none are used, and why
    is kept (it fell back to "convert" saying nothing)."""
    d = tmp_path / "m"
    d.mkdir()
    for f in synth_both.root.iterdir():
        if f.name != "model-00002-of-00002.safetensors":
            (d / f.name).symlink_to(f)
    target = resolve(str(d / "pytorch_model.bin.index.json"))
    assert target.alternates == ()
    assert target.alternates_problem.startswith(
        "the safetensors files beside the model cannot be used"
    )
    assert "model-00002-of-00002.safetensors" in target.alternates_problem
    assert "missing" in target.alternates_problem
    # The torch files beside safetensors likewise; a folder without any: nothing to say.
    assert resolve(str(synth_both.root)).alternates_problem == ""


def test_index_wins_over_stray_files(synth_sharded: SyntheticCheckpoint, tmp_path: Path) -> None:
    # Mistral-style repos ship consolidated.safetensors beside the indexed shards.
    d = tmp_path / "m"
    d.mkdir()
    for f in [*synth_sharded.files, synth_sharded.root / "model.safetensors.index.json"]:
        (d / f.name).symlink_to(f)
    good_st(d / "consolidated.safetensors")
    names = {f.path.name for f in resolve(str(d)).files}
    assert "consolidated.safetensors" not in names
    assert len(names) == 3


def test_directory_without_index_takes_all_safetensors(tmp_path: Path) -> None:
    good_st(tmp_path / "b.safetensors")
    good_st(tmp_path / "a.safetensors")
    (tmp_path / "pytorch_model.bin").write_bytes(b"PK\x03\x04")
    target = resolve(str(tmp_path))
    assert [f.path.name for f in target.files] == ["a.safetensors", "b.safetensors"]


def test_torch_directory_skips_non_weights(tmp_path: Path) -> None:
    synthesize(tmp_path, 256 << 10, fmt="torch")
    (tmp_path / "training_args.bin").write_bytes(b"x")
    target = resolve(str(tmp_path))
    assert [f.path.name for f in target.files] == ["pytorch_model.bin"]
    assert target.formats == {"torch"}


def test_torch_index_directory(synth_both: SyntheticCheckpoint, tmp_path: Path) -> None:
    d = tmp_path / "t"
    d.mkdir()
    for f in synth_both.root.iterdir():
        if "pytorch_model" in f.name:
            (d / f.name).symlink_to(f)
    target = resolve(str(d))
    assert target.index is not None and target.index.name == "pytorch_model.bin.index.json"
    assert len(target.files) == 2


def test_no_weights_hints_at_subfolders(tmp_path: Path) -> None:
    (tmp_path / "transformer").mkdir()
    good_st(tmp_path / "transformer" / "diffusion_pytorch_model.safetensors")
    with pytest.raises(NoWeightFiles, match="transformer/"):
        resolve(str(tmp_path))


def _fake_hub(cache: Path, repo: str, files: dict[str, Path], revision: str = "main") -> Path:
    commit = "0123456789abcdef0123456789abcdef01234567"
    base = cache / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True)
    (base / "refs" / revision).write_text(commit)
    snap = base / "snapshots" / commit
    snap.mkdir(parents=True)
    (base / "blobs").mkdir()
    for name, src in files.items():
        blob = (
            base / "blobs" / name
        )  # real caches name blobs by hash; the symlink shape is what matters
        blob.write_bytes(src.read_bytes())
        (snap / name).symlink_to(Path("../../blobs") / name)
    return snap


def test_hf_repo_from_local_cache(
    synth_sharded: SyntheticCheckpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "hub"
    files = {f.name: f for f in synth_sharded.files}
    files["model.safetensors.index.json"] = synth_sharded.root / "model.safetensors.index.json"
    snap = _fake_hub(cache, "acme/tiny", files)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    target = resolve("acme/tiny")
    assert target.kind == "hf-cache"
    assert target.root == snap
    assert len(target.files) == 3
    assert "acme/tiny@main" in target.detail
    assert resolve("acme/tiny@main").root == snap


def test_hub_cache_dir_follows_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert hub_cache_dir() == tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "x"))
    assert hub_cache_dir() == tmp_path / "x"


def test_existing_relative_path_beats_repo_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "name").mkdir()
    good_st(tmp_path / "org" / "name" / "model.safetensors")
    monkeypatch.chdir(tmp_path)
    assert resolve("org/name").kind == "directory"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("synthetic:1GiB", SyntheticSpec(1 << 30)),
        ("synthetic:512MiB,shards=4", SyntheticSpec(512 << 20, shards=4)),
        ("synthetic:2M,format=both,seed=7", SyntheticSpec(2 << 20, format="both", seed=7)),
    ],
)
def test_parse_synthetic(spec: str, expected: SyntheticSpec) -> None:
    assert parse_synthetic(spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        "synthetic:",
        "synthetic:lots",
        "synthetic:1G,shards",
        "synthetic:1G,colour=red",
        "synthetic:1G,format=onnx",
    ],
)
def test_parse_synthetic_rejects(spec: str) -> None:
    with pytest.raises(BadTargetSpec):
        parse_synthetic(spec)


def test_synthetic_target_is_removed_afterwards(tmp_path: Path) -> None:
    with open_target("synthetic:1MiB,shards=2", synth_dir=tmp_path) as target:
        root = target.root
        assert target.kind == "synthetic"
        assert len(target.files) == 2
        assert all(f.path.exists() for f in target.files)
        assert abs(target.total_bytes - (1 << 20)) < 64 << 10
    assert not root.exists()
    assert list(tmp_path.iterdir()) == []


def test_synthetic_target_is_removed_on_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), open_target("synthetic:256KiB", synth_dir=tmp_path):
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_index_with_bad_shard_name_type(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": 5}}))
    with pytest.raises(Exception, match="not a file name"):
        resolve(str(tmp_path))


def test_index_names_a_shard_two_ways_or_in_a_subfolder(tmp_path: Path) -> None:
    """'./a' and 'a' are one shard; a tensor swapped between sub/m and m is caught."""
    import json

    from loadscope.model.inspection import inspect_target
    from loadscope.model.targets import InvalidIndex
    from tests.malformed_cases import good_st

    d = tmp_path / "two-ways"
    d.mkdir()
    good_st(d / "a.safetensors", ("w", "v"))
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "./a.safetensors", "v": "a.safetensors"}})
    )
    target = resolve(str(d))
    assert len(target.files) == 1
    assert sum(f.tensor_count or 0 for f in inspect_target(target).files) == 2

    s = tmp_path / "swapped"
    (s / "sub").mkdir(parents=True)
    good_st(s / "m.safetensors", ("w",))
    good_st(s / "sub" / "m.safetensors", ("v",))
    (s / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "sub/m.safetensors", "v": "m.safetensors"}})
    )
    with pytest.raises(InvalidIndex, match=r"but it is in 'm\.safetensors'"):
        inspect_target(resolve(str(s)))


def test_a_revision_is_not_a_path() -> None:
    from loadscope.model.targets import BadTargetSpec

    with pytest.raises(BadTargetSpec, match="not a path"):
        resolve("org/name@../../etc")


@pytest.mark.parametrize(
    ("spec", "repo"),
    [
        ("gpt2", "gpt2"),
        ("gpt2@main", "gpt2"),
        ("hf://gpt2", "gpt2"),
        ("acme/tiny", "acme/tiny"),
        ("acme/tiny@main", "acme/tiny"),
        ("hf://acme/tiny", "acme/tiny"),
        ("models--acme--tiny", "acme/tiny"),
    ],
)
def test_repo_ids_as_people_type_them(
    synth_sharded: SyntheticCheckpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spec: str,
    repo: str,
) -> None:
    """Issue 19: `gpt2` (no organisation) said "no such file or directory" though cached."""
    cache = tmp_path / "hub"
    files = {f.name: f for f in synth_sharded.files}
    files["model.safetensors.index.json"] = synth_sharded.root / "model.safetensors.index.json"
    snap = _fake_hub(cache, repo, files)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    target = resolve(spec)
    assert target.kind == "hf-cache" and target.root == snap and len(target.files) == 3
    # The cache folder itself, by its path.
    folder = resolve(str(cache / ("models--" + repo.replace("/", "--"))))
    assert folder.kind == "hf-cache" and folder.root == snap


def test_a_missing_repo_says_which_cache_and_how_to_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PathNotFound) as bare:
        resolve("gpt2")
    assert "no such file or directory" in str(bare.value)
    assert f"cache at {tmp_path / 'hub'}" in str(bare.value) and "'hf download gpt2'" in str(
        bare.value
    )
    with pytest.raises(PathNotFound) as pinned:
        resolve("acme/none@v1")
    assert "'hf download acme/none --revision v1'" in str(pinned.value)
    with pytest.raises(PathNotFound) as file_like:
        resolve("model.safetensors")
    assert "Hugging Face" not in str(file_like.value)


def test_a_report_keeps_an_absolute_path_for_a_relative_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my model").mkdir()
    good_st(tmp_path / "my model" / "a.safetensors")
    monkeypatch.chdir(tmp_path)
    target = resolve("my model")
    assert target.spec == "my model"
    assert target.report_spec == str(tmp_path / "my model")
    assert resolve(str(tmp_path / "my model")).report_spec == str(tmp_path / "my model")
    from loadscope.model.inspection import inspect_target

    # inspect --json too (it kept the relative spec, which names nothing elsewhere)
    assert inspect_target(target).to_dict()["target"]["spec"] == str(tmp_path / "my model")
    assert inspect_target(target).to_dict()["target"]["root"] == str(tmp_path / "my model")
