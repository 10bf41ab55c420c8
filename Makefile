# Two commands for a fresh machine: `make report` and `make test`.
# Both create the virtual environment on first use and install what is missing,
# system packages included (Debian: pango for WeasyPrint, poppler-utils and chromium for report tests).

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-stamp
SYSTEM_STAMP = $(VENV)/.system-stamp

# Debian packages and the command (or library) that proves each is there.
SYSTEM_PACKAGES = libpango-1.0-0:libpango-1.0.so.0 libpangoft2-1.0-0:libpangoft2-1.0.so.0 \
                  poppler-utils:pdftoppm chromium:chromium xz-utils:xz sqlite3:sqlite3

.PHONY: report test bench setup system-deps clean

report: setup
	@mkdir -p out
	$(BIN)/nsanalyze report fixtures/dev_suite_full.ncu-rep.xz fixtures/dev_suite_nsys.sqlite.xz \
		-o out/report.html -o out/report.pdf -o out/report.md -o out/report.json
	$(BIN)/nsanalyze report fixtures/dev_suite_full.ncu-rep.xz fixtures/dev_suite_nsys.sqlite.xz

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python bench/run.py

setup: $(SYSTEM_STAMP) $(STAMP)

$(SYSTEM_STAMP):
	@bash scripts/system-deps.sh $(SYSTEM_PACKAGES)
	@mkdir -p $(VENV) && touch $@

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@

clean:
	rm -rf $(VENV) out
