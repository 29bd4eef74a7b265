import { HttpStatus } from '@nestjs/common';
import { IdempotencyHttpException } from './idempotency-http.exception.js';

/**
 * `503 Service Unavailable`: the database could not be reached, or the
 * request's transaction could not commit. Nothing was stored; the client
 * should retry with the same key after the `Retry-After` delay.
 */
export class IdempotencyUnavailableException extends IdempotencyHttpException {
  constructor(retryAfterSeconds: number) {
    super(
      {
        type: 'urn:idempotency:unavailable',
        title: 'Request not completed',
        status: HttpStatus.SERVICE_UNAVAILABLE,
        detail:
          'The request could not be completed and had no effect. Retry it with the same idempotency key.',
      },
      { 'Retry-After': String(retryAfterSeconds) },
    );
  }
}
