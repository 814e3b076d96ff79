#!/usr/bin/env bash
# The second command of the README: set everything up (packages, npm, guest image), then run
# the whole suite against real sandboxes. Needs root; tests run one file at a time because
# each starts an orchestrator that owns the host's sandboxes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
npm run --silent typecheck
if [ $# -eq 0 ]; then set -- test/*.test.ts; fi
exec node --import tsx --test --test-concurrency=1 --test-reporter=spec "$@"
