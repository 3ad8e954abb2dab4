"""``doctor --stack NAME`` leaves out the trials only other stacks' code runs, says why and
how to time them, and keeps what the verdict and the kept routes rest on; the plans of a
file model name only strategies that read files."""

from __future__ import annotations

from loadscope.diagnosis.stack_scope import scoped, stacks_of
from loadscope.diagnosis.trial_plan import CPU_ORDER, TORCH_WITH_SAFETENSORS
from loadscope.loaders.strategies import DEFAULT, DEFAULT_LOADS, HF_DEFAULT, STRATEGIES
from loadscope.probes.sources import ONLY_FILES

EVERY = tuple(STRATEGIES)


def test_no_stack_named_runs_every_trial() -> None:
    assert scoped(EVERY, ()) == (EVERY, {})


def test_safetensors_leaves_out_the_servers_and_transformers_trials_and_says_why() -> None:
    kept, left_out = scoped(EVERY, ("safetensors",))
    assert set(DEFAULT_LOADS) <= set(kept) and "api" in kept and "parallel" in kept
    for name in ("hf-pretrained", "hf-load-model", "runai", "fastsafetensors", "vllm-prefetch"):
        assert name not in kept and name in left_out, name
    assert "add --stack transformers to time it" in left_out["hf-pretrained"]
    assert "add --stack vllm to time it" in left_out["runai"]
    assert "--stack safetensors leaves out" in left_out["runai"]
    # What is kept keeps its order.
    assert kept == tuple(n for n in EVERY if n in kept)


def test_a_kept_route_keeps_its_baseline() -> None:
    kept, left_out = scoped(EVERY, ("transformers",))
    assert {"hf-prewarm", "hf-load-model", HF_DEFAULT} <= set(kept)
    assert "runai" in left_out and DEFAULT in kept
    # from_pretrained has no route of its own: transformers' code is what runs it.
    assert stacks_of(HF_DEFAULT) == frozenset({"transformers"})
    assert "hf-pretrained" not in scoped(EVERY, ("vllm", "shell"))[0]


def test_a_file_models_plans_name_only_strategies_that_read_files() -> None:
    for name in (*CPU_ORDER, *TORCH_WITH_SAFETENSORS):
        assert STRATEGIES[name].requires.sources == ONLY_FILES, name
