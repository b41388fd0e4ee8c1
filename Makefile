# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: venv demo demo-dpo demo-grpo test lint bench fuzz clean

venv: $(STAMP)

# The lock is installed with --no-deps: it is the complete, resolved set (see requirements/README.md).
$(STAMP): requirements/lock.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-deps -r requirements/lock.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

# What only the tests and the optional extras need (trackers, lm-eval, browser driver, fuzzing): installed
# for `make test`, never for `make demo`, so a fresh machine's first demo stays a few minutes.
$(TEST_STAMP): $(STAMP) requirements/lock-test.txt
	$(BIN)/python -m pip install -q --no-deps -r requirements/lock-test.txt
	touch $(TEST_STAMP)

demo: $(STAMP)
	$(BIN)/python -m cheaptune.demo.run

# Preference tuning (DPO, LoRA) on the same task: the held-out chosen-vs-rejected margin before and after.
demo-dpo: $(STAMP)
	$(BIN)/python -m cheaptune.demo.run --objective dpo

# RL with a verifiable reward (GRPO, LoRA) on the same task: the held-out mean reward before and after.
demo-grpo: $(STAMP)
	$(BIN)/python -m cheaptune.demo.grpo

# One worker per core (at most 4), each single-threaded; a test file stays on one worker (its module fixtures
# are built once).
test: $(TEST_STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile

# The CLI fuzz test's long random profile (make test runs a small derandomized one).
fuzz: $(TEST_STAMP)
	HYPOTHESIS_PROFILE=fuzz-long OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q tests/cli/test_fuzz.py

lint: $(TEST_STAMP)
	$(BIN)/ruff check src tests bench

bench: $(STAMP)
	$(BIN)/python bench/plan_latency.py

clean:
	rm -rf $(VENV) build .pytest_cache
