import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/**
 * `422 Unprocessable Content`: the key was already used for a different
 * request (another method, route or payload). The client should use a new key
 * for a new request.
 */
export class IdempotencyKeyReusedException extends IdempotencyHttpException {
  constructor(key: string) {
    super({
      type: problemType('key-reused'),
      title: 'Idempotency key reused',
      status: HttpStatus.UNPROCESSABLE_ENTITY,
      detail:
        'This idempotency key was already used for a different request. Use a new key for a new request.',
      key,
    });
  }
}
