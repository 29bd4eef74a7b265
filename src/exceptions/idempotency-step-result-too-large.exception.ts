import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/**
 * `500 Internal Server Error`: a step (`IdempotencyContext.step`) of this
 * request ran, but its result is larger than the store keeps (see the
 * step result limits of each store in the README). The step's effect
 * happened once and never runs again under this key: the store keeps a
 * mark that the step ran in place of its result, and the key stays bound
 * to the request until it expires. Every retry with the same key gets
 * this answer again, without the step running; a retry cannot help, a
 * new request needs a new key (and runs the step again). Keep a reference
 * to a large result (an id, a URL) as the step's result instead.
 *
 * A message is rejected with it (a redelivery can only meet it again), and
 * a BullMQ job fails without retries.
 */
export class IdempotencyStepResultTooLargeException extends IdempotencyHttpException {
  /**
   * @param step the step's name (kept out of the problem the client gets).
   * @param bytes the size of the result as the store would have kept it.
   * @param limitBytes the most the store keeps for it (kept out of the
   * problem: the key's other steps may leave less).
   */
  constructor(
    readonly step: string,
    readonly bytes: number,
    readonly limitBytes: number,
  ) {
    super({
      type: problemType('step-result-too-large'),
      title: 'Step result too large to keep',
      status: HttpStatus.INTERNAL_SERVER_ERROR,
      detail: `A step of this request ran, but its result (${bytes} bytes) is too large for the idempotency store to keep. The step does not run again under this idempotency key, so retrying with it cannot succeed.`,
    });
  }
}
