import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/**
 * `409 Conflict`: a request with the same key is still executing. The client
 * should retry after the `Retry-After` delay and will then get the stored
 * response.
 */
export class IdempotencyConflictException extends IdempotencyHttpException {
  /**
   * @param key the idempotency key that is still executing
   * @param retryAfterSeconds seconds after which a retry may find it done
   * (the module's `retryAfter`, at most what is left of the running
   * attempt's lease): HTTP sends it as `Retry-After`, GraphQL as
   * `retryAfter`; a caller of `run()` reads it here.
   */
  constructor(
    key: string,
    readonly retryAfterSeconds: number,
  ) {
    super(
      {
        type: problemType('request-in-progress'),
        title: 'Request in progress',
        status: HttpStatus.CONFLICT,
        detail:
          'A request with this idempotency key is still being processed. Retry later to get its response.',
        key,
      },
      { 'Retry-After': String(retryAfterSeconds) },
    );
  }
}
