"""Recognise the files people save by mistake under a weight file's name.

A failed download leaves an HTML error page or a Git LFS pointer named
``model.safetensors``; saying so beats "header too large".
"""

from __future__ import annotations

from loadscope.loaders.errors import GitLfsPointer, HtmlInsteadOfWeights

#: How many leading bytes :func:`reject_impostor` needs.
SNIFF_BYTES = 512


def reject_impostor(prefix: bytes, path: str) -> None:
    """Raise if ``prefix`` (the file's first bytes) is an LFS pointer or an HTML page."""
    if prefix.startswith(b"version https://git-lfs.github.com/spec/"):
        raise GitLfsPointer(
            "is a Git LFS pointer, not the weights (cloned without git-lfs?"
            " run 'git lfs pull' or download with huggingface_hub)",
            path=path,
        )
    head = prefix.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml")):
        raise HtmlInsteadOfWeights(
            "is an HTML/XML page, not weights (a failed or unauthenticated download?"
            " fetch it again and check the URL and token)",
            path=path,
        )
