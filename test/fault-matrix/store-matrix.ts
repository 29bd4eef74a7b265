import type { INestApplication } from '@nestjs/common';
import { until } from '../utils/barrier.js';
import { FakeGateway, requestCharge } from '../utils/fake-gateway.js';
import { PLATFORMS, type Platform } from '../utils/test-app.js';
import { Control } from './control.js';
import {
  AMOUNT,
  asRefusal,
  failed,
  label,
  LEASE_OVER,
  MAX_TRIES,
  OTHER_AMOUNT,
  OVER_LIMIT,
  read,
  refusal,
  type Reply,
} from './replies.js';
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

/** A fault waiting for its command. */
export interface StoreFault {
  readonly hit: boolean;
  /** Resolves once the connection was lost (rejects if it could not be). */
  readonly injected: Promise<unknown>;
  disarm(): void;
}

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
 * platform, with what the matrix needs of the store: faults at its
 * commands, and reads of what it holds.
 */
export interface StoreTarget {
  readonly app: INestApplication;
  readonly url: string;
  /** Loses the store's connection at the command of `point` for `key`. */
  arm(point: StorePoint, timing: Timing, key: string): StoreFault;
  /** Resolves once the store's client can reach it again. */
  ready(): Promise<void>;
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

/** A store under one client configuration, and its cells. */
export interface StoreMatrix {
  /** `Redis 7 (ioredis's defaults)`: how the suite is named. */
  readonly name: string;
  /** The claims' lease: what a key left claimed may take to come back. */
  readonly leaseMs: number;
  /** Starts the application on `platform`, charging the gateway at `gatewayUrl`. */
  start(platform: Platform, gatewayUrl: string): Promise<StoreTarget>;
  readonly cells: readonly StoreCell[];
}

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
 * completed, no step left behind.
 */
export function describeStoreMatrix(matrix: StoreMatrix): void {
  const { leaseMs } = matrix;

  describe.each(PLATFORMS)(
    `the fault matrix on ${matrix.name} (%s)`,
    (platform) => {
      let gateway: FakeGateway;
      let target: StoreTarget;
      let control: Control;

      beforeAll(async () => {
        gateway = await new FakeGateway().start();
        target = await matrix.start(platform, gateway.url);
        control = target.app.get(Control);
      });
      afterAll(async () => {
        await target?.close();
        await gateway?.stop();
      });

      const post = (path: string, key: string, body: unknown) =>
        fetch(`${target.url}${path}`, {
          method: 'POST',
          headers: {
            'Idempotency-Key': key,
            'Content-Type': 'application/json',
          },
          body: JSON.stringify(body),
        });

      /** Waits until no live claim holds `key`: within its lease, or the key is stuck. */
      const untilClaimFree = (key: string) =>
        until(
          async () => {
            const record = await target.record(key);
            return !(record?.state === 'in_progress' && record.live);
          },
          `the claim of ${key} to lapse within its lease`,
          leaseMs + 1_000,
        );

      /** One request of a cell, its retries, and the binding's probes. */
      const runOf = (cell: StoreCell) => {
        const key = `fm-${platform}-${cell.point.replaceAll(' ', '-')}-${cell.when}`;
        const limited = cell.point === 'stored error';
        const path = limited ? '/payments/limited' : '/payments';
        const body = { reference: key, amount: limited ? OVER_LIMIT : AMOUNT };
        const derivedKey = `${key}:charge`;
        const probed: string[] = [];

        /**
         * I6: another body under the key gets 422 problem+json, runs no
         * handler, calls no gateway, and leaves the store as it was.
         */
        const probe = async (after: string) => {
          probed.push(after);
          const before = {
            runs: control.runs.get(key) ?? 0,
            gatewayCalls: gateway.calls.get(derivedKey) ?? 0,
            charges: gateway.chargeCount,
            held: await target.snapshot(key),
          };
          const answer = await read(
            post('/payments', key, { reference: key, amount: OTHER_AMOUNT }),
          );
          expect(asRefusal(answer, after)).toEqual(refusal(key, after));
          expect({
            runs: control.runs.get(key) ?? 0,
            gatewayCalls: gateway.calls.get(derivedKey) ?? 0,
            charges: gateway.chargeCount,
            held: await target.snapshot(key),
          }).toEqual(before);
        };

        const send = () => post(path, key, body);
        /** The answers of one client: `first`, then retries past 503 and 409. */
        const settle = async (first: Promise<Response>) => {
          const replies: Reply[] = [];
          let next = first;
          for (;;) {
            const reply = await read(next);
            replies.push(reply);
            // The store's client is back before anything else is sent.
            await target.ready();
            if (
              !limited &&
              failed(reply) &&
              (await target.steps(key)).includes('charge')
            ) {
              await probe(label(reply));
            }
            if (reply.status !== 503 && reply.status !== 409) {
              return replies;
            }
            if (replies.length >= MAX_TRIES) {
              throw new Error(
                `${key}: no answer past ${replies.map(label).join(', ')}`,
              );
            }
            if (reply.status === 409) {
              await untilClaimFree(key);
              // Released by its lease's end, the key stays bound.
              if (!limited && (await target.steps(key)).includes('charge')) {
                await probe(LEASE_OVER);
              }
            }
            next = send();
          }
        };
        return { key, limited, derivedKey, probed, send, settle };
      };

      /** The connection is lost at the command of the cell's point. */
      const commandRun = async (
        cell: StoreCell,
        run: ReturnType<typeof runOf>,
      ) => {
        if (cell.point === 'release') {
          // The handler fails after its charge: its claim is released.
          control.failOnce(run.key);
        }
        const fault = target.arm(cell.point, cell.when, run.key);
        try {
          const replies = await run.settle(run.send());
          expect(fault.hit).toBe(true);
          await fault.injected;
          return replies;
        } finally {
          fault.disarm();
        }
      };

      /**
       * A renewal's connection is lost while the handler waits (after its
       * charge): a later renewal keeps the lease, and a duplicate is refused
       * meanwhile.
       */
      const renewalRun = async (
        cell: StoreCell,
        run: ReturnType<typeof runOf>,
      ) => {
        const held = control.holdAfterCharge(run.key);
        const fault = target.arm('renewal', cell.when, run.key);
        try {
          const first = run.send();
          await held.reached();
          await until(
            () => Promise.resolve(fault.hit),
            `a renewal of ${run.key}`,
            leaseMs,
          );
          await fault.injected;
          await target.ready();
          const leaseEnds = async () => {
            const record = await target.record(run.key);
            return record?.state === 'in_progress' ? record.leaseEnds : 0;
          };
          const lost = await leaseEnds();
          await until(
            async () => (await leaseEnds()) > lost,
            `a renewal of ${run.key} after the lost one`,
            leaseMs,
          );
          const duplicate = await read(run.send());
          expect(label(duplicate)).toBe('409');
          held.open();
          return await run.settle(first);
        } finally {
          held.open();
          fault.disarm();
        }
      };

      it.each(matrix.cells)('$point / $when', async (cell) => {
        const run = runOf(cell);
        const charges = gateway.chargeCount;
        const replies =
          cell.point === 'renewal'
            ? await renewalRun(cell, run)
            : await commandRun(cell, run);

        // No 500, and the client got what the cell expects.
        expect(
          replies.filter((r) => r.status >= 500 && r.status !== 503),
        ).toEqual([]);
        expect(replies.map(label)).toEqual(cell.expected);
        const final = replies[replies.length - 1];
        const answers = [...replies];
        if (cell.again) {
          // The answer was never stored: the next request runs again.
          const runs = control.runs.get(run.key) ?? 0;
          const again = await run.settle(run.send());
          expect(again.map(label)).toEqual(cell.again);
          expect(again[again.length - 1]).toEqual({
            ...final,
            replayed: false,
          });
          expect(control.runs.get(run.key)).toBe(runs + 1);
          answers.push(...again);
        }
        const replay = await read(run.send());
        expect(replay).toEqual({ ...final, replayed: true });
        answers.push(replay);
        // The binding was probed after each failed answer with a charge.
        expect(run.probed).toEqual(cell.probed ?? []);

        expect(await target.steps(run.key)).toEqual([]);
        if (run.limited) {
          // The 402 is the record; nothing was charged.
          expect(await target.record(run.key)).toEqual({
            state: 'failed',
            responseStatus: 402,
          });
          expect(gateway.chargeCount).toBe(charges);
          return;
        }
        expect(await target.record(run.key)).toEqual({
          state: 'completed',
          responseStatus: 201,
        });
        // Every 2xx for the key: the same bytes, naming the one charge.
        const successes = answers.filter(
          (r) => r.status >= 200 && r.status < 300,
        );
        expect(new Set(successes.map((r) => r.text)).size).toBe(1);
        const body = JSON.parse(final.text) as ChargeResponse;
        expect(body).toMatchObject({ reference: run.key, amount: AMOUNT });
        expect(gateway.chargeCount).toBe(charges + 1);
        expect(gateway.calls.get(run.derivedKey)).toBe(cell.gatewayCalls ?? 1);
        // The gateway's charge for the key (it answers a known key with it).
        const charge = await requestCharge(gateway.url, AMOUNT, run.derivedKey);
        expect(charge).toEqual({ id: body.chargeId, amount: AMOUNT });
      });
    },
  );
}
