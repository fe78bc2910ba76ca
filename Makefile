# kvscope: `make test` runs the whole CPU test suite; `make bench` runs the CPU benchmark set
# (under 15 minutes on 2 cores) and rewrites benchmarks/RESULTS.md; `make llama-server` builds
# llama.cpp's server into ~/.cache/kvscope (or reuses the build there); setup.sh does it too.
PYTHON ?= .venv/bin/python

.PHONY: bench llama-server test

bench:
	$(PYTHON) -m benchmarks.run_all

llama-server:
	PIP=.venv/bin/pip ./scripts/build_llama_server.sh

test:
	./scripts/test.sh
