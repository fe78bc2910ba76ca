# kvscope: `make test` runs the whole CPU test suite; `make bench` runs the CPU benchmark set
# (under 15 minutes on 2 cores) and rewrites benchmarks/RESULTS.md; `make llama-server` builds
# llama.cpp's server into ~/.cache/kvscope (or reuses the build there); setup.sh does it too.
PYTHON ?= .venv/bin/python

.PHONY: bench bench-peers bench-vllm llama-server test

bench:
	$(PYTHON) -m benchmarks.run_all

llama-server:
	PIP=.venv/bin/pip ./scripts/build_llama_server.sh

# Not in `bench`: installs AIPerf and GuideLLM in venvs of their own (.venv-peers/, a few GB)
# and runs every client at 64 and 256 streams; its table joins benchmarks/RESULTS.md.
bench-peers:
	bash scripts/install_peers.sh
	$(PYTHON) -m benchmarks.peer_clients --out benchmarks/peer_clients.md

# Not in `bench`: vLLM's CPU build starts in minutes, from a venv of its own (.venv-vllm);
# decode tokens/s on vLLM, llama.cpp and kvscope in one run; its table joins benchmarks/RESULTS.md.
bench-vllm: llama-server
	bash scripts/setup_vllm.sh >/dev/null
	$(PYTHON) -m benchmarks.decode_vs_vllm --out benchmarks/decode_vs_vllm.md

test:
	./scripts/test.sh
