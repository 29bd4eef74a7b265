import { jest } from '@jest/globals';
import { setTimeout as sleep } from 'node:timers/promises';
import { IdempotencyUnavailableException } from '../exceptions/idempotency-unavailable.exception.js';
import type { IdempotencyStore } from '../interfaces/idempotency-store.interface.js';
import type { Attempt } from './attempt.js';
import type { AttemptTelemetry } from './attempt-telemetry.js';
import { Execution, type ExecutionHost } from './execution.js';
import type { ResolvedRouteOptions } from './executor.options.js';
import { handlerContexts } from './handler-context.js';
import { LogKeys } from './log-key.js';
import { NO_HANDLER_TRANSACTIONS } from './no-transaction.js';

const TIMEOUT_MS = 150;

/** An execution of a claimed key, on a store and host that record what it does. */
function execution() {
  const released: string[] = [];
  const completed: string[] = [];
  const store = {
    complete: jest.fn(() => {
      completed.push('k');
      return Promise.resolve({ fenced: true, waiting: false });
    }),
    release: jest.fn(() => {
      released.push('k');
      return Promise.resolve({ fenced: true, waiting: false });
    }),
  } as unknown as IdempotencyStore;
  const telemetry = {
    handler: <T>(_attempt: Attempt, fn: () => Promise<T>) => fn,
    committing: () => undefined,
    failed: () => undefined,
    released: () => undefined,
    event: () => undefined,
  } as unknown as AttemptTelemetry;
  let holding = true;
  const host: ExecutionHost = {
    store,
    transactions: NO_HANDLER_TRANSACTIONS,
    telemetry,
    emit: () => undefined,
    holds: () => holding,
    forget: () => {
      holding = false;
    },
    ended: () => {
      holding = false;
    },
    retryRelease: () => undefined,
    logKeys: new LogKeys({ telemetry: false }),
    warn: () => undefined,
  };
  const attempt: Attempt = {
    started: Date.now(),
    scope: 's',
    key: 'k',
    method: 'POST',
    path: '/x',
    fingerprint: 'f',
  };
  const options = {
    transactionTimeoutMs: TIMEOUT_MS,
    retryAfter: 1,
    ttlMs: 60_000,
    maxResponseSize: 1_000,
  } as ResolvedRouteOptions;
  const lease = { scope: 's', key: 'k', owner: 'o', fingerprint: 'f' };
  return {
    execution: new Execution(host, attempt, options, lease),
    released,
    completed,
  };
}

const response = { status: 201, headers: {}, body: Buffer.from('{}') };

describe('Execution', () => {
  afterEach(() => jest.restoreAllMocks());

  it('runs the handler with itself as its context', async () => {
    const { execution: run } = execution();
    const seen = await run.run(() => {
      const context = handlerContexts.getStore();
      return Promise.resolve([context?.scope, context?.key, context === run]);
    });
    expect(seen).toEqual(['s', 'k', true]);
  });

  it('abandons a handler still running at the deadline: 503, and the key released', async () => {
    const { execution: run, released } = execution();
    await expect(run.run(() => sleep(TIMEOUT_MS * 4))).rejects.toBeInstanceOf(
      IdempotencyUnavailableException,
    );
    expect(run.isAbandoned).toBe(true);
    expect(released).toEqual(['k']);
  });

  it('sets one timer for the handler and the wait for its response, and clears it as it completes', async () => {
    const timers = jest.spyOn(globalThis, 'setTimeout');
    const { execution: run, completed } = execution();
    await run.run(() => Promise.resolve(undefined));
    const noResponse = jest.fn();
    run.awaitResponse(noResponse);
    await run.completeWith(response);
    expect(completed).toEqual(['k']);
    expect(timers).toHaveBeenCalledTimes(1);
    await sleep(TIMEOUT_MS * 2);
    expect(noResponse).not.toHaveBeenCalled();
  });

  it('waits for the response the whole transactionTimeout after the handler, past its deadline, then gives up on it', async () => {
    const { execution: run } = execution();
    // The handler takes most of its time: its deadline comes soon after.
    await run.run(() => sleep(TIMEOUT_MS * 0.7));
    const waiting = Date.now();
    // When it gave up: never before the whole wait (a busy machine only
    // makes it later).
    const gaveUp = await new Promise<number>((resolve) =>
      run.awaitResponse(() => resolve(Date.now())),
    );
    expect(gaveUp - waiting).toBeGreaterThanOrEqual(TIMEOUT_MS - 2);
  });
});
