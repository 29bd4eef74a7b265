import { setTimeout as sleep } from 'node:timers/promises';
import type { SampleProcess } from '../utils/sample-process.js';

/** What the bench app says of its pool (since its last reading) and its requests. */
export interface PoolReading {
  readonly maxHeld: number;
  readonly held: number;
  readonly size: number;
  /** Connection-milliseconds held since the app started. */
  readonly heldMs: number;
  readonly inFlight: number;
}

/** Asks the bench app (`POST /bench/pool`) what it holds and handles. */
export async function readPool(app: SampleProcess): Promise<PoolReading> {
  const response = await fetch(`${app.url}/bench/pool`, { method: 'POST' });
  if (!response.ok) {
    throw new Error(`POST /bench/pool answered ${response.status}`);
  }
  return (await response.json()) as PoolReading;
}

/**
 * Waits until the app handles no request and holds no connection: when a
 * load run ends, the handlers of the requests in flight (the gateway's
 * especially) still run, and would count in what is measured next.
 */
export async function quiesce(app: SampleProcess): Promise<void> {
  for (let waited = 0; ; waited += 10) {
    const { held, inFlight } = await readPool(app);
    if (held === 0 && inFlight === 0) {
      return;
    }
    if (waited > 60_000) {
      throw new Error(
        `The app still handles ${inFlight} requests and holds ${held} connections after 60 s.`,
      );
    }
    await sleep(10);
  }
}
