import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/**
 * `400 Bad Request`: the idempotency key is malformed, empty, too long or
 * repeated. The client should fix the key; retrying it unchanged never helps.
 */
export class IdempotencyKeyInvalidException extends IdempotencyHttpException {
  constructor(headerName: string, reason: string) {
    super({
      type: problemType('invalid-key'),
      title: 'Invalid idempotency key',
      status: HttpStatus.BAD_REQUEST,
      detail: `The "${headerName}" header is invalid: ${reason}.`,
    });
  }
}
