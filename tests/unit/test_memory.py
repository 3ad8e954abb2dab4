"""The fresh memory loaders read into: private (not shmem), huge pages only when asked."""

from __future__ import annotations

import ctypes
import os

import pytest

from loadscope.base.memory import fresh_memory

MiB = 1 << 20


def _vm_flags(address: int) -> set[str]:
    """The VmFlags of the mapping holding ``address``, from /proc/self/smaps."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.parametrize("huge", [False, True])
def test_private_anonymous_and_marked_for_huge_pages_only_when_asked(huge: bool) -> None:
    buf = fresh_memory(4 * MiB, huge_pages=huge)
    try:
        address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        flags = _vm_flags(address)
        # "sh": a shared mapping (mmap.mmap(-1, n) alone maps shmem, which costs more to
        # fault in and which MADV_HUGEPAGE does not reach); "hg": MADV_HUGEPAGE.
        assert "sh" not in flags and "mr" in flags and "mw" in flags, flags
        assert ("hg" in flags) is huge, flags
        # Private: a child's write after fork is its own copy.
        buf[0:4] = b"mine"
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            buf[0:4] = b"kids"
            os._exit(0)
        os.waitpid(pid, 0)
        assert buf[0:4] == b"mine"
        assert address % os.sysconf("SC_PAGE_SIZE") == 0  # O_DIRECT needs the alignment
    finally:
        buf.close()
