# Two commands: `make demo` and `make test`. Both create .venv and install everything first.
VENV   := .venv
PY     := $(VENV)/bin/python
QD     := $(VENV)/bin/quickdraft
STAMP  := $(VENV)/.installed

.PHONY: setup models clients vsix llama-server demo lint test test-fast clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The pinned CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# --no-calibrate: the tests expect the CPU default as shipped, not this machine's measured choice.
models: setup
	$(QD) models pull default --no-calibrate

clients: setup
	bash editor-clients/setup.sh

# The VS Code extension alone (clients also builds the test editors): needs Node.js 20 and npm.
vsix:
	cd editor-clients/vscode && npm ci --no-progress --loglevel=error && npm run --silent package

# llama.cpp's llama-server for the remote-backend tests: built once per machine, then cached.
llama-server: setup
	bash tests/support/build_llama_server.sh

# The demo runs what an editor gets here, so it pulls only those models (the 0.5B alone on a
# CPU); `models` pulls the pair, which the tests need.
demo: setup
	$(QD) models pull
	$(QD) demo

# The linter (ruff, configured in pyproject.toml) runs first: a lint error fails the tests.
lint: setup
	$(VENV)/bin/ruff check .

test: lint models clients llama-server
	$(PY) -m pytest -q -p no:cacheprovider

test-fast: lint llama-server
	$(PY) -m pytest -q -m "not real_model and not editor"

clean:
	rm -rf $(VENV) build *.egg-info
