"""The public loader API: ``loadscope.load_file`` / ``load_model`` / ``prewarm`` (issue 16).

Every result is compared with safetensors' (or torch's) own output byte for byte, cold
and warm, locally and through the emulated slow disk; bad input raises one clear error
in the family the caller already catches, executes nothing and leaves nothing open.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file as st_load_file
from safetensors.torch import save_file

import loadscope
from loadscope.base.errors import LoadscopeError
from loadscope.probes.pagecache import ColdCache, residency
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize
from tests.conftest import run_here
from tests.malformed_cases import MARKER, RunsCode, torch_zip

pytestmark = pytest.mark.integration


def _same(ours: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> None:
    assert list(ours) == list(ref) or set(ours) == set(ref)
    for name, want in ref.items():
        got = ours[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        a = got.contiguous().view(-1).view(torch.uint8) if got.numel() else got
        b = want.contiguous().view(-1).view(torch.uint8) if want.numel() else want
        assert torch.equal(a, b), name


def _reference(*paths: Path) -> dict[str, torch.Tensor]:
    """safetensors' own load, copied out of its mapping (a mapped page cannot be evicted)."""
    import gc

    out: dict[str, torch.Tensor] = {}
    for p in paths:
        out.update({k: v.clone() for k, v in st_load_file(str(p)).items()})
    gc.collect()
    return out


def _evict(path: Path) -> None:
    ev = ColdCache().evict(path)
    assert ev.verified, ev.note


@pytest.fixture(scope="module")
def every_dtype(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file with every dtype safetensors and this torch share, odd shapes, empty ones."""
    g = torch.Generator().manual_seed(7)
    tensors: dict[str, torch.Tensor] = {}
    for dtype in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.uint16,
        torch.int32,
        torch.uint32,
        torch.int64,
        torch.uint64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
    ):
        # Any bit pattern, except for bool, whose bytes must be 0 or 1.
        top = 2 if dtype == torch.bool else 256
        raw = torch.randint(0, top, (105 * torch.empty((), dtype=dtype).element_size(),))
        tensors[str(dtype).replace("torch.", "t.")] = (
            raw.to(torch.uint8).view(dtype).reshape(3, 5, 7)
        )
    tensors["scalar"] = torch.tensor(3.5, dtype=torch.float32)
    tensors["empty"] = torch.empty((0, 4), dtype=torch.bfloat16)
    tensors["big"] = torch.randn((1024, 1024), generator=g).to(torch.bfloat16)
    path = tmp_path_factory.mktemp("dtypes") / "model.safetensors"
    save_file(tensors, str(path))
    return path


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_load_file_equals_safetensors_for_every_dtype(every_dtype: Path, cache: str) -> None:
    ref = _reference(every_dtype)
    if cache == "cold":
        _evict(every_dtype)
    else:
        # This machine's page cache decays on its own (and another test worker reads
        # beside this one): warm means read and checked resident right before the load.
        for _ in range(5):
            every_dtype.read_bytes()
            if (residency(every_dtype).fraction or 0.0) >= 0.99:
                break
    record = loadscope.LoadRecord()
    ours = loadscope.load_file(every_dtype, record=record)
    _same(ours, ref)
    (choice,) = record.files
    if cache == "warm":
        assert choice.strategy == "mmap" and "resident" in choice.reason, choice
    else:
        assert choice.strategy in ("direct", "parallel"), choice
        assert choice.threads and choice.block_bytes and "resident" in choice.reason


def test_load_model_sharded_and_mixed_equals_safetensors(tmp_path: Path) -> None:
    ck = synthesize(tmp_path / "m", 12 << 20, shards=3, seed=11)
    ref = _reference(*sorted(ck.root.glob("*.safetensors")))
    for f in ck.root.glob("*.safetensors"):
        _evict(f)
    record = loadscope.LoadRecord()
    state = loadscope.load_model(ck.root, record=record, threads=4, block_bytes=1 << 20)
    _same(state, ref)
    assert len(record.files) == 3 and all(f.threads == 4 for f in record.files)
    assert {str(t.dtype) for t in state.values()} >= {"torch.bfloat16", "torch.float32"}
    assert str(record).count("\n") == 2


def test_load_model_of_a_torch_index_equals_torch_load(tmp_path: Path) -> None:
    ck = synthesize(tmp_path / "m", 4 << 20, shards=2, fmt="torch", seed=12)
    assert (ck.root / "pytorch_model.bin.index.json").exists()
    ref: dict[str, torch.Tensor] = {}
    for f in sorted(ck.root.glob("*.bin")):
        ref.update(torch.load(f, weights_only=True))
    record = loadscope.LoadRecord()
    _same(loadscope.load_model(ck.root, record=record), ref)
    assert {f.strategy for f in record.files} == {"torch.load"}


def test_through_the_emulated_slow_disk(tmp_path: Path) -> None:
    if (why := fuse_unavailable_reason()) is not None:
        pytest.skip(f"emulated disk unavailable: {why}")
    ck = synthesize(tmp_path / "src", 8 << 20, shards=2, seed=13)
    ref = _reference(*sorted(ck.root.glob("*.safetensors")))
    settings = EmulatorSettings(latency_s=0.002, jitter_s=0)
    with emulated_disk(ck.root, tmp_path / "mnt", settings) as disk:
        for f in disk.path.glob("*.safetensors"):
            _evict(f)
        record = loadscope.LoadRecord()
        _same(loadscope.load_model(disk.path, record=record), ref)
        assert all(f.strategy != "mmap" for f in record.files)  # cold: read, not mapped


def test_prewarm_fills_the_page_cache(tmp_path: Path) -> None:
    ck = synthesize(tmp_path / "m", 8 << 20, shards=2, seed=14)
    for f in ck.root.glob("*.safetensors"):
        _evict(f)
    report = loadscope.prewarm(ck.root, threads=4, block_bytes=1 << 20)
    assert report.bytes_read >= sum(f.stat().st_size for f in ck.root.glob("*.safetensors"))
    assert all(f.after is not None and f.after > 0.95 for f in report.files)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def no_leaks() -> Iterator[None]:
    before = _open_fds()
    yield
    assert _open_fds() == before, "a file was left open"


def test_missing_file_is_file_not_found(tmp_path: Path, no_leaks: None) -> None:
    missing = tmp_path / "no such.safetensors"
    with pytest.raises(FileNotFoundError) as info:
        loadscope.load_file(missing)
    assert isinstance(info.value, LoadscopeError)
    assert str(info.value) == f"{missing}: no such file or directory"
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        loadscope.load_model(tmp_path / "nothing-here")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff" * 16, "header"),
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n", "Git LFS"),
        (b"<!DOCTYPE html><html><body>login</body></html>" + b" " * 64, "HTML"),
        (b"", "empty"),
    ],
)
def test_bad_files_raise_safetensors_error_naming_the_file(
    tmp_path: Path, content: bytes, message: str, no_leaks: None
) -> None:
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(content)
    with pytest.raises(SafetensorError) as info:
        loadscope.load_file(bad)
    text = str(info.value)
    assert text.startswith(f"{bad}: ") and message in text and "\n" not in text
    assert isinstance(info.value, LoadscopeError)


def test_a_fifo_is_refused_without_hanging(tmp_path: Path, no_leaks: None) -> None:
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(SafetensorError, match="FIFO"):
        loadscope.load_file(fifo)


def test_a_pickle_that_runs_code_is_refused_and_never_run(tmp_path: Path, no_leaks: None) -> None:
    import pickle

    model = tmp_path / "m"
    model.mkdir()
    torch_zip(model / "pytorch_model.bin", {"w": RunsCode(os.system, f"touch {tmp_path / MARKER}")})
    with pytest.raises(pickle.UnpicklingError) as info:
        loadscope.load_model(model)
    assert "would run code" in str(info.value) and str(model) in str(info.value)
    assert not (tmp_path / MARKER).exists()


def test_bad_knobs_are_value_errors(every_dtype: Path) -> None:
    for kwargs in ({"threads": 0}, {"block_bytes": 100}, {"direct": "maybe"}):
        with pytest.raises(ValueError):
            loadscope.load_file(every_dtype, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        loadscope.prewarm(every_dtype, threads=0)


@pytest.mark.parametrize(
    ("device", "said"),
    [
        ("gpu", "not a device torch knows"),
        ("cpu:1", "the CPU is one device"),
        ("meta", "holds no data"),
        ("hip", "no usable hip device"),
        pytest.param(
            "cuda",
            "no usable cuda device",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is usable here"),
        ),
    ],
)
def test_a_device_it_cannot_load_to_is_refused_before_any_read(
    tmp_path: Path, device: str, said: str
) -> None:
    # Moving a loaded model to a bad device used to fail after the whole load, in torch's
    # own words (AssertionError for "cuda" on a CPU-only torch).
    ck = synthesize(tmp_path / "m", 4 << 20, shards=2, seed=13)
    index = ck.root / "model.safetensors.index.json"
    for call in (
        lambda: loadscope.load_file(ck.files[0], device=device),
        lambda: loadscope.load_model(index, device=device),
        lambda: loadscope.load_model(ck.root, device=device, hints="x"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValueError, match=said):
            call()


def test_load_model_of_an_index_file_is_its_model(tmp_path: Path) -> None:
    ck = synthesize(tmp_path / "m", 4 << 20, shards=2, seed=14)
    state = loadscope.load_model(ck.root / "model.safetensors.index.json")
    _same(state, _reference(*sorted(ck.root.glob("*.safetensors"))))


def test_hints_that_are_not_a_dict_are_a_value_error(every_dtype: Path) -> None:
    with pytest.raises(ValueError, match="hints must be a dict"):
        loadscope.load_file(every_dtype, hints="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hints: threads=0"):
        loadscope.load_file(every_dtype, hints={"threads": 0})


def test_an_unknown_hint_is_refused_naming_the_accepted_ones(tmp_path: Path) -> None:
    # {'x': 1} (or a misspelt 'thread') was accepted and ignored without a word.
    ck = synthesize(tmp_path / "m", 4 << 20, shards=2, seed=15)
    for call in (
        lambda: loadscope.load_file(ck.files[0], hints={"x": 1}),
        lambda: loadscope.load_model(ck.root, hints={"threads": 8, "x": 1}),
    ):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == (
            "hints: unknown key 'x' (accepted: threads, block_bytes, direct, huge_pages)"
        )
    assert len(loadscope.load_file(ck.files[0], hints={"threads": 8, "block_bytes": "2MiB"}))


def test_a_record_that_is_not_a_load_record_is_a_value_error(tmp_path: Path) -> None:
    # record={} loaded the whole file, then raised AttributeError ('dict' has no 'files').
    ck = synthesize(tmp_path / "m", 4 << 20, shards=2, seed=16)
    for call in (
        lambda: loadscope.load_file(ck.files[0], record={}),  # type: ignore[arg-type]
        lambda: loadscope.load_model(ck.root, record={}),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValueError, match=r"^record must be a loadscope\.LoadRecord\(\)"):
            call()


def test_a_block_size_o_direct_would_change_is_refused(every_dtype: Path) -> None:
    # 5000 was accepted, then read as 4 KiB O_DIRECT reads and unaligned buffered ones.
    for call in (
        lambda: loadscope.load_file(every_dtype, block_bytes=5000),
        lambda: loadscope.load_model(every_dtype, block_bytes=5000),
        lambda: loadscope.load_file(every_dtype, hints={"block_bytes": 5000}),
    ):
        with pytest.raises(ValueError, match=r"block_bytes=5000: .*a multiple of 4096"):
            call()
    record = loadscope.LoadRecord()
    _evict(every_dtype)
    loadscope.load_file(every_dtype, block_bytes=3 * 4096, record=record)
    (choice,) = record.files
    assert choice.strategy == "mmap" or choice.block_bytes == 3 * 4096, choice


@pytest.mark.parametrize("call", ["load_file", "load_model"])
def test_the_first_calls_torch_import_is_in_its_record(every_dtype: Path, call: str) -> None:
    """A process's first load imports torch (~1.5 s): the record left it out, and its
    time under-reported what the caller waited. The second call pays nothing. The wall
    time is the call's (its checks and any wait), not only its files' loads."""
    code = (
        "import sys, loadscope\n"
        "assert 'torch' not in sys.modules\n"
        f"load = loadscope.{call}\n"
        "first, second = loadscope.LoadRecord(), loadscope.LoadRecord()\n"
        "load(sys.argv[1], record=first)\n"
        "load(sys.argv[1], record=second)\n"
        "d = first.to_dict()\n"
        "assert d['import_seconds'] == first.import_seconds, d\n"
        "assert abs(d['wall_seconds'] - first.import_seconds - first.call_seconds) < 1e-9, d\n"
        "assert first.seconds <= first.call_seconds < first.seconds + 0.5, d\n"
        "assert 'importing torch' in str(first) and 'importing' not in str(second)\n"
        "print(first.import_seconds, second.import_seconds, second.wall_seconds, second.seconds)\n"
    )
    out = run_here([sys.executable, "-c", code, str(every_dtype)], timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    first, second, wall, seconds = (float(x) for x in out.stdout.split())
    # The second call's wall time is the call's: its file's load and the checks around it.
    assert first > 0.01 and second == 0.0 and seconds <= wall < seconds + 0.5, out.stdout


def test_import_loadscope_stays_light() -> None:
    """The CLI imports loadscope: the API must not pull torch in until it is used."""
    code = (
        "import sys, loadscope; assert 'torch' not in sys.modules;"
        " assert callable(loadscope.load_file) and 'load_model' in loadscope.__all__;"
        " print(loadscope.load_file.__module__)"
    )
    out = run_here([sys.executable, "-c", code], check=True, timeout=None)
    assert out.stdout.strip() == "loadscope.loaders.api"


def test_odd_paths(every_dtype: Path, tmp_path: Path) -> None:
    assert len(loadscope.load_file(os.fsencode(every_dtype))) > 3  # bytes, as os.PathLike
    with pytest.raises(SafetensorError, match=r"is a directory: loadscope\.load_model"):
        loadscope.load_file(tmp_path)
    with pytest.raises(FileNotFoundError, match="an empty path names no file"):
        loadscope.load_file("")
    spaced = tmp_path / "my model" / "model.safetensors"
    spaced.parent.mkdir()
    spaced.write_bytes(every_dtype.read_bytes())
    assert set(loadscope.load_model(spaced.parent)) == set(loadscope.load_file(every_dtype))


def test_a_first_call_imports_no_strategy_and_the_api_trials_count_its_set_up(
    tmp_path: Path,
) -> None:
    """Issue 49 item 5: ``loadscope.load_file``'s first call imported the whole strategy
    registry (19 modules, 61 ms of set-up; 46 ms now, none imported), and the api
    trials, forked with loadscope imported, counted none of it. A fresh process's first
    call imports no strategy; each api trial adds the set-up the fork server timed."""
    from loadscope.engine.bench import BenchOptions, run_bench
    from loadscope.model.targets import resolve

    ck = synthesize(tmp_path / "m", 4 << 20, seed=9)
    child = (
        "import sys, torch, safetensors.torch, loadscope\n"
        "loadscope.load_file(sys.argv[1])\n"
        "print(sorted(m for m in sys.modules if m.startswith('loadscope.loaders.strategies')))"
    )
    run = run_here([sys.executable, "-c", child, str(ck.root / "model.safetensors")], check=True)
    assert run.stdout.strip() == "[]", run.stdout
    report = run_bench(
        resolve(str(ck.root)),
        BenchOptions(strategies=("mmap", "api"), cache=("cold",), repeats=1, warmup=False),
    )
    api = [t for t in report.trials if t.strategy == "api" and t.status == "ok"]
    assert api, report.trials
    for t in api:
        first = float((t.detail or {}).get("first_call_s") or 0.0)
        assert 0.005 < first < 1.0, t.detail
        assert (t.seconds or 0.0) >= first
