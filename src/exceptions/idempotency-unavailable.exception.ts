import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/**
 * `503 Service Unavailable`: the database could not be reached, the
 * request's connection was lost, or its transaction could not commit. The
 * client should retry with the same key after the `Retry-After` delay: the
 * retry executes the request if it had no effect, and replays it in the rare
 * case where the commit went through before the connection broke.
 */
export class IdempotencyUnavailableException extends IdempotencyHttpException {
  /**
   * @param retryAfterSeconds seconds after which to retry (the module's
   * `retryAfter`): HTTP sends it as `Retry-After`, GraphQL as `retryAfter`;
   * a caller of `run()` reads it here.
   */
  constructor(readonly retryAfterSeconds: number) {
    super(
      {
        type: problemType('unavailable'),
        title: 'Request not completed',
        status: HttpStatus.SERVICE_UNAVAILABLE,
        detail:
          'The request could not be completed. Retry it with the same idempotency key: it takes effect exactly once.',
      },
      { 'Retry-After': String(retryAfterSeconds) },
    );
  }
}
