import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/**
 * The request (message, job, `run()`, GraphQL mutation) with this key was
 * processed, but its result could not be stored for replay (a result over
 * `maxResponseSize`). Retrying with the same key never runs it again; a new
 * request needs a new key. Its status is `422 Unprocessable Content`.
 *
 * A message is acknowledged with it (a duplicate event is dropped, never
 * dead-lettered), and a BullMQ job completes without a result instead.
 * Thrown by a message handler or a processor (met in a nested `run()`), it
 * is a 4xx that handler threw: its writes roll back, and the message is
 * rejected (handed to `deadLetter`), the job failed (`UnrecoverableError`).
 * An HTTP route never answers with it: a duplicate of an HTTP request whose
 * response was not stored (a stream, a body over `maxResponseSize`) gets the
 * original status with an empty body, `Idempotent-Replayed: true` (or the
 * module's `replayHeaderName`) and `Idempotent-Body-Omitted: true`.
 */
export class IdempotencyNotReplayableException extends IdempotencyHttpException {
  constructor(key: string) {
    super({
      type: problemType('not-replayable'),
      title: 'Response not replayable',
      status: HttpStatus.UNPROCESSABLE_ENTITY,
      detail:
        'The request with this idempotency key was already processed, and its response cannot be replayed. Use a new key for a new request.',
      key,
    });
  }
}
