"""Redaction: a report without the hostname or the model's paths, to share outside a team.

Owns :func:`redact` and the labels it puts in place of names (``<model>``, ``<mount>``,
``<host>``, ``<user>``, ``~``, ``<local-disk-N>``), found in the report itself.

May import: ``loadscope.engine`` (the conventional local folders),
``loadscope.probes.localdisk`` and ``loadscope.probes.filestorage`` (the folders and
mounts the report names), ``loadscope.base``.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from typing import Any

from loadscope.probes.filestorage import mount_names
from loadscope.probes.localdisk import disk_directories

#: One replacement: the text, where it matches, and the label put in its place.
_Sub = tuple[str, re.Pattern[str], str]


def redact(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy without the hostname or the model's paths (for reports shared outside a team).

    Hidden in every string of the report, wherever it is nested (recommendations'
    actions, evidence, snippets and apply, notes, failures, the conversion, the probes):
    the model's paths (``<model>``) and the folders above it (``<model>/..``, as a
    conversion beside the model names its parent), the model's folder name where a copy
    destination repeats it (``.../loadscope-copies/<model>``), the mounts it is served
    from (``<mount>``), the user's home (``~``) and name (``<user>``) as path components,
    the local-disk folders the probe measured that are not conventional ones
    (``<local-disk-N>``), and the hostname (``<host>``).

    Reports never hold environment variables or tokens in the first place.
    """
    target = doc.get("target") or {}
    labels = _labels(doc, target)
    home = posixpath.normpath(os.path.expanduser("~"))
    paths = _paths(doc, target, home, labels)
    subs = _substitutions(labels, paths, target, home)
    out: dict[str, Any] = _clean(json.loads(json.dumps(doc, default=str)), subs)
    # The fields that hold the hostname, whatever its length (substring replacement
    # above skips names too short to be told from ordinary words).
    for holder in (out.get("host"), (out.get("probe") or {}).get("system")):
        if isinstance(holder, dict) and "hostname" in holder:
            holder["hostname"] = "<host>"
    return out


def _labels(doc: dict[str, Any], target: dict[str, Any]) -> dict[str, str]:
    """Names replaced wherever they occur: the model's paths, its mounts, the hostname."""
    host = str((doc.get("host") or {}).get("hostname", ""))
    labels = {
        str(target.get(key, "")): "<model>" for key in ("root", "spec", "source") if key in target
    }
    # Where the model's filesystems come from (an NFS server and export, a FUSE daemon's
    # source, a device): names and paths too.
    for name in mount_names(doc.get("probe") or {}):
        labels.setdefault(name, "<mount>")
    labels[host] = "<host>"
    return labels


def _paths(
    doc: dict[str, Any], target: dict[str, Any], home: str, labels: dict[str, str]
) -> dict[str, str]:
    """Replaced as whole paths (not inside a longer name): the folders above the model,
    the home folder, the local disks' folders; checked after the ``labels``."""
    paths: dict[str, str] = {}
    public = _public_dirs(home)
    for key in ("root", "source"):
        if isinstance(target.get(key), str) and target[key].startswith("/"):
            for above, label in _folders_above(target[key], public):
                paths.setdefault(above, label)
    if home.count("/") >= 1 and len(home) > 2:
        paths.setdefault(home, "~")
    folders = set(disk_directories((doc.get("probe") or {}).get("local_disks")))
    for folder in sorted(posixpath.normpath(f) for f in folders):
        if folder not in public and folder not in paths and folder not in labels:
            paths[folder] = (
                f"<local-disk-{sum(v.startswith('<local') for v in paths.values()) + 1}>"
            )
    return paths


def _substitutions(
    labels: dict[str, str], paths: dict[str, str], target: dict[str, Any], home: str
) -> list[_Sub]:
    """The replacements in the order they apply: the longest text first, then the model's
    folder name and the user's name as path components."""
    subs: list[_Sub] = [(s, re.compile(re.escape(s)), labels[s]) for s in labels if len(s) > 2]
    subs += [
        (s, re.compile(rf"(?<![\w.~/-]){re.escape(s)}(?![\w.-])"), label)
        for s, label in paths.items()
        if s not in labels
    ]
    subs.sort(key=lambda sub: len(sub[0]), reverse=True)
    # After the paths: what is left of a name is a path component, never a word.
    for key in ("root", "source"):
        name = posixpath.basename(str(target.get(key, "")).rstrip("/"))
        if len(name) > 2:
            subs.append(
                (
                    name,
                    re.compile(rf"(?<=/loadscope-copies/){re.escape(name)}(?![\w.-])"),
                    "<model>",
                )
            )
    user = _user_name(home)
    if user:
        subs.append((user, re.compile(rf"(?<=/){re.escape(user)}(?![\w.-])"), "<user>"))
    return subs


def _clean(value: Any, subs: list[_Sub]) -> Any:
    """``value`` with every string in it, however nested, relabelled by ``subs``."""
    if isinstance(value, str):
        for _, pattern, label in subs:
            value = pattern.sub(label, value)  # labels hold no backslash
        return value
    if isinstance(value, dict):
        return {k: _clean(v, subs) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v, subs) for v in value]
    return value


def _public_dirs(home: str) -> set[str]:
    """Folders every machine has (the temp dirs, the conventional local disks, the home
    folder and those above it): no secret, and where redacting the folders above the
    model stops."""
    import tempfile

    from loadscope.probes.localdisk import CONVENTIONAL_LOCAL_DIRS

    public = {"/", "/tmp", "/var/tmp", "/dev/shm", *CONVENTIONAL_LOCAL_DIRS}
    public.add(posixpath.normpath(tempfile.gettempdir()))
    folder = home
    while folder not in ("/", ""):
        public.add(folder)
        folder = posixpath.dirname(folder)
    return public


def _folders_above(path: str, public: set[str]) -> list[tuple[str, str]]:
    """The folders above the model's ``path`` as ``<model>/..``, ``<model>/../..``, up to
    a top-level folder (``/data``) or a public one (the temp dir, the home folder)."""
    out: list[tuple[str, str]] = []
    label, folder = "<model>", posixpath.normpath(path)
    while True:
        folder, label = posixpath.dirname(folder), label + "/.."
        if folder in public or folder.count("/") < 2:
            return out
        out.append((folder, label))


def _user_name(home: str) -> str | None:
    """The user's login name when it could be told from other words in a path (a
    folder named after the user elsewhere: /scratch/alice); root's is no secret."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = posixpath.basename(home)
    return user if len(user) > 2 and user != "root" else None
