#!/usr/bin/env bash
# The second command of the README: set everything up (packages, npm, guest image), check the
# types and lint the tree (scripts/lint.sh), then run the tests in two tiers:
#   1. the unit tier (test/unit/*.test.ts): no root, no sandbox, under a minute; it runs first
#      so that a broken state machine or layering (layering.test.ts) is reported before any
#      sandbox boots;
#   2. the real-sandbox tier (test/*.test.ts): root, real runc/QEMU/Xvfb/sshd/nftables, one
#      file at a time because each starts an orchestrator that owns the host's sandboxes.
# With arguments, runs just those test files (after the same checks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
npm run --silent typecheck
bash scripts/lint.sh
# A test that hangs fails after 20 minutes instead of holding the run, and a file whose tests
# are over exits even if something it started still holds its event loop (a loop a failed
# test never stopped kept a whole CI run waiting until its time was up).
run_tests() { node --import tsx --test --test-concurrency=1 --test-timeout=1200000 --test-force-exit --test-reporter=spec "$@"; }
if [ $# -gt 0 ]; then
  run_tests "$@"
  exit
fi
run_tests test/unit/*.test.ts
run_tests test/*.test.ts
