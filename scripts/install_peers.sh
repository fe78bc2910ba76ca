#!/usr/bin/env bash
# Venvs of their own for the peer load generators `benchmarks/peer_clients.py` compares
# kvscope with: AIPerf and GuideLLM, each pinned, from PyPI (`make bench-peers` runs this).
# Idempotent: a venv whose tool already runs is left as it is. A tool that cannot be
# installed here is reported and skipped; the benchmark then leaves its row out.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="${KVSCOPE_PEERS:-.venv-peers}"
mkdir -p "$ROOT"

install() {  # NAME CHECK PACKAGES...
  local name=$1 check=$2; shift 2
  local venv="$ROOT/$name"
  if [ -x "$venv/bin/$check" ] && "$venv/bin/$check" --help >/dev/null 2>&1; then
    echo "[peers] $name: already installed"; return 0
  fi
  echo "[peers] $name: installing $*"
  python3 -m venv "$venv" && "$venv/bin/pip" install -q --upgrade pip \
    && for pkg in "$@"; do "$venv/bin/pip" install -q $pkg || return 1; done \
    && "$venv/bin/$check" --help >/dev/null 2>&1 \
    || { echo "[peers] $name: could not be installed here; its row is left out"; return 1; }
}

install aiperf aiperf "aiperf==0.13.0"
# torch first and pinned: GuideLLM depends on torch, and an unpinned resolve pulls the
# multi-GB CUDA build; 2.13.0 resolves to the CPU wheel, as in the main venv.
install guidellm guidellm "torch==2.13.0" "guidellm==0.8.1"
exit 0
