#!/usr/bin/env bash
# The first command of the README: set everything up, start the orchestrator on
# 127.0.0.1:8080 and create one demo sandbox. Ctrl-C stops it and destroys its sandboxes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec node dist/cli/main.js serve --demo "$@"
