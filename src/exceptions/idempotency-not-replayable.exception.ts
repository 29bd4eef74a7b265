import { HttpStatus } from '@nestjs/common';
import { IdempotencyHttpException } from './idempotency-http.exception.js';

/**
 * `422 Unprocessable Content`: the request with this key was processed, but
 * its response could not be stored for replay (a streamed response, or a body
 * over `maxResponseSize`). Retrying with the same key never runs it again; a
 * new request needs a new key.
 */
export class IdempotencyNotReplayableException extends IdempotencyHttpException {
  constructor(key: string) {
    super({
      type: 'urn:idempotency:not-replayable',
      title: 'Response not replayable',
      status: HttpStatus.UNPROCESSABLE_ENTITY,
      detail:
        'The request with this idempotency key was already processed, and its response cannot be replayed. Use a new key for a new request.',
      key,
    });
  }
}
