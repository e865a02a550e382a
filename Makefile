# The two commands: `make run` and `make test`. Both set up .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The CPU build of PyTorch (operator references run on the CPU); installed before the project.
TORCH_VERSION ?= 2.13.0
# Elsewhere, TORCH_PIP_ARGS='--index-url https://download.pytorch.org/whl/cpu' picks the CPU wheel.
TORCH_PIP_ARGS ?=

.PHONY: run test lint typecheck pytest test-fast install upgrade-deps browser clean load

run:
	@export KOPE_STARTED_AT=$$(date +%s.%N); \
	$(MAKE) --no-print-directory install && $(PY) manage.py runstack

test: install browser lint typecheck pytest

install: $(STAMP)

# constraints.txt pins every dependency at the versions the suite last passed with, so a
# release upstream cannot change a fresh install; `make upgrade-deps` moves the pins on.
$(STAMP): pyproject.toml constraints.txt
	@date -u '+[%T] install'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==$(TORCH_VERSION) $(TORCH_PIP_ARGS)
	$(PY) -m pip install --quiet -e '.[dev]' -c constraints.txt
	@touch $(STAMP)

# The newest releases pyproject.toml allows, written back to constraints.txt (PyTorch stays
# at TORCH_VERSION). Run `make test` after it before committing the new pins.
upgrade-deps: install
	@# Held at TORCH_VERSION: the eager upgrade would otherwise bring the newest, CUDA, build.
	echo "torch==$(TORCH_VERSION)" > $(VENV)/torch-pin.txt
	$(PY) -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[dev]' \
	  -c $(VENV)/torch-pin.txt
	$(PY) -m pip freeze --exclude-editable | grep -v '^torch==' > constraints.txt
	@touch $(STAMP)

# Debian's Chromium for the Playwright tests (never `playwright install`: it downloads),
# valgrind for the evaluator's profiles, and poppler-utils (pdftoppm, pdftotext) for the PDF
# report tests.
browser:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v valgrind >/dev/null 2>&1 || missing="$$missing valgrind"; \
	command -v pdftoppm >/dev/null 2>&1 || missing="$$missing poppler-utils"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && apt-get install -y -qq $$missing) >/dev/null; \
	  else echo "missing and not root:$$missing (their tests will be skipped)"; fi; fi

lint:
	@date -u '+[%T] lint'
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache  # the layers of apps/: docs/architecture.md

typecheck:
	@date -u '+[%T] typecheck'
	$(VENV)/bin/mypy apps kope_web loadtest

# Two test processes by default (pytest-xdist): most long tests wait on the processes they
# start, so two share two cores well. Each has its own embedded server and broker folder.
PYTEST_WORKERS ?= 2

pytest:
	@date -u '+[%T] pytest'
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# The edit-test loop: the tests that need no database and start no process (tests/fast_run.py),
# under two minutes here. `make test` runs them all.
test-fast: install
	$(PY) -m pytest --fast -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# A team's load on a throwaway stack under /tmp (loopback only): the base profile, then double.
load: install
	$(PY) -m loadtest.run --profiles base,double $(LOAD_ARGS)

clean:
	rm -rf var/test var/broker
