#!/usr/bin/env bash
# Lint the whole tree: Prettier's layout (.prettierrc.json), then ESLint with typescript-eslint's
# type-checked rules (scripts/lint/).
# The tools are their own package (they need the TypeScript 6 compiler API; the project
# compiles with TypeScript 7), installed here on first use so that `scripts/up.sh` skips them.
set -euo pipefail
cd "$(dirname "$0")/.."
lint=scripts/lint
if [ ! -d "$lint/node_modules" ] || [ "$lint/package-lock.json" -nt "$lint/node_modules/.package-lock.json" ]; then
  echo "lint: installing ESLint (scripts/lint)" >&2
  npm --prefix "$lint" ci --no-audit --no-fund --loglevel=error
fi
echo "lint: prettier --check (npm run format lays the tree out)" >&2
"$lint/node_modules/.bin/prettier" --check --log-level warn "src/**/*.ts" "test/**/*.ts" "scripts/*.ts" "scripts/*.mjs"
echo "lint: eslint src test" >&2
"$lint/node_modules/.bin/eslint" -c "$lint/eslint.config.mjs" --max-warnings 0 src test
