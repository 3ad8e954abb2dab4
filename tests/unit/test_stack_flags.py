"""Every vLLM and SGLang command the advice prints uses flags and values those servers take.

The servers do not run here, so their printed lines are parsed on their own (shlex, not
the route table they were formatted from) and held to the argument names and choices in
their released sources, recorded below with the version read:

- vLLM 0.21.0: ``vllm/engine/arg_utils.py`` (``EngineArgs``) and ``vllm/config/load.py``
  (``LoadConfig``): ``--safetensors-load-strategy`` takes ``lazy``, ``eager`` or
  ``prefetch``; ``--safetensors-prefetch-num-threads`` and
  ``--safetensors-prefetch-block-size`` (integers >= 1, defaults 8 and 16 MiB) arrived
  in 0.21.0; ``--load-format`` takes among others ``fastsafetensors`` and
  ``runai_streamer``.
- SGLang (``python/sglang/srt/server_args.py``, 2026 releases): ``--model-path``,
  ``--weight-loader-disable-mmap`` (a switch, default off), ``--load-format`` with
  ``fastsafetensors`` and ``runai_streamer``.
"""

from __future__ import annotations

import shlex

import pytest

from loadscope.advice.rules import advise_facts
from tests.unit.test_advice import facts

#: flag -> the values it takes (None: a switch, no value; "int": an integer >= 1).
VLLM_0_21: dict[str, object] = {
    "--safetensors-load-strategy": {"lazy", "eager", "prefetch"},
    "--safetensors-prefetch-num-threads": "int",
    "--safetensors-prefetch-block-size": "int",
    "--load-format": {"auto", "safetensors", "fastsafetensors", "runai_streamer", "pt"},
}
SGLANG: dict[str, object] = {
    "--model-path": "path",
    "--weight-loader-disable-mmap": None,
    "--load-format": {"auto", "safetensors", "fastsafetensors", "runai_streamer", "pt"},
}


def _printed() -> list[tuple[str, str]]:
    """Every (stack, line) of a vLLM or SGLang command the advice can print: a slow FUSE
    mount where every route and fix fires, all stacks shown."""
    f = facts(
        {
            "mmap": 20.0,
            "api": 1.0,
            "prewarm": 5.0,
            "vllm-prefetch": 4.0,
            "fullread": 6.0,
            "fastsafetensors": 2.0,
            "runai": 3.0,
        },
        {"mmap": 0.2},
        read_ahead_kb=128,
    )
    f.model_path = "/models/my model"
    out = []
    for rec in advise_facts(f).recommendations:
        for s in rec.snippets:
            if s.stack in ("vllm", "sglang"):
                out += [(s.stack, ln) for ln in s.code.splitlines() if not ln.startswith("#")]
    return out


def _command(line: str) -> list[str]:
    """The server command in a line (after ``&&``, when a warm runs first)."""
    words = shlex.split(line)
    while "&&" in words:
        words = words[words.index("&&") + 1 :]
    return words


@pytest.mark.parametrize(("stack", "line"), _printed())
def test_every_printed_server_flag_is_one_the_server_takes(stack: str, line: str) -> None:
    words = _command(line)
    if stack == "vllm":
        assert words[:2] == ["vllm", "serve"], line
        table, args = VLLM_0_21, words[3:]
    else:
        assert words[:3] == ["python", "-m", "sglang.launch_server"], line
        table, args = SGLANG, words[3:]
    i = 0
    while i < len(args):
        flag = args[i]
        assert flag in table, f"{flag} is not a {stack} argument: {line}"
        kind = table[flag]
        if kind is None:
            i += 1
            continue
        value = args[i + 1]
        if isinstance(kind, set):
            assert value in kind, f"{flag} {value}: not among {sorted(kind)}"
        elif kind == "int":
            assert int(value) >= 1
        i += 2


def test_the_lines_checked_cover_every_flag_route() -> None:
    seen = " ".join(line for _s, line in _printed())
    for flag in ("--safetensors-load-strategy", "--load-format", "--weight-loader-disable-mmap"):
        assert flag in seen
