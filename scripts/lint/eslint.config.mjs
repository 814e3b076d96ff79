// ESLint for the whole tree with typescript-eslint's type-checked rules, run by scripts/lint.sh
// (part of the README's test command). Its own package: see package.json beside it.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { fileURLToPath } from 'node:url';
import { dirname, resolve } from 'node:path';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

export default tseslint.config(
  {
    ignores: ['dist/**', 'node_modules/**', 'scripts/**', 'src/guest/files/**', 'src/runtimes/firecracker/api/spec-types.ts', 'src/e2b/gen/**'],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { project: ['tsconfig.check.json'], tsconfigRootDir: root } },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // A `let` assigned once, after a closure that reads it was made, cannot be a `const`.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      // Rethrowing what a catch caught keeps its type: unknown.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
      // Judged here by TypeScript 6 while the compiler is 7, and they disagree (pino's Logger as
      // fastify's, a Map lookup after has()): the compiler decides what an assertion is for.
      '@typescript-eslint/no-unnecessary-type-assertion': 'off',
      // An async method that does not await is how an interface returning a promise is met.
      '@typescript-eslint/require-await': 'off',
      // Prettier (.prettierrc.json) lays out the code at 160 columns; this holds comments to the
      // same width. Strings stay whole: a message is easier to find when it is not split.
      'max-len': ['error', { code: 160, ignoreStrings: true, ignoreTemplateLiterals: true, ignoreRegExpLiterals: true, ignoreUrls: true }],
      // No unused code: a leading underscore marks a parameter a signature requires.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', ignoreRestSiblings: true, caughtErrors: 'none' },
      ],
    },
  },
  {
    files: ['test/**/*.ts'],
    rules: {
      // node:test's test() and describe() return promises the runner awaits itself.
      '@typescript-eslint/no-floating-promises': [
        'error',
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'it', 'describe', 'suite'] }] },
      ],
      // Tests read JSON answers whose shape is what they assert.
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
  {
    // Generated (npm run gen:client-types): the schemas' descriptions are its comments.
    files: ['src/client/api-types.ts'],
    rules: { 'max-len': 'off' },
  },
);
