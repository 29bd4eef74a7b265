/**
 * A step name used twice in one execution: refused before the second
 * call's effect, as a programming error (at once, both effects ran; one
 * after the other, the second call silently got the first one's result).
 * A retry resuming after a step saved by an earlier attempt is no second
 * use.
 *
 * Names of steps that not every store can keep: one that, with its scope
 * and key, is over what every store keeps of a step (PostgreSQL's primary
 * key of the steps table holds an index row of 2,704 bytes), and one with a
 * NUL or a lone surrogate (PostgreSQL's `text` holds neither). Refused
 * before the step runs, as the programming error it is, on every store:
 * the request gets the handler's 500, its key stays free and unbound, and
 * the effect never runs (on PostgreSQL, a long name ran on every retry,
 * its save failing; a NUL got a 503 for ever). Over real HTTP, on each
 * store.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import {
  Body,
  Controller,
  Inject,
  Injectable,
  Post,
  type INestApplication,
} from '@nestjs/common';
import {
  IdempotencyContext,
  IdempotencyStepTooLargeError,
  Idempotent,
  type IdempotencyModuleOptions,
  type IdempotencyStore,
} from '../../src/index.js';
import { IdempotencyExecutor } from '../../src/core/idempotency.executor.js';
import { DEFAULT_SCOPE } from '../../src/stores/index.js';
import { answer } from '../utils/problems.js';
import { startStoreApp } from '../utils/store-app.js';
import {
  dynamoSubject,
  memorySubject,
  redisSubject,
  type Subject,
} from '../utils/store-subjects.js';
import { startTestApp } from '../utils/test-app.js';

/** What every store keeps of a step's name, scope and key (UTF-8). */
const MAX_STEP_IDENTITY_BYTES = 2560;

@Injectable()
class Steps {
  /** How many times each key's step ran. */
  readonly effects = new Map<string, number>();
  /** What each key's `step()` threw, by attempt. */
  readonly errors = new Map<string, string[]>();
  /** Keys whose handler fails once, after its step. */
  readonly failOnce = new Set<string>();

  effect(key: string): number {
    const runs = (this.effects.get(key) ?? 0) + 1;
    this.effects.set(key, runs);
    return runs;
  }

  note(key: string, error: unknown): void {
    const { name, message } = error as Error;
    this.errors.set(key, [
      ...(this.errors.get(key) ?? []),
      `${name}: ${message}`,
    ]);
  }
}

@Controller('names')
class NamesController {
  constructor(
    @Inject(Steps) private readonly steps: Steps,
    @Inject(IdempotencyContext) private readonly context: IdempotencyContext,
  ) {}

  /** One step named by the body; fails once after it when told. */
  @Post()
  @Idempotent()
  async named(@Body() body: { name: string }) {
    const key = this.context.key as string;
    let runs: number;
    try {
      runs = await this.context.step(body.name, () => this.steps.effect(key));
    } catch (error) {
      this.steps.note(key, error);
      throw error;
    }
    if (this.steps.failOnce.delete(key)) {
      throw new Error('the handler failed after its step');
    }
    return { runs };
  }

  /** Step `charge` twice, one call after the other. */
  @Post('in-turn')
  @Idempotent()
  async inTurn() {
    const key = this.context.key as string;
    const first = await this.context.step('charge', () =>
      this.steps.effect(`${key}/first`),
    );
    try {
      await this.context.step('charge', () =>
        this.steps.effect(`${key}/second`),
      );
    } catch (error) {
      this.steps.note(key, error);
      throw error;
    }
    return { first };
  }

  /** Step `charge` twice, the second call while the first is under way. */
  @Post('at-once')
  @Idempotent()
  async atOnce() {
    const key = this.context.key as string;
    let began!: () => void;
    const underWay = new Promise<void>((resolve) => (began = resolve));
    const first = this.context.step('charge', () => {
      began();
      return this.steps.effect(`${key}/first`);
    });
    // Read back on a retry, the first call runs nothing.
    void first.then(began, began);
    const second = underWay
      .then(() =>
        this.context.step('charge', () => this.steps.effect(`${key}/second`)),
      )
      .catch((error: unknown) => {
        this.steps.note(key, error);
        throw error;
      });
    return { charges: await Promise.all([first, second]) };
  }
}

/** A running application of the spec, on one store. */
interface Target {
  readonly app: INestApplication;
  readonly url: string;
  close(): Promise<void>;
}

const idempotency: IdempotencyModuleOptions = {
  keyValidation: { maxLength: 1024 },
};
const metadata = { controllers: [NamesController], providers: [Steps] };

const STORES: Array<
  [string, () => Promise<{ target: Target; subject?: Subject }>]
> = [
  [
    'PostgreSQL',
    async () => ({
      target: await startTestApp({ ...metadata, idempotency }),
    }),
  ],
  ...(
    [
      ['memory', memorySubject],
      ['Redis', redisSubject],
      ['DynamoDB', dynamoSubject],
    ] as const
  ).map(
    ([name, subject]) =>
      [
        name,
        async () => {
          const made = await subject();
          return {
            subject: made,
            target: await startStoreApp({
              ...metadata,
              store: made.store,
              idempotency,
            }),
          };
        },
      ] as [string, () => Promise<{ target: Target; subject?: Subject }>],
  ),
];

/** The answer Nest gives an error of the handler's own (a programming error). */
const HANDLER_ERROR = {
  status: 500,
  body: { statusCode: 500, message: 'Internal server error' },
};

describe.each(STORES)('names of steps (%s)', (store, make) => {
  let target: Target;
  let subject: Subject | undefined;
  let steps: Steps;

  beforeAll(async () => {
    ({ target, subject } = await make());
    steps = target.app.get(Steps);
  });
  afterAll(async () => {
    await target?.close();
    await subject?.close();
  });

  const post = (key: string, name: string) =>
    answer(
      fetch(`${target.url}/names`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ name }),
      }),
    );

  /** Three sends of `name` under `key`, and what became of them. */
  const thrice = async (key: string, name: string) => {
    const answers = [];
    for (let i = 0; i < 3; i += 1) {
      answers.push(await post(key, name));
    }
    return answers;
  };

  it.each([
    ['a name of 2,800 bytes', 'long-name-1', randomBytes(1400).toString('hex')],
    [
      'a name of 1,700 bytes under a key of 1,024 characters',
      randomBytes(512).toString('hex'),
      randomBytes(850).toString('hex'),
    ],
    [
      'a name of 900 characters of 3 bytes each',
      'long-name-3',
      '支'.repeat(900),
    ],
  ])(
    'refuses %s, as a programming error, before its step runs: every send gets the 500, the key stays free',
    async (_case, key, name) => {
      const answers = await thrice(key, name);
      expect(answers).toEqual(
        Array(3).fill(expect.objectContaining(HANDLER_ERROR)),
      );
      expect(steps.effects.get(key)).toBeUndefined();
      const bytes = DEFAULT_SCOPE.length + key.length + Buffer.byteLength(name);
      expect(steps.errors.get(key)).toEqual(
        Array(3).fill(
          `IdempotencyConfigurationError: The name of step ${JSON.stringify(name.slice(0, 64))}… takes ${bytes} bytes (UTF-8) with the request's scope and key, over the ${MAX_STEP_IDENTITY_BYTES} that every idempotency store keeps of a step. This is a programming error: the step did not run.\nPotential solutions:\n- Name steps with short fixed strings ('charge', 'email-receipt'), not with data of the request.`,
        ),
      );
      // Neither held nor bound: another request under the key runs.
      expect(await post(key, 'short')).toMatchObject({
        status: 201,
        body: { runs: 1 },
      });
    },
  );

  it.each([
    ['a NUL character', 'a\u0000b'],
    ['a lone high surrogate', 'x\ud800y'],
    ['a lone low surrogate', '\udc00'],
  ])(
    'refuses a name with %s, as a programming error, before its step runs: every send gets the 500, the key stays free',
    async (_case, name) => {
      const key = randomUUID();
      const answers = await thrice(key, name);
      expect(answers).toEqual(
        Array(3).fill(expect.objectContaining(HANDLER_ERROR)),
      );
      expect(steps.effects.get(key)).toBeUndefined();
      expect(steps.errors.get(key)).toEqual(
        Array(3).fill(
          `IdempotencyConfigurationError: The name of step ${JSON.stringify(name)} has a NUL character (U+0000) or a lone surrogate (not well-formed UTF-16), which not every idempotency store keeps as text. This is a programming error: the step did not run.\nPotential solutions:\n- Name steps with short fixed strings ('charge', 'email-receipt'), not with data of the request.`,
        ),
      );
      expect(await post(key, 'short')).toMatchObject({
        status: 201,
        body: { runs: 1 },
      });
    },
  );

  it.each([
    [
      'at the limit',
      (key: string) =>
        'n'.repeat(MAX_STEP_IDENTITY_BYTES - DEFAULT_SCOPE.length - key.length),
    ],
    ['of characters beyond the BMP', () => '支払い/💳 "q" \\'],
  ])(
    'keeps a name %s: the retry resumes after its step, which ran once',
    async (_case, named) => {
      const key = randomUUID();
      const name = named(key);
      steps.failOnce.add(key);
      expect((await post(key, name)).status).toBe(500);
      expect(await post(key, name)).toMatchObject({
        status: 201,
        body: { runs: 1 },
      });
      expect(steps.effects.get(key)).toBe(1);
      expect(steps.errors.get(key)).toBeUndefined();
    },
  );

  describe.each([
    ['one after the other', '/in-turn'],
    ['at once', '/at-once'],
  ])('a step name used twice in one execution, %s', (_case, path) => {
    it("refuses the second call before its effect, as a programming error, and so does every retry, which reads the first one's result back", async () => {
      const key = randomUUID();
      const send = () =>
        answer(
          fetch(`${target.url}/names${path}`, {
            method: 'POST',
            headers: { 'idempotency-key': key },
          }),
        );
      expect(await send()).toMatchObject(HANDLER_ERROR);
      expect(await send()).toMatchObject(HANDLER_ERROR);
      expect(steps.effects.get(`${key}/first`)).toBe(1);
      expect(steps.effects.get(`${key}/second`)).toBeUndefined();
      expect(steps.errors.get(key)).toEqual(
        Array(2).fill(
          `IdempotencyConfigurationError: Step "charge" is called a second time in one execution of the handler. This is a programming error: a name stands for one effect, whose result a retry reads back. The second call did not run.\nPotential solutions:\n- Give every step of a handler a name of its own ('charge', 'refund'), and call each once per execution.\n- To try an effect again within one execution, do it inside the step: step(name, () => withRetries(call)).`,
        ),
      );
    });
  });

  if (store === 'PostgreSQL') {
    it('never takes an index row too large (SQLSTATE 54000) for a result too large', async () => {
      const { store: postgres } = target.app.get(IdempotencyExecutor) as {
        store: IdempotencyStore;
      };
      const request = {
        scope: DEFAULT_SCOPE,
        key: randomUUID(),
        owner: randomUUID(),
        fingerprint: 'f',
        method: 'POST',
        path: '/names',
        leaseMs: 10_000,
        ttlMs: 60_000,
        wait: false,
      };
      expect((await postgres.claim(request)).state).toBe('claimed');
      const name = randomBytes(1400).toString('hex');
      const saving = postgres.saveStep(request, name, 1, 60_000);
      await expect(saving).rejects.toMatchObject({ code: '54000' });
      await expect(saving).rejects.not.toBeInstanceOf(
        IdempotencyStepTooLargeError,
      );
      await postgres.release(request);
    });
  }
});
