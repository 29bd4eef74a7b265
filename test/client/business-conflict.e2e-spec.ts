import {
  ConflictException,
  Controller,
  Injectable,
  Module,
  Post,
} from '@nestjs/common';
import {
  IdempotentClient,
  RetriesExhaustedError,
  type IdempotentClientOptions,
} from '../../src/client/index.js';
import { Idempotent } from '../../src/index.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';

/*
 * The caller's client against the module, for a 409 of the handler itself
 * (a business conflict), which the client cannot tell from the module's
 * 409 for a key still in progress: as src/client/README.md says, it is
 * retried like any 409 that is not a replay, unless the API stores it
 * (`storeErrors`), when its retry gets it back as a replay, which is final.
 */

@Injectable()
class Runs {
  count = 0;
}

@Controller('accounts')
class AccountsController {
  constructor(private readonly runs: Runs) {}

  @Post()
  @Idempotent()
  open(): never {
    this.runs.count += 1;
    throw new ConflictException('email already registered');
  }

  @Post('stored')
  @Idempotent({ storeErrors: true })
  openStored(): never {
    this.runs.count += 1;
    throw new ConflictException('email already registered');
  }
}

@Module({ controllers: [AccountsController], providers: [Runs] })
class AccountsModule {}

const QUICK: IdempotentClientOptions = {
  attempts: 3,
  baseDelayMs: 1,
  maxDelayMs: 5,
};

const CONFLICT = {
  statusCode: 409,
  message: 'email already registered',
  error: 'Conflict',
};

describe("a 409 of the handler's own", () => {
  let target: TestApp;
  let runs: Runs;

  beforeAll(async () => {
    target = await startTestApp({ imports: [AccountsModule] });
    runs = target.app.get(Runs);
  });
  afterAll(() => target.close());
  beforeEach(() => {
    runs.count = 0;
  });

  const operation = {
    headers: { 'content-type': 'application/json' },
    body: '{"email":"a@example.com"}',
  };

  it('is retried like any 409 that is not a replay, until the attempts run out', async () => {
    let error: unknown;
    try {
      await new IdempotentClient(QUICK).send(`${target.url}/accounts`, {
        ...operation,
        key: 'conflict-retried',
      });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(RetriesExhaustedError);
    const exhausted = error as RetriesExhaustedError;
    expect({
      reason: exhausted.reason,
      status: exhausted.status,
      attempts: exhausted.attempts,
      replayed: exhausted.response?.headers.get('idempotent-replayed'),
      body: (await exhausted.response?.json()) as unknown,
    }).toEqual({
      reason: 'attempts',
      status: 409,
      attempts: 3,
      replayed: null,
      body: CONFLICT,
    });
    // The key is released after each: every attempt ran the handler.
    expect(runs.count).toBe(3);
  });

  it('is final once stored (storeErrors): the retry gets it back as a replay', async () => {
    const result = await new IdempotentClient(QUICK).send(
      `${target.url}/accounts/stored`,
      { ...operation, key: 'conflict-stored' },
    );
    expect({
      status: result.response.status,
      replayed: result.replayed,
      attempts: result.attempts,
      body: (await result.response.json()) as unknown,
    }).toEqual({ status: 409, replayed: true, attempts: 2, body: CONFLICT });
    expect(runs.count).toBe(1);
  });
});
