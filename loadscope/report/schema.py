"""The JSON reports' published schema, and the check every reader runs before it reads.

``report.schema.json`` (beside this module, versioned by ``schema_version``) describes the
JSON that ``doctor``, ``probe``, ``bench`` and ``bench --ranks`` write, and each node's
result in a fleet. It is generated from the code's own types (the report dataclasses,
through pydantic: ``python -m loadscope.report.schema --write``, a development step; a
test fails when the file and the types part), and read with jsonschema.

:func:`check` bounds a report's depth, refuses another schema version with the reason,
and names the first offending path in one line (``verdict: expected an object, got a
list``). Fields a newer loadscope adds are allowed: only what the readers rely on is
required.

May import: ``loadscope.advice``, ``loadscope.engine``, ``loadscope.actions``,
:mod:`~loadscope.report.compare` (the fleet summary's types),
``loadscope.probes.registry``, ``loadscope.probes.filestorage`` (a file block's shape),
``loadscope.probes.spec`` (each field's unit), ``loadscope.base``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from loadscope.probes.filestorage import FILE_BLOCK_SCHEMA
from loadscope.probes.spec import unit_of

SCHEMA_FILE = Path(__file__).with_name("report.schema.json")
#: The report kinds the schema holds, by the name a reader asks for.
KINDS = ("doctor", "probe", "bench", "ranks", "node", "fleet", "time")
#: Deeper than any report loadscope writes (about 8 levels) by far; bounded before the
#: validator and the renderers recurse into it.
MAX_DEPTH = 64

_JSON_TYPES = {
    dict: "an object",
    list: "a list",
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    type(None): "null",
}
_SCHEMA_TYPES = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "boolean": "a boolean",
    "integer": "an integer",
    "number": "a number",
    "null": "null",
}


class SchemaError(ValueError):
    """A report that is not of the published shape: the first offending path and why."""


def depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects, iteratively (no recursion)."""
    most = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            most = max(most, level)
            if level > MAX_DEPTH:
                return level
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return most


@cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return loaded


def check(doc: Any, kind: str) -> None:
    """Raise :class:`SchemaError` unless ``doc`` is a ``kind`` report of this version."""
    import jsonschema

    if depth(doc) > MAX_DEPTH:
        raise SchemaError(f"JSON nested more than {MAX_DEPTH} levels deep")
    if not isinstance(doc, dict):
        raise SchemaError(f"expected an object, got {_what(doc)}")
    schema = _schema()
    mine = schema["properties"]["schema_version"]["const"]
    version = doc.get("schema_version")
    if kind == "node":  # a node's result has no version of its own: its report has
        inner = doc.get("report")
        version = inner.get("schema_version", mine) if isinstance(inner, dict) else mine
    if version != mine:
        if isinstance(version, int) and not isinstance(version, bool):
            age = "an older" if version < mine else "a newer"
            raise SchemaError(
                f"written by {age} loadscope (schema_version {version}); this one reads"
                f" schema_version {mine}"
            )
        raise SchemaError(f"schema_version: expected {mine}, got {_what(version)}")
    sub = {"$ref": f"#/$defs/{kind}_report", "$defs": schema["$defs"]}
    validator = jsonschema.Draft202012Validator(sub)
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc), key=_shallowest)
    if error is not None:
        raise SchemaError(_say(error, schema["$defs"]))


def _shallowest(error: Any) -> tuple[int, int]:
    # The error nearest the top names the field a person fixes; among equals, the most
    # specific (an anyOf's branch mismatches are its context).
    return (-len(error.absolute_path), 0)


def _what(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _path(parts: Iterator[Any] | Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the report"


def _type_of(branch: dict[str, Any], defs: dict[str, Any]) -> str | None:
    if "$ref" in branch:
        branch = defs.get(branch["$ref"].rsplit("/", 1)[1], {})
    kind = branch.get("type")
    return _SCHEMA_TYPES.get(kind) if isinstance(kind, str) else None


def _say(error: Any, defs: dict[str, Any]) -> str:
    where = _path(error.absolute_path)
    if error.validator == "type":
        wanted = error.validator_value
        kinds: list[str] = [str(k) for k in (wanted if isinstance(wanted, list) else [wanted])]
        want = " or ".join(_SCHEMA_TYPES.get(k, k) for k in kinds)
        return f"{where}: expected {want}, got {_what(error.instance)}"
    if error.validator == "anyOf":
        named = [_type_of(b, defs) for b in error.validator_value]
        shapes = [k for k in named if k is not None]
        if len(shapes) == len(named) and _what(error.instance) not in shapes:
            return f"{where}: expected {' or '.join(shapes)}, got {_what(error.instance)}"
        # The right kind of value, wrong inside: the branch that matched its kind says where.
        inner = [e for e in error.context or [] if e.validator != "type" or e.path]
        if inner:
            return _say(max(inner, key=lambda e: len(e.absolute_path)), defs)
        return f"{where}: {_what(error.instance)} is not of the expected shape"
    if error.validator == "required":
        missing = next((k for k in error.validator_value if k not in error.instance), "?")
        return f"{where}: missing {missing!r}"
    if error.validator in ("enum", "const"):
        allowed = error.validator_value
        allowed = allowed if isinstance(allowed, list) else [allowed]
        shown = ", ".join(repr(a) for a in allowed[:8])
        return f"{where}: expected one of {shown}, got {error.instance!r:.60}"
    return f"{where}: {error.message[:160]}"


# -- generation (a development step: pydantic reads the report dataclasses) ----------------------


def generate() -> dict[str, Any]:
    """The schema, from the report types (needs pydantic, a development dependency)."""
    schemas, defs = _type_defs()
    defs["probe_report"] = _probe_report(schemas, defs)
    defs["bench_report"] = _bench_report()
    defs["ranks_report"] = _ranks_report()
    defs["doctor_report"] = _doctor_report()
    defs["node_report"] = _node_report()
    defs["fleet_report"] = _fleet_report()
    defs["time_report"] = _time_report()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/loadscope/loadscope/report.schema.json",
        "title": "loadscope report",
        "description": (
            "The JSON reports of loadscope doctor, probe, bench, bench --ranks and time,"
            " a fleet node's result and the fleet's summary ($defs: doctor_report,"
            " probe_report, bench_report, ranks_report, time_report, node_report,"
            " fleet_report)."
            " Generated from loadscope's report types."
        ),
        "$ref": "#/$defs/doctor_report",
        "properties": {"schema_version": {"const": 1}},
        "$defs": dict(sorted(defs.items())),
    }


#: The probe blocks the report writes in a shape of its own (schema below: the files'
#: storage and page cache per file, fio's jobs beside the probe's figures); every other
#: probe's block is a ProbeResult of its declared record (``probes/registry.py``).
_OWN_SHAPES = ("files", "fio")


def _probe_sections() -> tuple[str, ...]:
    """The probe blocks whose data is a ProbeResult's, in the registry's order (each gets
    its ``probe_*_data`` from its declared record)."""
    from loadscope.probes.registry import PROBES

    return tuple(k for k, s in PROBES.items() if not s.block and k not in _OWN_SHAPES)


def _ref(model: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{model}"}


def _list_of(model: str) -> dict[str, Any]:
    return {"type": "array", "items": _ref(model)}


def _or_null(model: str) -> dict[str, Any]:
    return {"anyOf": [_ref(model), {"type": "null"}]}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


def _type_defs() -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each report type's own schema, by name, and the shared ``$defs`` pydantic wrote for
    them: titles dropped, ``required`` cut to what the readers index (:data:`_READ`)."""
    from pydantic import TypeAdapter

    types = _report_types()
    keys, shared = TypeAdapter.json_schemas(
        [(name, "serialization", TypeAdapter(t)) for name, t in types.items()],
        ref_template="#/$defs/{model}",
    )
    schemas = {name: dict(keys[(name, "serialization")]) for name in types}
    defs: dict[str, Any] = dict(shared.get("$defs", {}))
    for name, schema in schemas.items():
        if "$ref" not in schema:
            defs[name] = schema
    defs = {k: _with_units(_loosen(v)) for k, v in defs.items()}
    for name, schema in defs.items():
        # Required: what the readers index, not every field today's types declare (a
        # report from an earlier version of schema 1 lacks the later fields).
        if schema.get("type") == "object":
            schema.pop("required", None)
            if name in _READ:
                schema["required"] = list(_READ[name])
    # Reports written before per-stack trials held a recommendation's snippets as a
    # {stack: code} map; the readers still show those (as "not measured here").
    snippets = defs["Recommendation"]["properties"]["snippets"]
    defs["Recommendation"]["properties"]["snippets"] = {
        "anyOf": [snippets, {"type": "object", "additionalProperties": {"type": "string"}}]
    }
    return schemas, defs


def _with_units(schema: dict[str, Any]) -> dict[str, Any]:
    """Each property whose name declares a unit (``probes/spec.py``'s ``UNIT_RULES``)
    says it (``x-unit``): what a figure in the JSON is in, for whoever reads it."""
    for name, prop in (schema.get("properties") or {}).items():
        if isinstance(prop, dict) and (unit := unit_of(name)) is not None:
            prop["x-unit"] = unit
    return schema


def _report_types() -> dict[str, Any]:
    """The types the reports serialize, by the name their schema gets."""
    from loadscope.actions.convert import ConversionTrial
    from loadscope.advice.rules import Recommendation, Verdict
    from loadscope.engine.bench import Sample, Summary, Trial
    from loadscope.engine.broadcast import BroadcastSummary, BroadcastTrial, RankInfo
    from loadscope.engine.phases import PhaseTable
    from loadscope.engine.usercmd import RunResult
    from loadscope.report.compare import FleetNode

    types: dict[str, Any] = {
        "Verdict": Verdict,
        "Recommendation": Recommendation,
        "Trial": Trial,
        "Summary": Summary,
        "Sample": Sample,
        "BroadcastTrial": BroadcastTrial,
        "BroadcastSummary": BroadcastSummary,
        "RankInfo": RankInfo,
        "ConversionTrial": ConversionTrial,
        "FleetNode": FleetNode,
        "RunResult": RunResult,
        "PhaseTable": PhaseTable,
    }
    from loadscope.probes.registry import PROBES

    for key in _probe_sections():
        types[f"probe_{key}_data"] = PROBES[key].record
    return types


def _probe_report(schemas: dict[str, dict[str, Any]], defs: dict[str, Any]) -> dict[str, Any]:
    def probe_result(name: str) -> dict[str, Any]:
        # A ProbeResult's JSON: status, reason and elapsed_s beside its data's own fields,
        # which are there only when the status is ok.
        data = _loosen(_resolve(schemas[f"probe_{name}_data"], defs))
        props = {**data.get("properties", {}), **_PROBE_STATUS}
        return {"type": "object", "properties": props}

    return {
        "type": "object",
        "properties": {
            "schema_version": {"const": 1},
            "target": {"type": "object"},
            "budget_s": {"type": "number"},
            "elapsed_s": {"type": "number"},
            **{n: probe_result(n) for n in _probe_sections()},
            "files": {"type": "array", "items": _FILE},
            "notes": _STRINGS,
            "stalled": {"type": "string"},
            "fio": {"type": "object"},
        },
        # The renderers read every section with a default: a report may leave any out.
        "required": [],
    }


def _bench_report() -> dict[str, Any]:
    return _object(
        {
            **_RUN_HEAD,
            "trials": _list_of("Trial"),
            "summary": _list_of("Summary"),
            "skipped": _REASONS,
            "sample": _or_null("Sample"),
            "notes": _STRINGS,
        },
        required=["summary"],
    )


def _ranks_report() -> dict[str, Any]:
    return _object(
        {
            **_RUN_HEAD,
            "model_bytes": {"type": "integer"},
            "tensors": {"type": "integer"},
            "ranks": _list_of("RankInfo"),
            "trials": _list_of("BroadcastTrial"),
            "summary": _list_of("BroadcastSummary"),
            "skipped": _REASONS,
            "failures": _STRINGS,
            "notes": _STRINGS,
        },
        required=["summary"],
    )


def _user_command() -> dict[str, Any]:
    """``doctor --cmd``: what the renderers read of the user's command and its runs."""
    number_or_null = {"type": ["number", "null"]}
    return {
        "type": "object",
        "properties": {
            "argv": _STRINGS,
            "files": _STRINGS,
            "total_bytes": {"type": "integer"},
            "rounds": {"type": "integer"},
            "notes": _STRINGS,
            # ``--profile``: the wall time of one more cold run by phase (py-spy).
            "phases": _or_null("PhaseTable"),
            "variants": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "changes": {"type": "string"},
                        "skipped": {"type": "string"},
                        "median_seconds": number_or_null,
                        "speedup": number_or_null,
                        "runs": _list_of("RunResult"),
                    },
                    "required": ["name"],
                },
            },
        },
        "required": ["argv", "variants"],
    }


def _time_report() -> dict[str, Any]:
    """``loadscope time --json``: the user's command section with its own version."""
    schema = _user_command()
    schema["properties"] = {"schema_version": {"const": 1}, **schema["properties"]}
    schema["properties"]["kind"] = {"const": "time"}
    schema["required"] = ["schema_version", "kind", "argv", "files", "total_bytes", "variants"]
    # The first variant is the command as it is: every ratio is against it.
    schema["properties"]["variants"] = {**schema["properties"]["variants"], "minItems": 1}
    return schema


def _doctor_report() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "schema_version": {"const": 1},
            "tool": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "version": {"type": "string"}},
                "required": ["version"],
            },
            "created": {"type": "string"},
            "host": _HOST,
            "target": _TARGET,
            "verdict": _ref("Verdict"),
            "recommendations": _list_of("Recommendation"),
            "notes": _STRINGS,
            "probe": _or_null("probe_report"),
            "bench": _or_null("bench_report"),
            "ranks": _or_null("ranks_report"),
            "conversion": _ref("ConversionTrial"),
            "user_command": _user_command(),
            "failures": _STRINGS,
        },
        # What the renderers read without a default (the Markdown's and HTML's first lines).
        "required": ["schema_version", "tool", "created", "target", "verdict", "recommendations"],
    }


def _node_report() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "rank": {"type": "integer", "minimum": 0},
            "host": {"type": "string"},
            "status": {"enum": ["ok", "failed"]},
            "reason": {"type": ["string", "null"]},
            "report": _or_null("doctor_report"),
        },
        "required": ["rank", "host", "status"],
    }


def _fleet_report() -> dict[str, Any]:
    return _object(
        {
            "schema_version": {"const": 1},
            "nodes": _list_of("FleetNode"),
            "outliers": {"type": "object", "additionalProperties": _STRINGS},
        },
        required=["schema_version", "nodes"],
    )


#: Per report type, the fields the renderers (report, compare, the app, the HTML) index.
_READ: dict[str, tuple[str, ...]] = {
    "Verdict": ("status", "headline"),
    "Recommendation": ("id", "title", "action", "optional", "risk"),
    "Snippet": ("stack", "code"),
    "Evidence": ("what",),
    "Trial": ("id", "strategy", "cache", "status"),
    "Summary": ("strategy", "cache", "median_seconds", "median_bytes_per_s", "x_vs_mmap"),
    "BroadcastTrial": ("id", "mode", "cache", "status"),
    "BroadcastSummary": ("mode", "cache", "median_seconds"),
    "FleetNode": ("rank", "name", "status"),
    "RunResult": ("status", "seconds", "ready_by", "exit_code"),
    "PhaseTable": ("wall_s", "phases", "reason"),
    "PhaseTime": ("name", "seconds", "share"),
    "TreeSample": ("t", "read_bytes", "rchar", "rss_bytes", "resident"),
}
_STRINGS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
#: What was skipped and why: {name: reason}.
_REASONS: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
#: The first fields of a bench or bench --ranks report.
_RUN_HEAD: dict[str, Any] = {
    "schema_version": {"const": 1},
    "target": {"type": "object"},
    "options": {"type": "object"},
}
#: What a report names as its model (every reader shows the spec, the file count and size).
_TARGET: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {"type": "string"},
        "kind": {"type": "string"},
        "root": {"type": "string"},
        "files": {"type": "integer", "minimum": 0},
        "total_bytes": {"type": "integer", "minimum": 0},
        "source": {"type": "string"},
        # A model in another source than files (probes/sources.py): which, in words too.
        "source_kind": {"type": "string"},
        "source_title": {"type": "string"},
    },
    "required": ["spec", "files", "total_bytes"],
}
_HOST: dict[str, Any] = {
    "type": "object",
    "properties": {"hostname": {"type": "string"}, "kernel": {"type": "string"}},
}
_PROBE_STATUS: dict[str, Any] = {
    "status": {"enum": ["ok", "unavailable", "failed", "skipped"]},
    "reason": {"type": ["string", "null"]},
    "elapsed_s": {"type": "number"},
}
#: A file's block: its storage and page cache, as the files' probe declares it.
_FILE: dict[str, Any] = FILE_BLOCK_SCHEMA


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _loosen(schema: Any) -> Any:
    """Titles dropped (noise in a published file), tuples read as the lists JSON has."""
    if isinstance(schema, dict):
        out = {k: _loosen(v) for k, v in schema.items() if k != "title"}
        if "prefixItems" in out:
            out.pop("maxItems", None)
            out.pop("minItems", None)
        return out
    if isinstance(schema, list):
        return [_loosen(v) for v in schema]
    return schema


def _main(argv: list[str]) -> int:
    text = json.dumps(generate(), indent=2) + "\n"
    if argv == ["--write"]:
        SCHEMA_FILE.write_text(text, encoding="utf-8")
        print(f"wrote {SCHEMA_FILE}")
        return 0
    if argv == ["--check"]:
        same = SCHEMA_FILE.exists() and SCHEMA_FILE.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{SCHEMA_FILE} differs from the types: run --write")
        return 0 if same else 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))


__all__ = ["KINDS", "MAX_DEPTH", "SCHEMA_FILE", "SchemaError", "check", "depth", "generate"]
