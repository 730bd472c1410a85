#!/bin/sh
# What the tests run besides Python, installed from Debian when missing: redis-server
# (with redis-cli) and prometheus, which the tests start on loopback ports of their own,
# and a C++ compiler for llama-cpp-python (the local-model test). Nothing is started here.
set -eu
missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
command -v c++ >/dev/null 2>&1 || missing="$missing g++"
[ -z "$missing" ] && exit 0
as_root=""
[ "$(id -u)" -eq 0 ] || as_root="sudo"
echo "installing:$missing" >&2
$as_root apt-get update -qq
DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq --no-install-recommends $missing >/dev/null
