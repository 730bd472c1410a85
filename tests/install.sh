#!/bin/sh
# Everything the test suite needs, from nothing, into .venv (and the proxy alone, as
# users install it, into .venv-deploy): the Debian packages the
# tests run (redis-server with redis-cli, prometheus, a C++ compiler for llama.cpp,
# npm, Chromium for the session viewer's browser test), a pinned pip, the locked
# packages, the project itself, and the coding agents and clients the tests drive (Claude
# Code, Codex, opencode, the AI SDK and openai-node, pinned in
# tests/agents/package-lock.json; aider, in .venv-aider from
# tests/aider/requirements.lock). Nothing is started here, and
# nothing is written outside this checkout and the system temp dir.
set -eu
cd "$(dirname "$0")/.."

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
command -v c++ >/dev/null 2>&1 || missing="$missing g++"
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
if [ -n "$missing" ]; then
  as_root=""
  [ "$(id -u)" -eq 0 ] || as_root="sudo"
  echo "installing:$missing" >&2
  # Another apt (an unattended upgrade, a second checkout installing) may hold the lock:
  # wait for it rather than fail.
  apt_get() { $as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"; }
  apt_get update -qq || { sleep 30; apt_get update -qq; }
  apt_get install -y -qq --no-install-recommends $missing >/dev/null
fi

# pip's cache stays in the checkout, not in ~/.cache.
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$PWD/.cache/pip}"
# llama-cpp-python compiles llama.cpp for the local-model test. Its default build tunes
# for the build machine's CPU, and on VMs that advertise AVX-512/AMX it crashed in the
# first batched decode; this portable AVX2 build works everywhere here.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF}"

# The proxy as users install it (the README's Quick start): the deploy lock alone, in a
# venv of its own. Every proxy process the tests start runs from it, so an import that
# the deploy lock lacks fails a test here before it fails a user.
python3 -m venv .venv-deploy
.venv-deploy/bin/pip install -q --require-hashes -r deploy/requirements.lock
.venv-deploy/bin/pip install -q --no-deps -e .

python3 -m venv .venv
# An older pip (23.2 ships with Python 3.11.7) refuses some hashed locks: upgrade first.
.venv/bin/python -m pip install -q --require-hashes -r tests/pip.lock
.venv/bin/python -m pip install -q --require-hashes -r tests/requirements.lock
.venv/bin/python -m pip install -q --no-deps -e .

# aider pins its own dependencies (its own LiteLLM among them): a venv of its own.
python3 -m venv .venv-aider
.venv-aider/bin/python -m pip install -q --require-hashes -r tests/pip.lock
.venv-aider/bin/python -m pip install -q --require-hashes -r tests/aider/requirements.lock

# Each agent's npm package carries its own native binary; npm's cache stays here too.
# The versions are the lock's; `npm install --no-save` rather than `npm ci`, which refuses
# a lock without opencode's binaries for other platforms (some of which the registry
# does not serve, so no lock can hold them).
npm_config_cache="$PWD/.cache/npm" npm install --prefix tests/agents --no-save --no-audit --no-fund --loglevel=error
