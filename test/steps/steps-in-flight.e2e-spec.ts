/**
 * A handler that fails while one of its own steps is still under way (two
 * steps in a `Promise.all`, the other one failing): the key is not freed
 * until that step settled, so that a retry never runs it a second time
 * beside it, and its result, saved as usual, is what the retry resumes
 * with. At the deadline with the step still under way, the key is not
 * released but left to its lease (which ends at the deadline). Over real
 * HTTP, on PostgreSQL, the memory store and Redis.
 */
import { randomUUID } from 'node:crypto';
import {
  Controller,
  Inject,
  Injectable,
  Post,
  type INestApplication,
} from '@nestjs/common';
import {
  IdempotencyContext,
  Idempotent,
  IdempotencyStore,
} from '../../src/index.js';
import { Barrier, deferred, until, type Deferred } from '../utils/barrier.js';
import { answer } from '../utils/problems.js';
import { startStoreApp } from '../utils/store-app.js';
import {
  memorySubject,
  redisSubject,
  type Subject,
} from '../utils/store-subjects.js';
import { startTestApp } from '../utils/test-app.js';

@Injectable()
class Flight {
  /** How many times each step ran, by `key/step`. */
  readonly effects = new Map<string, number>();
  /** The keys derived in step `slow`, by run, by key. */
  readonly derived = new Map<string, string[]>();
  /** Keys whose handler fails once, after its step `fast`. */
  readonly failOnce = new Set<string>();
  /** Where the first run of step `slow` waits. */
  held = new Barrier();
  /** Resolved as the handler throws, after its step `fast`. */
  failed: Deferred<void> = deferred();
  /**
   * How each `step('slow')` call ended, by key: its result, or its error's
   * name.
   */
  readonly slowEnded = new Map<string, string[]>();

  effect(key: string, step: string): number {
    const id = `${key}/${step}`;
    const runs = (this.effects.get(id) ?? 0) + 1;
    this.effects.set(id, runs);
    return runs;
  }

  /** Appends `value` to the list of `key` in `lists`. */
  note(lists: Map<string, string[]>, key: string, value: string): void {
    lists.set(key, [...(lists.get(key) ?? []), value]);
  }

  reset(): void {
    this.effects.clear();
    this.derived.clear();
    this.failOnce.clear();
    this.held = new Barrier();
    this.failed = deferred();
    this.slowEnded.clear();
  }
}

@Controller('flight')
class FlightController {
  constructor(
    @Inject(Flight) private readonly flight: Flight,
    @Inject(IdempotencyContext) private readonly context: IdempotencyContext,
  ) {}

  @Post()
  @Idempotent()
  both() {
    return this.twoAtOnce();
  }

  @Post('short')
  @Idempotent({ transactionTimeout: '1s' })
  short() {
    return this.twoAtOnce();
  }

  /** Steps `slow` (held on its first run) and `fast` at once. */
  private async twoAtOnce() {
    const { flight, context } = this;
    const key = context.key as string;
    // The barrier of the request's time: a test may set another for the
    // next requests while this one still runs.
    const { held } = flight;
    const [slow, fast] = await Promise.all([
      context
        .step('slow', async () => {
          flight.note(flight.derived, key, context.deriveKey('slow'));
          const runs = flight.effect(key, 'slow');
          if (runs === 1) {
            await held.wait();
          }
          return runs;
        })
        .then(
          (runs) => {
            flight.note(flight.slowEnded, key, `ran ${runs}`);
            return runs;
          },
          (error: unknown) => {
            flight.note(flight.slowEnded, key, (error as Error).name);
            throw error;
          },
        ),
      (async () => {
        const runs = await context.step('fast', () =>
          flight.effect(key, 'fast'),
        );
        if (flight.failOnce.delete(key)) {
          flight.failed.resolve();
          throw new Error('the handler failed after its fast step');
        }
        return runs;
      })(),
    ]);
    return { slow, fast };
  }
}

/** A running application of the spec, on one store. */
interface Target {
  readonly app: INestApplication;
  readonly url: string;
  close(): Promise<void>;
}

const metadata = { controllers: [FlightController], providers: [Flight] };

const STORES: Array<
  [string, () => Promise<{ target: Target; subject?: Subject }>]
> = [
  ['PostgreSQL', async () => ({ target: await startTestApp(metadata) })],
  ...(
    [
      ['memory', memorySubject],
      ['Redis', redisSubject],
    ] as const
  ).map(
    ([name, subject]) =>
      [
        name,
        async () => {
          const made = await subject();
          return {
            subject: made,
            target: await startStoreApp({ ...metadata, store: made.store }),
          };
        },
      ] as [string, () => Promise<{ target: Target; subject?: Subject }>],
  ),
];

describe.each(STORES)(
  'a failure while a step is under way (%s)',
  (store, make) => {
    let target: Target;
    let subject: Subject | undefined;
    let flight: Flight;

    beforeAll(async () => {
      ({ target, subject } = await make());
      flight = target.app.get(Flight);
    });
    afterAll(async () => {
      flight?.held.open();
      await target?.close();
      await subject?.close();
    });
    beforeEach(() => flight.reset());

    const post = (key: string, path = '') =>
      answer(
        fetch(`${target.url}/flight${path}`, {
          method: 'POST',
          headers: { 'idempotency-key': key },
        }),
      );
    /** Until the store reads the claim of `key` as past its lease. */
    const leaseOver = (key: string) =>
      until(async () => {
        const store = target.app.get<IdempotencyStore>(IdempotencyStore);
        const record = await store.inspectRecord!('global', key, false);
        const ends = record?.leaseExpiresAt?.getTime();
        return !record || (ends !== undefined && ends < Date.now());
      }, `the lease of ${key} to end`);
    const runs = (key: string, step: string) =>
      flight.effects.get(`${key}/${step}`);
    const slowEndedOf = (key: string) => flight.slowEnded.get(key) ?? [];
    const derivedOf = (key: string) => flight.derived.get(key) ?? [];
    /** Until `count` calls of `step('slow')` of `key` settled. */
    const slowEnded = (key: string, count: number) =>
      until(
        () => Promise.resolve(slowEndedOf(key).length >= count),
        `${count} calls of step('slow') to settle`,
      );
    /**
     * Sends a request to `/short` (a 1 s deadline) whose handler fails
     * after its step `fast`, its step `slow` held: its key and answer, once
     * both happened before the deadline. A busy machine may reach the
     * deadline first: that attempt is let go (its barrier opened, its
     * records kept under its own key), and the case starts again with a
     * new key.
     */
    const failedWithStepHeld = async () => {
      for (let tries = 1; ; tries += 1) {
        const key = randomUUID();
        flight.failOnce.add(key);
        const first = post(key, '/short');
        const inTime = await Promise.race([
          Promise.all([flight.failed.promise, flight.held.reached(1)]).then(
            () => true,
          ),
          first.then(() => false),
        ]);
        if (inTime) {
          return { key, first };
        }
        if (tries === 5) {
          throw new Error(
            '5 handlers in a row did not fail with their step held before their 1 s deadline',
          );
        }
        flight.held.open();
        flight.held = new Barrier();
        flight.failed = deferred();
      }
    };

    it('keeps the key until the step settled: retries get 409 meanwhile, the step runs once, and the retry resumes with its result', async () => {
      const key = randomUUID();
      flight.failOnce.add(key);
      const first = post(key);
      await flight.failed.promise;
      await flight.held.reached(1);
      // The handler threw; its step `slow` is still under way.
      const retries = [];
      for (let i = 0; i < 5; i += 1) {
        retries.push(await post(key));
      }
      expect(retries.map(({ status }) => status)).toEqual([
        409, 409, 409, 409, 409,
      ]);
      expect(runs(key, 'slow')).toBe(1);
      flight.held.open();
      expect((await first).status).toBe(500);
      // Saved as usual, the claim still the attempt's.
      expect(slowEndedOf(key)).toEqual(['ran 1']);
      expect(await post(key)).toMatchObject({
        status: 201,
        replayed: false,
        body: { slow: 1, fast: 1 },
      });
      expect([runs(key, 'slow'), runs(key, 'fast')]).toEqual([1, 1]);
    });

    it('at the deadline with the step still under way, answers 503 and leaves the key to its lease: a step that ends before any retry is saved (but on Redis), and the retry resumes with it', async () => {
      const { key, first } = await failedWithStepHeld();
      expect(await first).toMatchObject({ status: 503, retryAfter: '1' });
      // Redis fences a save by the lease too: past it, the step is refused.
      const kept = store !== 'Redis';
      if (!kept) {
        // The lease ends at the deadline by Redis's clock, which reads the
        // claim a little after the attempt began (a busy machine: up to
        // hundreds of ms): the step ends once the lease is past by it.
        await leaseOver(key);
      }
      flight.held.open();
      await slowEnded(key, 1);
      expect(slowEndedOf(key)).toEqual([kept ? 'ran 1' : 'LeaseLostError']);
      const slow = kept ? 1 : 2;
      expect(await post(key, '/short')).toMatchObject({
        status: 201,
        body: { slow, fast: 1 },
      });
      expect([runs(key, 'slow'), runs(key, 'fast')]).toEqual([slow, 1]);
      expect(new Set(derivedOf(key)).size).toBe(1);
    });

    it('at the deadline with the step still under way, a retry takes the key over once its lease ran out and runs that step again under the same derived key', async () => {
      const { key, first } = await failedWithStepHeld();
      expect((await first).status).toBe(503);
      // The deadline runs from the attempt's start, the lease from its
      // claim, a little later (on a busy machine, hundreds of ms): a retry
      // before the lease ended gets 409, as its Retry-After told it.
      await leaseOver(key);
      expect(await post(key, '/short')).toMatchObject({
        status: 201,
        body: { slow: 2, fast: 1 },
      });
      expect(derivedOf(key)).toHaveLength(2);
      expect(derivedOf(key)[1]).toBe(derivedOf(key)[0]);
      // The first attempt's step, ended late, is not saved over the retry's.
      flight.held.open();
      await slowEnded(key, 2);
      expect(slowEndedOf(key)).toEqual(['ran 2', 'LeaseLostError']);
      expect(await post(key, '/short')).toMatchObject({
        status: 201,
        replayed: true,
        body: { slow: 2, fast: 1 },
      });
    });
  },
);
