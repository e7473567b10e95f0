/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': ['@swc/jest', { jsc: { parser: { syntax: 'typescript' }, target: 'es2022' } }] },
  // The client packages import the tunnel contract (and each other) by package name.
  moduleNameMapper: {
    '^@home-hub-cloud/tunnel-contract$': '<rootDir>/src/tunnel/contract/events.ts',
    '^@home-hub-cloud/hub-client$': '<rootDir>/clients/hub/src/index.ts',
    '^@home-hub-cloud/app-client$': '<rootDir>/clients/app/src/index.ts',
  },
  testTimeout: 30000,
  // A leaked handle in one test must never hold CI until its deadline.
  forceExit: true,
};
