import type { INestApplication } from '@nestjs/common';
import type { FaultInjector } from '../utils/armed-faults.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import { PLATFORMS, type Platform } from '../utils/test-app.js';
import {
  cellClient,
  expectNoServerError,
  expectOneCharge,
  LEFT_LEASE_MS,
  LIVE_LEASE_MS,
  type CellClient,
} from './client.js';
import { Control } from './control.js';
import { renewalLost } from './renewal-lost.js';
import { AMOUNT, label, read } from './replies.js';
import type { ChargeResponse } from './store-matrix.module.js';

/** A command (or request) of a store that an attempt sends or relies on. */
export type StorePoint =
  | 'claim'
  | 'step read'
  | 'step save'
  | 'completion'
  | 'release'
  | 'stored error'
  | 'renewal';

/** Whether the connection is lost before the command, or after it ran. */
export type Timing = 'before' | 'after';

/** A key's record, as the store holds it. */
export type StoreRecord =
  | {
      readonly state: 'in_progress';
      /** When its lease ends (ms, the store's clock; 0 once released). */
      readonly leaseEnds: number;
      /** Whether its lease has not ended. */
      readonly live: boolean;
    }
  | {
      readonly state: 'completed' | 'failed' | 'not_replayable';
      readonly responseStatus: number;
    };

/**
 * The application of one store (one client configuration) on one
 * platform, with what the matrix needs of the store: faults at its calls
 * (`Call`: a command, a request), and reads of what it holds.
 */
export interface StoreTarget<Call> {
  readonly app: INestApplication;
  readonly url: string;
  /** Loses the store's connection at a call. */
  readonly faults: FaultInjector<Call, Timing>;
  /** The store's call of `point` for `key`. */
  callOf(point: StorePoint, key: string): (call: Call) => boolean;
  /** Resolves once the store's client can reach it again (at once unless given). */
  ready?(): Promise<void>;
  record(key: string): Promise<StoreRecord | undefined>;
  /** The steps of `key` the store holds, by name. */
  steps(key: string): Promise<readonly string[]>;
  /** What the store holds for `key`, as a refused request must leave it. */
  snapshot(key: string): Promise<unknown>;
  close(): Promise<void>;
}

/** A point of the matrix, and what its client gets. */
export interface StoreCell {
  readonly point: StorePoint;
  readonly when: Timing;
  /** The answers the client gets, in order (its retries past 503 and 409). */
  readonly expected: readonly string[];
  /** Calls the gateway gets for the request's derived key (1 unless told). */
  readonly gatewayCalls?: number;
  /**
   * The answers of the next request when the client's answer was never
   * stored (it runs the handler again, and stores it); the one after
   * replays.
   */
  readonly again?: readonly string[];
  /**
   * The answers after which a `charge` step of the key was stored while
   * the request had not completed: after each, another body gets 422.
   */
  readonly probed?: readonly string[];
  /**
   * Whether the fault leaves the claim to its lease (see `ClientCell`):
   * the cell runs against short leases. Otherwise against long ones, and
   * the retry after a failed answer runs or replays at once, never a 409.
   */
  readonly claimLeft?: boolean;
  /** Whether the fault fails the claim's release (see `ClientCell`). */
  readonly releasedLate?: boolean;
}

const POINTS: readonly StorePoint[] = [
  'claim',
  'step read',
  'step save',
  'completion',
  'release',
  'stored error',
  'renewal',
];

/** Every point at both timings, with what `of` says of each. */
export function storeCells(
  of: (point: StorePoint, when: Timing) => Omit<StoreCell, 'point' | 'when'>,
): StoreCell[] {
  return POINTS.flatMap((point) =>
    (['before', 'after'] as const).map((when) => ({
      point,
      when,
      ...of(point, when),
    })),
  );
}

/**
 * The cells of a client that sends a command again once its connection is
 * back (its defaults): each request gets its answer at once, but for the
 * handler's own failure at the release (a 503, retried), and for what the
 * store makes of a completion sent again after its answer was lost
 * (`resentCompletion`: the answers then).
 */
export function resendingCells(options: {
  readonly resentCompletion: readonly string[];
}): StoreCell[] {
  return storeCells((point, when) => {
    switch (point) {
      case 'completion':
        return {
          expected: when === 'before' ? ['201'] : options.resentCompletion,
        };
      // The handler fails after its charge: released, bound to its request.
      case 'release':
        return { expected: ['503 handler', '201'], probed: ['503 handler'] };
      case 'stored error':
        return { expected: ['402'] };
      default:
        return { expected: ['201'] };
    }
  });
}

/**
 * The cells of a client that fails fast: a command whose connection was
 * lost fails, whether it ran or not. `releasedLate`: whether the release
 * that follows a failed command fails too (the client not back yet): the
 * instance tries it again until it lands, which frees the key once the
 * client is back, long before the claim's lease would (see
 * `ClientCell.releasedLate`).
 */
export function failingFastCells(options: {
  readonly releasedLate: boolean;
}): StoreCell[] {
  const { releasedLate } = options;
  return storeCells((point, when) => {
    switch (point) {
      case 'claim':
        // After: written, its answer lost: released by its owner (tried
        // again until the client is back).
        return when === 'before'
          ? { expected: ['503', '201'] }
          : { expected: ['503', '201'], releasedLate };
      case 'step read':
        return { expected: ['503', '201'], releasedLate };
      case 'step save':
        // Before: the charge was made, its step never saved: the retry
        // charges again under the derived key (the gateway's answer is
        // the same charge).
        return when === 'before'
          ? { expected: ['503', '201'], gatewayCalls: 2, releasedLate }
          : { expected: ['503', '201'], probed: ['503'], releasedLate };
      case 'completion':
        return when === 'before'
          ? { expected: ['503', '201'], probed: ['503'], releasedLate }
          : { expected: ['503', '201 replayed'] };
      case 'release':
        // Before: the release is tried again until it lands.
        return when === 'before'
          ? {
              expected: ['503 handler', '201'],
              probed: ['503 handler'],
              releasedLate: true,
            }
          : { expected: ['503 handler', '201'], probed: ['503 handler'] };
      case 'stored error':
        // Before: the 402 reaches the client unstored: the next request
        // runs again (once the claim's release landed).
        return when === 'before'
          ? { expected: ['402'], again: ['402'], releasedLate }
          : { expected: ['402'] };
      case 'renewal':
        // A later renewal keeps the lease.
        return { expected: ['201'] };
    }
  });
}

/** A store under one client configuration, and its cells. */
export interface StoreMatrix<Call> {
  /** `Redis 7, ioredis's defaults`: how the suite is named. */
  readonly name: string;
  /**
   * Starts the application on `platform`, charging the gateway at
   * `gatewayUrl`, its claims leased for `leaseMs`.
   */
  start(
    platform: Platform,
    gatewayUrl: string,
    leaseMs: number,
  ): Promise<StoreTarget<Call>>;
  readonly cells: readonly StoreCell[];
}

/**
 * The lease of the renewal cells. They check a duplicate against a lease
 * a renewal just moved: a pause of the machine longer than the lease
 * between the two (renewals come every third of it) would end it and let
 * the duplicate take over, which is another cell's fault, not this one's.
 */
const RENEWAL_LEASE_MS = 3_000;

/**
 * Issue 28 on the stores that complete right after the handler (no
 * transaction): their connection is lost before and after each command
 * an attempt sends (claim, step read and save, completion, release,
 * stored error, renewal), and the client retries. The handler's only
 * effect is the gateway's charge, in a step, and its answer (I1 holds
 * for such handlers only, README "Stores"). After every failed answer
 * whose key has a stored `charge` step: another body under the key gets
 * 422 problem+json, runs nothing, calls nothing, changes nothing. After
 * each cell: the answers the cell expects (never a 500; a 409 only until
 * the lease runs out, which frees the key), every 2xx for the key the
 * same bytes, naming the key's one charge, for its amount; the record
 * completed, no step left behind. Issue 39 (I4): wherever the fault
 * leaves no claim behind (`claimLeft`), the retry after a failed answer
 * runs or replays at once, never a 409, against claims leased for
 * {@link LIVE_LEASE_MS}.
 */
export function describeStoreMatrix<Call>(matrix: StoreMatrix<Call>): void {
  describe.each(PLATFORMS)(
    `the fault matrix on ${matrix.name} (%s)`,
    (platform) => {
      const renewal = (cell: StoreCell) => cell.point === 'renewal';
      describeCells(
        matrix,
        platform,
        matrix.cells.filter((cell) => !renewal(cell) && !cell.claimLeft),
        LIVE_LEASE_MS,
      );
      const left = matrix.cells.filter(
        (cell) => !renewal(cell) && cell.claimLeft,
      );
      if (left.length > 0) {
        describe(`claims left behind, leased for ${LEFT_LEASE_MS} ms`, () => {
          describeCells(matrix, platform, left, LEFT_LEASE_MS);
        });
      }
      describe(`claims leased for ${RENEWAL_LEASE_MS} ms`, () => {
        describeCells(
          matrix,
          platform,
          matrix.cells.filter(renewal),
          RENEWAL_LEASE_MS,
        );
      });
    },
  );
}

/** `cells` on `platform`, against an application whose claims are leased for `leaseMs`. */
function describeCells<Call>(
  matrix: StoreMatrix<Call>,
  platform: Platform,
  cells: readonly StoreCell[],
  leaseMs: number,
): void {
  let gateway: FakeGateway;
  let target: StoreTarget<Call>;
  let control: Control;

  beforeAll(async () => {
    gateway = await new FakeGateway().start();
    target = await matrix.start(platform, gateway.url, leaseMs);
    control = target.app.get(Control);
  });
  afterAll(async () => {
    await target?.close();
    await gateway?.stop();
  });

  const ready = async () => {
    await target.ready?.();
  };
  /** Loses the connection at the store's call of `point` for `key`. */
  const arm = (point: StorePoint, timing: Timing, key: string) =>
    target.faults.arm({ matches: target.callOf(point, key), timing });

  const clientOf = (cell: StoreCell) =>
    cellClient(
      {
        platform,
        url: target.url,
        control,
        gateway,
        leaseMs,
        // The store's client is back before anything else is sent.
        checkAnswer: ready,
        charged: async (key) => (await target.steps(key)).includes('charge'),
        held: (key) => target.snapshot(key),
        async claimEnds(key) {
          const record = await target.record(key);
          return record?.state === 'in_progress' && record.live
            ? record.leaseEnds
            : 0;
        },
      },
      cell,
      cell.point === 'stored error',
    );

  /** The connection is lost at the command of the cell's point. */
  const commandRun = async (cell: StoreCell, client: CellClient) => {
    if (cell.point === 'release') {
      // The handler fails after its charge: its claim is released.
      control.failOnce(client.key);
    }
    const fault = arm(cell.point, cell.when, client.key);
    try {
      const replies = await client.settle(client.send());
      expect(fault.hit).toBe(true);
      await fault.injected;
      return replies;
    } finally {
      fault.disarm();
    }
  };

  /**
   * A renewal's connection is lost while the handler waits (after its
   * charge): a later renewal keeps the lease (`renewalLost`).
   */
  const renewalRun = (cell: StoreCell, client: CellClient) =>
    renewalLost(client, {
      control,
      leaseMs,
      arm: () => arm('renewal', cell.when, client.key),
      ready,
      async leaseEnds() {
        await ready();
        const record = await target.record(client.key);
        return record?.state === 'in_progress' ? record.leaseEnds : 0;
      },
    });

  it.each(cells)('$point / $when', async (cell) => {
    const client = clientOf(cell);
    const charges = gateway.chargeCount;
    const replies =
      cell.point === 'renewal'
        ? await renewalRun(cell, client)
        : await commandRun(cell, client);

    // No 500, and the client got what the cell expects.
    expectNoServerError(replies);
    expect(replies.map(label)).toEqual(cell.expected);
    const final = replies[replies.length - 1];
    const answers = [...replies];
    if (cell.again) {
      // The answer was never stored: the next request runs again.
      const runs = control.runs.get(client.key) ?? 0;
      await client.released();
      const again = await client.settle(client.send());
      expect(again.map(label)).toEqual(cell.again);
      expect(again[again.length - 1]).toEqual({
        ...final,
        replayed: false,
      });
      expect(control.runs.get(client.key)).toBe(runs + 1);
      answers.push(...again);
    }
    const replay = await read(client.send());
    expect(replay).toEqual({ ...final, replayed: true });
    answers.push(replay);
    // The binding was probed after each failed answer with a charge.
    expect(client.probed).toEqual(cell.probed ?? []);

    expect(await target.steps(client.key)).toEqual([]);
    if (client.limited) {
      // The 402 is the record; nothing was charged.
      expect(await target.record(client.key)).toEqual({
        state: 'failed',
        responseStatus: 402,
      });
      expect(gateway.chargeCount).toBe(charges);
      return;
    }
    expect(await target.record(client.key)).toEqual({
      state: 'completed',
      responseStatus: 201,
    });
    // Every 2xx for the key: the same bytes, naming the one charge.
    const successes = answers.filter((r) => r.status >= 200 && r.status < 300);
    expect(new Set(successes.map((r) => r.text)).size).toBe(1);
    const body = JSON.parse(final.text) as ChargeResponse;
    expect(body).toMatchObject({ reference: client.key, amount: AMOUNT });
    await expectOneCharge(
      gateway,
      control,
      client.key,
      charges,
      cell.gatewayCalls ?? 1,
      body.chargeId,
    );
  });
}
