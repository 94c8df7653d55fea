# Two commands do all the set-up on a fresh machine with Python 3 and make:
#   make run    train SGH on the bundled MNIST, evaluate, print the results table
#   make test   run the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-slow lint bench clean

# numpy asks the kernel for huge pages for every array of 4 MB or more. Where a fresh huge page
# is slow to fault in (virtual machines that hand freed memory back to their host), a run's
# evaluation, which allocates and frees many such arrays, spent a quarter of its time in the
# kernel (docs/performance.md#large-arrays-and-huge-pages). Set it to 1 to keep numpy's default.
export NUMPY_MADVISE_HUGEPAGE ?= 0

# constraints.txt pins the tested dependency set (docs/development.md); pyproject.toml's lower
# bounds are what a user's `pip install .` resolves against.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/sgh-train $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(ARGS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check sgh tests scripts examples

bench: $(STAMP)
	$(BIN)/python scripts/bench_train.py $(ARGS)

clean:
	rm -rf $(VENV) runs multirun .pytest_cache
