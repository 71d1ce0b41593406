# Two commands do all set-up: `make demo` (the main job) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
APP_STAMP := $(VENV)/.installed-app
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo test tour clean

# The apps alone: what the demo needs (the test extras add pytest, the WordNet text and piper).
$(APP_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	@touch $(APP_STAMP)

$(DEV_STAMP): $(APP_STAMP)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(DEV_STAMP)

# The main job: train both apps on built-in data, write outputs/demo/index.html (FRESH=1 starts over).
demo: $(APP_STAMP)
	$(PY) scripts/demo.py $(if $(FRESH),--fresh)

# The suite on every core (pytest-xdist): a test file runs in one worker, so its module fixtures are made once.
test: $(DEV_STAMP)
	$(PY) -m pytest -q -n auto --dist loadfile

tour: $(APP_STAMP)
	$(PY) -m shared.tour

clean:
	rm -rf outputs .pytest_cache
