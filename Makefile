# kvscope: `make test` runs the whole CPU test suite; `make bench` runs the CPU benchmark set
# (under 15 minutes on 2 cores) and rewrites benchmarks/RESULTS.md.
PYTHON ?= .venv/bin/python

.PHONY: bench test

bench:
	$(PYTHON) -m benchmarks.run_all

test:
	./scripts/test.sh
