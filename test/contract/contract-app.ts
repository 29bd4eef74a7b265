import {
  startTestApp,
  type Platform,
  type TestApp,
} from '../utils/test-app.js';
import { ContractTestModule, Runs } from './contract.module.js';

/** The contract test application of a describe block, and its run counters. */
export interface ContractApp {
  readonly target: TestApp;
  readonly runs: Runs;
}

/**
 * Starts the contract application on `platform` before the block's tests and
 * closes it after them; `ready` receives it once it listens.
 */
export function useContractApp(
  platform: Platform,
  ready: (app: ContractApp) => void,
): void {
  let target: TestApp | undefined;
  beforeAll(async () => {
    target = await startTestApp({ platform, imports: [ContractTestModule] });
    ready({ target, runs: target.app.get(Runs) });
  });
  afterAll(() => target?.close());
}
