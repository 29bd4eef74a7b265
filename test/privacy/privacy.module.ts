import {
  BadRequestException,
  Controller,
  Header,
  Injectable,
  Post,
  Res,
} from '@nestjs/common';
import {
  IdempotencyContext,
  Idempotent,
  type IdempotencyRedactor,
} from '../../src/index.js';

/** What stored values must never show in the clear. */
export const SECRETS = {
  card: '4111111111111111',
  holder: 'Ada Lovelace',
  header: 'acct-secret-9f2c',
  token: 'tok-secret-5e1a',
} as const;

/** How many times each handler ran. */
@Injectable()
export class PrivacyRuns {
  card = 0;
  steps = 0;
  charges = 0;
  /** Whether the next run of the steps handler fails after its step. */
  failSteps = false;
  /** What the step of the last run of `/privacy/lookalike-steps` returned. */
  lookalike: unknown;
}

/** Masks the card number and drops `X-Account` from what is stored. */
export const maskCard: IdempotencyRedactor = (response) => {
  const headers = { ...response.headers };
  delete headers['x-account'];
  const body = JSON.parse(response.body.toString()) as { card: string };
  return {
    headers,
    body: JSON.stringify({
      ...body,
      card: `************${body.card.slice(-4)}`,
    }),
  };
};

@Controller('privacy')
export class PrivacyController {
  constructor(
    private readonly runs: PrivacyRuns,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Post('card')
  @Idempotent()
  @Header('X-Account', SECRETS.header)
  card() {
    this.runs.card += 1;
    return { run: this.runs.card, card: SECRETS.card, holder: SECRETS.holder };
  }

  @Post('redacted')
  @Idempotent({ redact: maskCard })
  redacted(
    @Res({ passthrough: true })
    response: {
      header(name: string, value: string): unknown;
    },
  ) {
    // Set by the handler, not by @Header() (which Nest sets on every
    // answer of the route, a replay's included).
    response.header('X-Account', SECRETS.header);
    this.runs.card += 1;
    return { run: this.runs.card, card: SECRETS.card };
  }

  /** A redaction that returns headers the module never stores, and no Content-Type. */
  @Post('redacted-headers')
  @Idempotent({
    redact: ({ body }) => ({
      headers: {
        'Set-Cookie': 'session=from-redact',
        'proxy-authorization': 'Basic c2VjcmV0',
        'X-Kept': 'yes',
      },
      body,
    }),
  })
  redactedHeaders() {
    this.runs.card += 1;
    return { run: this.runs.card };
  }

  /** A redaction that stores more than the route's maxResponseSize. */
  @Post('redacted-larger')
  @Idempotent({
    maxResponseSize: 64,
    redact: ({ headers }) => ({ headers, body: 'x'.repeat(65) }),
  })
  redactedLarger() {
    this.runs.card += 1;
    return { run: this.runs.card };
  }

  /** An error stored by the policy, which a redaction makes larger than maxResponseSize. */
  @Post('redacted-larger-error')
  @Idempotent({
    storeErrors: true,
    maxResponseSize: 64,
    redact: ({ headers }) => ({ headers, body: 'x'.repeat(65) }),
  })
  redactedLargerError() {
    this.runs.card += 1;
    throw new BadRequestException(`run ${this.runs.card}`);
  }

  @Post('steps')
  @Idempotent()
  async steps() {
    this.runs.steps += 1;
    const charge = await this.idempotency.step('charge', () => {
      this.runs.charges += 1;
      return { token: SECRETS.token };
    });
    if (this.runs.failSteps) {
      this.runs.failSteps = false;
      throw new Error('The gateway answered, the handler failed after it');
    }
    return { charge };
  }

  /**
   * A text body that begins with the sealed format's `IDS1`, as a plaintext
   * record stored before encryption was on may.
   */
  @Post('lookalike')
  @Idempotent()
  @Header('Content-Type', 'text/plain')
  lookalike() {
    this.runs.card += 1;
    return `IDS1-batch-${this.runs.card}`;
  }

  /** A step whose result begins as one sealed as text does. */
  @Post('lookalike-steps')
  @Idempotent()
  async lookalikeSteps() {
    this.runs.steps += 1;
    const batch = await this.idempotency.step('batch', () => {
      this.runs.charges += 1;
      return `idempotency-sealed:batch-${this.runs.charges}`;
    });
    this.runs.lookalike = batch;
    if (this.runs.failSteps) {
      this.runs.failSteps = false;
      throw new Error('The gateway answered, the handler failed after it');
    }
    return { batch };
  }
}
