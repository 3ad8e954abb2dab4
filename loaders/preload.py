"""What the fork server paid before any trial, kept for the trials to count: each
preloaded module's import time, the public API's first-call set-up, ``loadscope warm``'s
start-up. A forked trial inherits these paid; a strategy whose call pays them in a user's
fresh process adds them to its figure from here.

Owns :data:`PRELOAD_SECONDS` and the preloading itself (imports only: no torch operation).
May import: the standard library.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import time
from typing import Any

#: What importing each preloaded module took in the server (first import only): what a
#: fresh process pays for it, which a forked trial inherits already paid (a strategy adds
#: it to its figure where its call pays it in a user's process).
PRELOAD_SECONDS: dict[str, float] = {}


#: The module a first ``loadscope.load_file``/``load_model``/``from_pretrained`` imports
#: (``import loadscope`` itself is lazy): its import is that call's set-up.
FIRST_CALL_MODULE = "loadscope.api"


def count_first_call(notes: dict[str, Any]) -> None:
    """Add to a trial's time (``notes["setup_s"]``) what a fresh process's first loadscope
    call pays in set-up: the public API's imports, timed once in this fork server, first
    thing after torch and safetensors (a forked trial inherits them paid). For the
    strategies that run the public API as a user's script does; nothing without a server."""
    took = PRELOAD_SECONDS.get(FIRST_CALL_MODULE)
    if took is not None:
        notes["setup_s"] = float(notes.get("setup_s") or 0.0) + took
        notes["first_call_s"] = took


#: A preload name that is a command, not a module: ``loadscope warm``'s own start-up
#: (interpreter, imports, its residency report), timed once on a one-page file. A
#: sampled ``prewarm`` trial fills its ranges in-process and adds it (the whole trial
#: runs the command itself).
WARM_COMMAND = "loadscope warm"


def warm_command_start_s() -> float:
    """``loadscope warm``'s start-up, on a one-tensor file of a page: what the fork
    server measured, else measured here (and kept for this process). In CPU time of the
    command (user and system), as the first call's imports are timed: its wall time on
    a busy 2-core machine counts the others' work."""
    took = PRELOAD_SECONDS.get(WARM_COMMAND)
    if took is None:
        took = PRELOAD_SECONDS[WARM_COMMAND] = _time_warm_command()
    return took


def _time_warm_command() -> float:
    import resource
    import tempfile

    with tempfile.TemporaryDirectory(prefix="loadscope-warm-start-") as folder:
        page = os.path.join(folder, "page.safetensors")  # one 4 KiB tensor
        header = json.dumps({"page": {"dtype": "U8", "shape": [4096], "data_offsets": [0, 4096]}})
        header += " " * (-len(header) % 8)
        with open(page, "wb") as fh:
            fh.write(len(header).to_bytes(8, "little") + header.encode() + bytes(4096))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [sys.executable, "-m", "loadscope", "warm", page, "--quiet"],
            capture_output=True,
            check=False,
            timeout=120,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise OSError(f"loadscope warm on a one-page file exited {done.returncode}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def preload_once(modules: list[Any], done: set[str]) -> None:
    """Import what a request asks to have imported before its fork, once per server.

    Libraries a strategy imports before its clock (transformers and the model's modeling
    module: ~3.3 s per worker here) are then imported once for every later trial. Only
    imports, and :data:`WARM_COMMAND` timed: no torch operation runs in the server. A
    module that fails to import is left to the worker, which reports the error as its own.
    """
    for name in modules:
        if isinstance(name, str) and name not in done:
            done.add(name)
            if name == WARM_COMMAND:
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    warm_command_start_s()
                continue
            fresh = name not in sys.modules
            t0 = time.perf_counter()
            with contextlib.suppress(Exception):
                importlib.import_module(name)
                if fresh:
                    PRELOAD_SECONDS[name] = time.perf_counter() - t0
