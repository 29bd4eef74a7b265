import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/** Lint rules of the project (`npm run lint`). */
export default tseslint.config(
  {
    ignores: [
      'dist/**',
      'dist-bench/**',
      'dist-sample/**',
      'node_modules/**',
      'coverage/**',
      // The Prisma client of the adapters' tests, as `prisma generate` makes it.
      '**/adapters/prisma/generated/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    // Type-aware rules: a promise nobody awaits loses its error and its
    // ordering, which in this library means a write outside its transaction.
    languageOptions: {
      parserOptions: {
        // The test build's program covers src (its specs too), migrations
        // and test; the sample app's covers the sample.
        project: ['./tsconfig.json', '../sample-app/tsconfig.json'],
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_' },
      ],
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
    },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        globalThis: 'readonly',
        Buffer: 'readonly',
        URL: 'readonly',
        fetch: 'readonly',
      },
    },
  },
);
