"""How a trial's tensors are held against the reference read's (engine/trials.py)."""

from __future__ import annotations

from loadscope.engine.trials import digest_mismatch

REF = {"embed.weight": "aa:16", "lm_head.weight": "aa:16", "norm.weight": "bb:4"}


def test_the_same_tensors_match() -> None:
    assert digest_mismatch(REF, dict(REF)) is None


def test_a_tied_alias_one_side_lacks_is_not_a_difference() -> None:
    # save_pretrained's safetensors drop lm_head.weight (tied to the embedding); the
    # pickles keep it. Either side may be the reference.
    dropped = {"embed.weight": "aa:16", "norm.weight": "bb:4"}
    assert digest_mismatch(REF, dropped) is None
    assert digest_mismatch(dropped, REF) is None


def test_a_missing_or_different_tensor_is_named() -> None:
    assert digest_mismatch(REF, {"embed.weight": "aa:16", "lm_head.weight": "aa:16"}) == (
        "1 tensor(s) missing (first: norm.weight)"
    )
    wrong = {**REF, "norm.weight": "cc:4"}
    assert digest_mismatch(REF, wrong) == (
        "1 tensor(s) differ from the reference read (first: norm.weight)"
    )
    extra = {**REF, "bias": "dd:4"}  # bytes the reference has nowhere
    assert digest_mismatch(REF, extra) == (
        "1 tensor(s) differ from the reference read (first: bias)"
    )
