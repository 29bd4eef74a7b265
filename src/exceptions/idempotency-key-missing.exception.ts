import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/**
 * Where an idempotency key is looked for, as a refusal names it: a request's
 * header, a message's field, or an option (a BullMQ processor's `key`,
 * `run()`'s `key`).
 */
export type IdempotencyKeyLocation = 'header' | 'field' | 'option';

/** What the detail says is missing, by where the key is looked for. */
const MISSING: Record<IdempotencyKeyLocation, (name: string) => string> = {
  header: (name: string) => `This operation requires an "${name}" header.`,
  field: (name: string) => `This message requires an "${name}" field.`,
  option: (name: string) =>
    `The "${name}" option found no idempotency key for this operation.`,
};

/**
 * `400 Bad Request`: the route requires an idempotency key and the request
 * carries none. The client should add one and send the request again.
 */
export class IdempotencyKeyMissingException extends IdempotencyHttpException {
  /**
   * @param name the header (or the message's field, or the option) the key
   * is looked for in
   * @param where what `name` is: a request's `'header'` (the default), a
   * message's `'field'`, or the `'option'` whose resolver found no key (a
   * BullMQ processor's `key`)
   */
  constructor(name: string, where: IdempotencyKeyLocation = 'header') {
    super({
      type: problemType('missing-key'),
      title: 'Idempotency key missing',
      status: HttpStatus.BAD_REQUEST,
      detail: MISSING[where](name),
    });
  }
}
