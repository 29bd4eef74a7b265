import type { ArmedFault } from '../utils/armed-faults.js';
import { until } from '../utils/barrier.js';
import type { CellClient } from './client.js';
import type { Control } from './control.js';
import { label, read, type Reply } from './replies.js';

/**
 * A renewal's connection is lost while the handler waits after its charge
 * (holding no connection): once the fault took place, a later renewal
 * moves the lease's end past the one it had, and a duplicate is refused
 * meanwhile (409). The answers of the request.
 */
export async function renewalLost(
  client: CellClient,
  options: {
    readonly control: Control;
    readonly leaseMs: number;
    /** Arms the fault at the renewal of the client's key. */
    readonly arm: () => ArmedFault<unknown>;
    /** When the lease of the client's key ends (ms; 0 if not claimed). */
    readonly leaseEnds: () => Promise<number>;
    /** Resolves once the store's client can reach it (a cell before may have cut it). */
    readonly ready?: () => Promise<void>;
  },
): Promise<Reply[]> {
  const { key } = client;
  await options.ready?.();
  const held = options.control.holdAfterCharge(key);
  const fault = options.arm();
  try {
    const first = client.send();
    // An answer before the hold is a failure to report, not to wait on.
    const reached = await Promise.race([
      held.reached().then(() => true),
      first.then(
        () => false,
        () => false,
      ),
    ]);
    if (!reached) {
      throw new Error(`${key} answered ${label(await read(first))} first`);
    }
    // Renewals come every third of the lease. The waits are longer than
    // that, for a machine that pauses: what the cell shows is that a
    // renewal comes after the lost one (the store fences a renewal by its
    // owner, not by its lease), not how soon on a busy machine.
    const waitMs = 4 * options.leaseMs;
    await until(
      () => Promise.resolve(fault.hit),
      `a renewal of ${key}`,
      waitMs,
    );
    await fault.injected;
    const lost = await options.leaseEnds();
    await until(
      async () => (await options.leaseEnds()) > lost,
      `a renewal of ${key} after the lost one (its lease then ended at ${lost})`,
      waitMs,
    );
    const duplicate = await read(client.send());
    expect(label(duplicate)).toBe('409');
    held.open();
    return await client.settle(first);
  } finally {
    held.open();
    fault.disarm();
  }
}
