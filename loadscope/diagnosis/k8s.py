"""``loadscope cluster --k8s N``: the Kubernetes objects that onboard N nodes.

An Indexed Job of N pods (one per node: a required pod anti-affinity on the host
name) and a headless Service that gives pod 0 a stable name for the rendezvous.
Each pod runs ``loadscope cluster TARGET`` with the variables torchrun would set:
``RANK`` from the pod's completion index (the downward API), ``WORLD_SIZE`` N,
``MASTER_ADDR`` pod 0's name under the Service, ``MASTER_PORT``; the same
torch.distributed store as every other launcher, so nothing else changes. The
model's volume is mounted read-only; rank 0 writes the fleet report to ``--out``
(a volume of its own when given, else its log carries the fleet table).

The manifest is built as data and written as YAML by a small emitter (every string
double-quoted, so nothing a user typed can change its structure).

May import: ``loadscope.base``.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: The downward-API path of an Indexed Job pod's index (its rank).
_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
#: What a Kubernetes object name may be (RFC 1123 label).
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class K8sPlan:
    nodes: int
    target: str
    image: str
    name: str = "loadscope-onboard"
    namespace: str | None = None
    port: int = 29500
    out: str = "/loadscope-fleet"
    model_pvc: str | None = None
    model_host_path: str | None = None
    out_pvc: str | None = None
    budget_s: float | None = None
    options: Sequence[str] = ()


def check_name(name: str) -> str | None:
    """Why ``name`` cannot name the Job and Service (None: it can)."""
    if not _NAME.match(name):
        return (
            f"{name!r} is not a Kubernetes name (lower-case letters, digits and '-',"
            " at most 42 characters)"
        )
    return None


def manifest(plan: K8sPlan) -> list[dict[str, Any]]:
    """The Service and the Job, as the API's objects (dicts)."""
    labels = {"app.kubernetes.io/name": "loadscope", "loadscope/onboard": plan.name}
    meta: dict[str, Any] = {"name": plan.name, "labels": labels}
    if plan.namespace:
        meta["namespace"] = plan.namespace
    args = ["cluster", plan.target, "--out", plan.out, "--no-progress"]
    if plan.budget_s:
        args += ["--budget", f"{plan.budget_s:g}"]
    args += list(plan.options)
    volumes, mounts = _volumes(plan)
    container: dict[str, Any] = {
        "name": "loadscope",
        "image": plan.image,
        "command": ["loadscope"],
        "args": args,
        "env": [
            {
                "name": "RANK",
                "valueFrom": {"fieldRef": {"fieldPath": _INDEX}},
            },
            {"name": "WORLD_SIZE", "value": str(plan.nodes)},
            {"name": "MASTER_ADDR", "value": f"{plan.name}-0.{plan.name}"},
            {"name": "MASTER_PORT", "value": str(plan.port)},
        ],
        "ports": [{"containerPort": plan.port, "name": "rendezvous"}],
    }
    if mounts:
        container["volumeMounts"] = mounts
    pod_spec: dict[str, Any] = {
        "subdomain": plan.name,
        "restartPolicy": "Never",
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"loadscope/onboard": plan.name}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
        "containers": [container],
    }
    if volumes:
        pod_spec["volumes"] = volumes
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "completionMode": "Indexed",
            "completions": plan.nodes,
            "parallelism": plan.nodes,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
    return [_service(plan, meta), job]


def _service(plan: K8sPlan, meta: dict[str, Any]) -> dict[str, Any]:
    """The headless Service that names pod 0 for the rendezvous."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": "None",
            "selector": {"loadscope/onboard": plan.name},
            "ports": [{"name": "rendezvous", "port": plan.port, "targetPort": plan.port}],
        },
    }


def _volumes(plan: K8sPlan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the container's mounts of them: the model's (read-only, at
    the target's folder) and the fleet report's, when given."""
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    model_dir = _model_dir(plan.target)
    if plan.model_pvc or plan.model_host_path:
        source: dict[str, Any] = (
            {"persistentVolumeClaim": {"claimName": plan.model_pvc, "readOnly": True}}
            if plan.model_pvc
            else {"hostPath": {"path": plan.model_host_path, "type": "Directory"}}
        )
        volumes.append({"name": "model", **source})
        mounts.append({"name": "model", "mountPath": model_dir, "readOnly": True})
    if plan.out_pvc:
        volumes.append({"name": "fleet", "persistentVolumeClaim": {"claimName": plan.out_pvc}})
        mounts.append({"name": "fleet", "mountPath": plan.out})
    return volumes, mounts


def _model_dir(target: str) -> str:
    """Where the model's volume is mounted: the target's folder (a file's parent)."""
    if target.startswith("synthetic:"):
        return "/models"
    path = posixpath.normpath(target)
    return path if not posixpath.splitext(path)[1] else posixpath.dirname(path) or "/"


def to_yaml(objects: list[dict[str, Any]], header: Sequence[str] = ()) -> str:
    """Multi-document YAML of ``objects`` (strings double-quoted JSON-style)."""
    docs = ["\n".join(_emit(obj, 0)) for obj in objects]
    lines = [f"# {h}" for h in header]
    return "\n".join(lines + ["---\n" + d for d in docs]) + "\n"


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(str(value))


def _emit(value: Any, indent: int) -> list[str]:
    pad = "  " * indent
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            k = json.dumps(str(key)) if not re.match(r"^[A-Za-z][\w.-]*$", str(key)) else key
            if isinstance(item, dict | list) and item:
                out.append(f"{pad}{k}:")
                out += _emit(item, indent + 1)
            else:
                out.append(
                    f"{pad}{k}: {_empty(item) if isinstance(item, dict | list) else _scalar(item)}"
                )
        return out
    for item in value:
        if isinstance(item, dict | list) and item:
            inner = _emit(item, indent + 1)
            out.append(f"{pad}- {inner[0].lstrip()}")
            out += inner[1:]
        else:
            out.append(f"{pad}- {_scalar(item)}")
    return out


def _empty(value: dict[str, Any] | list[Any]) -> str:
    return "{}" if isinstance(value, dict) else "[]"
