"""The fork server never initialises CUDA before a fork (issue 38).

A child forked from a process that initialised CUDA inherits a context it cannot use:
every GPU worker would fail. The server imports what the trials preload (transformers
and the model's modeling module, the heaviest); ``torch.cuda._lazy_init`` is patched in
a fresh interpreter before those preloads run, and must never be called. This fails on
a machine without a GPU too: the call is recorded, not merely attempted. And when an
import does initialise CUDA, the server refuses to fork, so the caller starts a fresh
interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loadscope.loaders import forkserver

_PRELOADS = [
    "transformers",
    "transformers.models.llama.modeling_llama",
    "transformers.models.gpt2.modeling_gpt2",
    "safetensors.torch",
    "loadscope.loaders.strategies",
    "loadscope.loaders.pretrained",
]


def test_the_preloads_never_initialise_cuda() -> None:
    pytest.importorskip("transformers")
    code = (
        "import json, sys, torch\n"
        "calls = []\n"
        "torch.cuda._lazy_init = lambda *a, **k: calls.append('lazy_init')\n"
        "from loadscope.loaders import forkserver, preload\n"
        "preload.preload_once(json.loads(sys.argv[1]), set())\n"
        "print(json.dumps({'calls': calls, 'init': forkserver.cuda_initialized()}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(_PRELOADS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"calls": [], "init": False}


def test_a_server_whose_imports_initialised_cuda_refuses_to_fork() -> None:
    server = forkserver.ForkServer()
    try:
        # As if a preload had initialised CUDA in the server (tests/unit's double).
        proc = server.spawn(["--describe"], preload=["tests.unit.cuda_initialising_module"])
    except forkserver.ForkServerError as exc:
        assert "CUDA was initialised" in str(exc)
    else:
        proc.kill()
        pytest.fail("the server forked after CUDA was initialised")
    finally:
        server.close()
