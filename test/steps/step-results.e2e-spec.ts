/**
 * A step's result is what JSON keeps of it, on the first run as on a
 * resumed retry. One that JSON has no text for (a function, a symbol, a
 * `toJSON` that returns nothing) is kept as `null`, as `undefined` is: a
 * retry after a failure resumes after the step, its effect not run again.
 * One that JSON cannot hold at all (a BigInt, a cycle) is kept as a step
 * that ran without a result: the request and every retry get the same
 * 500 (`step-result-not-json`), never the database's 503 (which asks for
 * the retry again and again), and the step never runs again. On every
 * store.
 */
import {
  Body,
  Controller,
  Inject,
  Injectable,
  Param,
  Post,
} from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { startStoreApp } from '../utils/store-app.js';
import {
  dynamoSubject,
  memorySubject,
  redisSubject,
  type Subject,
} from '../utils/store-subjects.js';
import { startTestApp } from '../utils/test-app.js';

/** What each kind of step returns. */
const RESULTS: Record<string, () => unknown> = {
  function: () => () => 'not JSON',
  symbol: () => Symbol('not JSON'),
  'to-json-undefined': () => ({ toJSON: () => undefined }),
  bigint: () => 1n,
  cycle: () => {
    const response: Record<string, unknown> = { status: 201 };
    response.request = { response };
    return response;
  },
  date: () => new Date(0),
  map: () => new Map([['a', 1]]),
  nan: () => Number.NaN,
  'negative-zero': () => -0,
  buffer: () => Buffer.from('bytes'),
};

/**
 * What the code after a step can tell of its result (the order of an
 * object's keys aside, which PostgreSQL's `jsonb` does not keep).
 */
function describeResult(result: unknown): string {
  const json = JSON.stringify(result, (_name, value: unknown) =>
    value && typeof value === 'object' && !Array.isArray(value)
      ? Object.fromEntries(
          Object.entries(value).sort(([a], [b]) => (a < b ? -1 : 1)),
        )
      : value,
  );
  return result === null
    ? 'null'
    : `${typeof result} ${Object.prototype.toString.call(result)}${Object.is(result, -0) ? ' -0' : ''} ${json}`;
}

@Injectable()
class Effects {
  /** The step's effects, by request. */
  readonly counts = new Map<string, number>();
  /** Requests whose handler fails once, after its step. */
  readonly failOnce = new Set<string>();
}

@Controller('odd-step')
class OddStepController {
  constructor(
    @Inject(Effects) private readonly effects: Effects,
    @Inject(IdempotencyContext) private readonly context: IdempotencyContext,
  ) {}

  @Post(':kind')
  @Idempotent()
  async run(@Param('kind') kind: string, @Body() body: { ref: string }) {
    const result = await this.context.step('effect', () => {
      this.effects.counts.set(
        body.ref,
        (this.effects.counts.get(body.ref) ?? 0) + 1,
      );
      return RESULTS[kind]();
    });
    if (this.effects.failOnce.delete(body.ref)) {
      throw new Error('the handler failed after its step');
    }
    return { step: describeResult(result) };
  }
}

/** A running application on one store, and how to end it. */
interface Target {
  readonly url: string;
  readonly effects: Effects;
  close(): Promise<void>;
}

const STORES: Array<[string, () => Promise<Target>]> = [
  [
    'postgres',
    async () => {
      const app = await startTestApp({
        controllers: [OddStepController],
        providers: [Effects],
      });
      return {
        url: app.url,
        effects: app.app.get(Effects),
        close: () => app.close(),
      };
    },
  ],
  ...(
    [
      ['memory', memorySubject],
      ['redis', redisSubject],
      ['dynamodb', dynamoSubject],
    ] as Array<[string, () => Promise<Subject>]>
  ).map(([name, subjectOf]): [string, () => Promise<Target>] => [
    name,
    async () => {
      const subject = await subjectOf();
      const app = await startStoreApp({
        store: subject.store,
        controllers: [OddStepController],
        providers: [Effects],
      });
      return {
        url: app.url,
        effects: app.app.get(Effects),
        close: async () => {
          await app.close();
          await subject.close();
        },
      };
    },
  ]),
];

describe.each(STORES)(
  'step results JSON cannot keep, on %s',
  (_store, start) => {
    let target: Target;

    beforeAll(async () => {
      target = await start();
    });
    afterAll(() => target?.close());

    const post = async (kind: string, key: string, ref: string) => {
      const answer = await fetch(`${target.url}/odd-step/${kind}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ ref }),
      });
      return { status: answer.status, body: await answer.text() };
    };

    it.each(['function', 'symbol', 'to-json-undefined'])(
      'keeps a %s as null: the retry after a failure resumes after the step',
      async (kind) => {
        const key = randomUUID();
        target.effects.failOnce.add(key);
        expect((await post(kind, key, key)).status).toBe(500);
        expect(await post(kind, key, key)).toEqual({
          status: 201,
          body: JSON.stringify({ step: 'null' }),
        });
        // Resumed: the effect ran once.
        expect(target.effects.counts.get(key)).toBe(1);
      },
    );

    it.each(['date', 'map', 'nan', 'negative-zero', 'buffer'])(
      'gives the code after the step a %s as a resumed retry reads it back, on the first run too',
      async (kind) => {
        const ran = randomUUID();
        const first = await post(kind, ran, ran);
        const resumedKey = randomUUID();
        target.effects.failOnce.add(resumedKey);
        expect((await post(kind, resumedKey, resumedKey)).status).toBe(500);
        expect(await post(kind, resumedKey, resumedKey)).toEqual(first);
        expect(first.status).toBe(201);
        expect(target.effects.counts.get(resumedKey)).toBe(1);
      },
    );

    it.each(['bigint', 'cycle'])(
      'answers a %s with a 500 (not the database’s 503) that every retry gets, the step run once',
      async (kind) => {
        const key = randomUUID();
        const notJson = {
          status: 500,
          body: JSON.stringify({
            type: 'urn:idempotency:step-result-not-json',
            title: 'Step result not JSON',
            status: 500,
            detail:
              'A step of this request ran, but its result is not a value JSON can hold, so the idempotency store cannot keep it. The step does not run again under this idempotency key, so retrying with it cannot succeed.',
          }),
        };
        expect(await post(kind, key, key)).toEqual(notJson);
        expect(await post(kind, key, key)).toEqual(notJson);
        expect(target.effects.counts.get(key)).toBe(1);
      },
    );
  },
);
