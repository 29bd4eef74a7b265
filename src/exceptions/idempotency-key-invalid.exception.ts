import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';
import type { IdempotencyKeyLocation } from './idempotency-key-missing.exception.js';

/**
 * `400 Bad Request`: the idempotency key is malformed, empty, too long or
 * repeated. The client should fix the key; retrying it unchanged never helps.
 */
export class IdempotencyKeyInvalidException extends IdempotencyHttpException {
  /**
   * @param name the header (or the message's field, or the option) the key
   * came from
   * @param reason what is wrong with it
   * @param where what `name` is: a request's `'header'` (the default), a
   * message's `'field'`, or the `'option'` that gave the key (a BullMQ
   * processor's `key`, `run()`'s `key`)
   */
  constructor(
    name: string,
    reason: string,
    where: IdempotencyKeyLocation = 'header',
  ) {
    super({
      type: problemType('invalid-key'),
      title: 'Invalid idempotency key',
      status: HttpStatus.BAD_REQUEST,
      detail:
        where === 'option'
          ? `The key of the "${name}" option is invalid: ${reason}.`
          : `The "${name}" ${where} is invalid: ${reason}.`,
    });
  }
}
