"""Write seed corpora for the atheris harnesses: ``python fuzz/make_corpus.py [DIR]``.

Creates ``DIR/header``, ``DIR/torch`` and ``DIR/index`` (default ``DIR``:
``build/fuzz``, which git ignores) with a few valid and nearly valid inputs each, so
the fuzzers start from the formats' structure instead of from nothing.
"""

from __future__ import annotations

import io
import json
import struct
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

#: data.pkl of ``torch.save({"a": torch.zeros(4), "b": torch.ones(2, dtype=torch.float16)})``.
TORCH_PKL = (
    b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01ctorch._utils\n_rebuild_tensor_v2\nq\x02((X\x07\x00"
    b"\x00\x00storageq\x03ctorch\nFloatStorage\nq\x04X\x01\x00\x00\x000q\x05X\x03\x00\x00\x00"
    b"cpuq\x06K\x04tq\x07QK\x00K\x04\x85q\x08K\x01\x85q\t\x89ccollections\nOrderedDict\nq\n)Rq"
    b"\x0btq\x0cRq\rX\x01\x00\x00\x00bq\x0eh\x02((h\x03ctorch\nHalfStorage\nq\x0fX\x01\x00\x00"
    b"\x001q\x10h\x06K\x02tq\x11QK\x00K\x02\x85q\x12K\x01\x85q\x13\x89h\n)Rq\x14tq\x15Rq\x16u."
)
#: A pickle that would call fuzz_torch.canary if anything ever unpickled it.
CANARY_PKL = b"\x80\x02c__main__\ncanary\n)R."


def st_file(header: Mapping[str, object], data_len: int, pad: bool = True) -> bytes:
    raw = json.dumps(header).encode()
    if pad:
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"\0" * data_len


def header_seeds() -> list[bytes]:
    one = {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}
    two = {
        "__metadata__": {"format": "pt"},
        "b": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
        "a": {"dtype": "F4", "shape": [4], "data_offsets": [6, 8]},
        "s": {"dtype": "I64", "shape": [], "data_offsets": [8, 16]},
    }
    return [
        st_file({}, 0),
        st_file(one, 16),
        st_file(two, 16),
        st_file(one, 15),
        st_file({"w": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 16]}}, 16),
        b'\x10\x00\x00\x00\x00\x00\x00\x00{"a":{"a":{}}}  ',
    ]


def torch_zip(pkl: bytes, compression: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        zf.writestr("archive/data.pkl", pkl)
        zf.writestr("archive/data/0", b"\0" * 16)
        zf.writestr("archive/data/1", b"\0" * 4)
        zf.writestr("archive/version", b"3\n")
    return buf.getvalue()


def torch_seeds() -> list[bytes]:
    return [
        torch_zip(TORCH_PKL),
        torch_zip(TORCH_PKL, zipfile.ZIP_DEFLATED),
        torch_zip(TORCH_PKL, zipfile.ZIP_BZIP2),
        torch_zip(TORCH_PKL, zipfile.ZIP_LZMA),
        torch_zip(CANARY_PKL),
        b"\x80\x02\x8a\x0alZ\xfc\x9cF\xf9 j\xa8P\x19." + TORCH_PKL,  # legacy: magic, then pickles
    ]


def index_seeds() -> list[bytes]:
    good = {
        "a": "model-00001-of-00002.safetensors",
        "b": "model-00001-of-00002.safetensors",
        "c": "model-00002-of-00002.safetensors",
    }
    hostile = [
        "sub/d.safetensors",
        "loop.safetensors",
        "dangling.safetensors",
        "outside.safetensors",
        "fifo.safetensors",
        "dir.safetensors",
        "long.safetensors",
        "../elsewhere/x.safetensors",
        "pytorch_model.bin",
    ]
    seeds = [b"\x00" + json.dumps({"metadata": {}, "weight_map": good}).encode()]
    for shard in hostile:
        seeds.append(b"\x00" + json.dumps({"weight_map": {**good, "d": shard}}).encode())
    seeds.append(b"\x01" + json.dumps({"weight_map": {"e": "pytorch_model.bin"}}).encode())
    return seeds


def main(argv: list[str]) -> None:
    out = Path(argv[1] if len(argv) > 1 else "build/fuzz")
    for kind, seeds in (
        ("header", header_seeds()),
        ("torch", torch_seeds()),
        ("index", index_seeds()),
    ):
        folder = out / kind
        folder.mkdir(parents=True, exist_ok=True)
        for i, seed in enumerate(seeds):
            (folder / f"seed-{i:02d}").write_bytes(seed)
        print(f"{folder}: {len(seeds)} seeds")


if __name__ == "__main__":
    main(sys.argv)
