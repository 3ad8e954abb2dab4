#!/usr/bin/env bash
# The wheels gpu_check.py needs on a lent GPU machine, downloaded here into .whl/.
#
# The machine starts bare and reaches nothing outside: its python3 (3.12) holds torch,
# safetensors, numpy, psutil, huggingface_hub, attrs, typer and humanize, but not
# loadscope, its report checker (jsonschema and its three helpers), python-hostlist or
# the peers (fastsafetensors, runai-model-streamer). This builds loadscope's own wheel
# from the checkout and fetches the others for CPython 3.12 on x86-64 Linux (about
# 4.5 MB in all, under the 64 MiB a call may carry). No FUSE is needed there.
#
# Run here, from the repository root:   bash benchmarks/gpu_wheels.sh
# Then on the device (carry: [".whl"]):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 &&
#   python3 benchmarks/gpu_check.py
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl && mkdir .whl
platforms=()
for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
    manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=(--platform "${p}_x86_64")
done
for pkg in fastsafetensors==0.5.0 runai-model-streamer==0.17.1 jsonschema \
    jsonschema-specifications referencing rpds-py; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d .whl "$pkg"
done
# Pure Python, published as a source archive only: built into a wheel here.
python3 -m pip wheel -q --no-deps -w .whl python-hostlist
python3 -m pip wheel -q --no-deps --no-build-isolation -w .whl .
ls -la .whl
