// ESLint (flat config): typescript-eslint's recommended rules for every TypeScript file, plus the type-aware rules that
// guard this code base's async discipline (a promise neither awaited nor voided, a promise where a callback's result is
// expected). Formatting is oxfmt's (prettier's style; eslint-config-prettier turns off the rules that would fight it).
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'node_modules/',
      'dist/',
      'coverage/',
      '.build-*/',
      '.test-build/',
      '.scratch*',
      'dashboard/vendor/',
      'bench/results/',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      // A leading underscore marks a binding kept on purpose (a key dropped from a rest copy, a for-await drain, a
      // parameter an interface's signature needs): the convention tsc's noUnusedLocals already honours.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_' },
      ],
    },
  },
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // node:test's test()/describe()/it()/suite() return a promise the runner already tracks (a failure fails the
      // file); awaiting each one at top level would only serialize registration.
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          allowForKnownSafeCalls: [
            { from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite'] },
          ],
        },
      ],
      // Also an async function where a void callback is expected (an emitter listener, a timer): its rejection would
      // be nobody's.
      '@typescript-eslint/no-misused-promises': 'error',
    },
  },
  {
    // The engine client's synchronous steps (dp-routing.md 12.3): a state change that belongs together (select +
    // reserve, store load + release + clamp, a liveness transition) is one function that takes no callback and returns
    // no promise, so no other request can run in the middle of it. These files hold only such functions.
    files: ['src/engine-client/group-state.ts', 'src/engine-client/placement.ts', 'src/engine-client/apply-batch.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        { selector: ':function[async=true]', message: 'A synchronous step cannot be async (dp-routing.md 12.3).' },
        { selector: 'AwaitExpression', message: 'A synchronous step cannot await (dp-routing.md 12.3).' },
        {
          selector: "CallExpression[callee.property.name='then']",
          message: 'A synchronous step cannot chain on a promise; send through the failure scope instead.',
        },
        {
          selector: "NewExpression[callee.name='Promise'], TSTypeReference[typeName.name=/^(Promise|PromiseLike)$/]",
          message: 'A synchronous step returns no promise (dp-routing.md 12.3).',
        },
        {
          selector: ':function > Identifier.params > TSTypeAnnotation > TSFunctionType',
          message: 'A synchronous step takes no callback: pass the group state, not a function into it.',
        },
      ],
    },
  },
  {
    // The CLI shim, the test runner and its reporter run on Node.
    files: ['**/*.mjs'],
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        performance: 'readonly',
        URL: 'readonly',
        setTimeout: 'readonly',
      },
    },
  },
  {
    // The dashboard's script runs in the browser.
    files: ['dashboard/**/*.js'],
    languageOptions: {
      globals: {
        AbortSignal: 'readonly',
        Node: 'readonly',
        URL: 'readonly',
        document: 'readonly',
        fetch: 'readonly',
        performance: 'readonly',
        sessionStorage: 'readonly',
        setTimeout: 'readonly',
        // uPlot's browser build (/dashboard/vendor/uPlot.iife.min.js) defines it before the page's modules run.
        uPlot: 'readonly',
      },
    },
  },
  prettier,
);
