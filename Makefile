# Two commands do all set-up: `make demo` (the main job) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test tour clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# The main job: train both apps on built-in data, write outputs/demo/index.html (FRESH=1 starts over).
demo: $(STAMP)
	$(PY) scripts/demo.py $(if $(FRESH),--fresh)

test: $(STAMP)
	$(PY) -m pytest -q

tour: $(STAMP)
	$(PY) -m shared.tour

clean:
	rm -rf outputs .pytest_cache
