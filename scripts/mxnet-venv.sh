#!/usr/bin/env bash
# The MXNet environment (.venvs/mxnet); see framework-venv.sh. Usage: scripts/mxnet-venv.sh [python]
exec bash "$(dirname "${BASH_SOURCE[0]}")/framework-venv.sh" mxnet "$@"
