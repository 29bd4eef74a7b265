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
  constructor(key: string, retryAfterSeconds: number) {
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
