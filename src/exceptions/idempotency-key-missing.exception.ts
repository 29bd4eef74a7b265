import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/**
 * `400 Bad Request`: the route requires an idempotency key and the request
 * carries none. The client should add one and send the request again.
 */
export class IdempotencyKeyMissingException extends IdempotencyHttpException {
  constructor(headerName: string) {
    super({
      type: problemType('missing-key'),
      title: 'Idempotency key missing',
      status: HttpStatus.BAD_REQUEST,
      detail: `This operation requires an "${headerName}" header.`,
    });
  }
}
