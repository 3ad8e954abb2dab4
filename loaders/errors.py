"""Errors for checkpoint files that are malformed or not what their name says.

One class per rule, so tests (and users grepping logs) can tell exactly which
check failed; all are :class:`~loadscope.base.errors.LoadscopeError` with exit code
``CORRUPT`` unless they say otherwise.
"""

from __future__ import annotations

from loadscope.base.errors import ExitCode, LoadscopeError


class CheckpointError(LoadscopeError):
    """A checkpoint file that cannot be trusted as it is."""

    exit_code = ExitCode.CORRUPT


# -- not a checkpoint at all -------------------------------------------------------------------


class NotACheckpoint(CheckpointError):
    """The bytes are not the format the name promises (and a likely cause is given)."""

    exit_code = ExitCode.UNSUPPORTED


class GitLfsPointer(NotACheckpoint):
    """A Git LFS pointer saved instead of the real file (cloned without ``git lfs``)."""


class HtmlInsteadOfWeights(NotACheckpoint):
    """An HTML page (a login wall or an error page) saved under a weight file's name."""


# -- safetensors rules -------------------------------------------------------------------------


class EmptyFile(CheckpointError):
    """A zero-byte file: an interrupted download or copy."""


class TruncatedHeader(CheckpointError):
    """Shorter than the 8-byte header length, or the header runs past the end of the file."""


class HeaderTooLarge(CheckpointError):
    """The declared header length exceeds the format's 100,000,000-byte limit."""


class HeaderNotUtf8(CheckpointError):
    """The header bytes are not valid UTF-8."""


class HeaderNotJson(CheckpointError):
    """The header is not valid JSON."""


class HeaderNotObject(CheckpointError):
    """The header is JSON, but not a JSON object of tensor entries."""


class InvalidMetadata(CheckpointError):
    """``__metadata__`` is not a map of strings to strings."""


class InvalidTensorEntry(CheckpointError):
    """A tensor entry lacks ``dtype``/``shape``/``data_offsets`` or has the wrong types."""


class UnknownDtype(CheckpointError):
    """A dtype that the safetensors format does not define."""


class DuplicateTensor(CheckpointError):
    """The same tensor name appears twice in one header."""


class InvalidOffsets(CheckpointError):
    """``data_offsets`` negative, reversed, or leaving gaps or overlaps between tensors."""


class TensorSizeMismatch(CheckpointError):
    """A tensor's byte range does not equal its element count times its dtype size."""


class SizeOverflow(CheckpointError):
    """A shape whose element count or byte size overflows 64 bits."""


class DataSizeMismatch(CheckpointError):
    """The tensor data does not cover the rest of the file exactly (truncated or trailing bytes)."""


# -- torch checkpoints -------------------------------------------------------------------------


class TorchCheckpointError(CheckpointError):
    """A ``.bin``/``.pt``/``.pth`` file that is neither a torch zip archive nor a legacy pickle."""


class UnsafePickle(CheckpointError):
    """A torch pickle that imports something a weights-only load refuses (``os.system``,
    ``builtins.exec``, any class): unpickling it would run that code, not rebuild tensors."""

    exit_code = ExitCode.UNSUPPORTED


class TorchTooOld(LoadscopeError):
    """The installed torch cannot load pickles safely (``weights_only`` before 2.6 could be
    made to run code, CVE-2025-32434), so torch checkpoints are not loaded with it."""

    exit_code = ExitCode.UNSUPPORTED
