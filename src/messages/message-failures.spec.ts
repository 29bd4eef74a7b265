import { HttpException } from '@nestjs/common';
import { IdempotencyStepResultTooLargeException } from '../exceptions/idempotency-step-result-too-large.exception.js';
import { IdempotencyStepResultNotJsonException } from '../exceptions/idempotency-step-result-not-json.exception.js';
import { IdempotencyUnavailableException } from '../exceptions/idempotency-unavailable.exception.js';
import { failedOutcome } from './message-failures.js';

describe('failedOutcome', () => {
  it('rejects a message whose step’s result was too large to keep: every redelivery would meet it again', () => {
    expect(
      failedOutcome(new IdempotencyStepResultTooLargeException('big', 2, 1)),
    ).toBe('reject');
  });

  it('rejects a message whose step’s result was not JSON: every redelivery would meet it again', () => {
    expect(
      failedOutcome(
        new IdempotencyStepResultNotJsonException('charge', 'a BigInt'),
      ),
    ).toBe('reject');
  });

  it('still requeues another 5xx, which a redelivery may not meet', () => {
    expect(failedOutcome(new IdempotencyUnavailableException(1))).toBe(
      'requeue',
    );
    expect(failedOutcome(new HttpException('down', 500))).toBe('requeue');
  });
});
