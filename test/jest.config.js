/** Jest runs the TypeScript sources as ES modules (ts-jest, `useESM`). */
export default {
  rootDir: '..',
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: {
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
  transform: {
    '^.+\\.ts$': [
      'ts-jest',
      { useESM: true, tsconfig: '<rootDir>/test/tsconfig.json' },
    ],
  },
  testMatch: ['<rootDir>/test/**/*.e2e-spec.ts', '<rootDir>/src/**/*.spec.ts'],
  // The default reporter says nothing of a file whose tests all skipped.
  reporters: ['default', '<rootDir>/test/setup/skip-reasons.reporter.js'],
  globalSetup: '<rootDir>/test/setup/global-setup.js',
  globalTeardown: '<rootDir>/test/setup/global-teardown.js',
  testTimeout: 60_000,
  maxWorkers: 2,
};
