import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/**
 * `500 Internal Server Error`: a step (`IdempotencyContext.step`) of this
 * request ran, but its result is not a value JSON can hold (a `BigInt`, a
 * cycle such as an HTTP client's response object, a `toJSON` that
 * throws). The step's effect happened once and never runs again under
 * this key: the store keeps a mark that the step ran in place of its
 * result, and the key stays bound to the request until it expires. Every
 * retry with the same key gets this answer again, without the step
 * running; a retry cannot help, a new request needs a new key (and runs
 * the step again). Return a JSON value from the step (a `BigInt` as a
 * string, the fields of a response rather than the response).
 *
 * A message is rejected with it (a redelivery can only meet it again), and
 * a BullMQ job fails without retries.
 */
export class IdempotencyStepResultNotJsonException extends IdempotencyHttpException {
  /**
   * @param step the step's name (kept out of the problem the client gets).
   * @param reason why JSON could not hold the result, as `JSON.stringify`
   * said (kept out of the problem: it may name the application's classes).
   */
  constructor(
    readonly step: string,
    readonly reason: string,
  ) {
    super({
      type: problemType('step-result-not-json'),
      title: 'Step result not JSON',
      status: HttpStatus.INTERNAL_SERVER_ERROR,
      detail:
        'A step of this request ran, but its result is not a value JSON can hold, so the idempotency store cannot keep it. The step does not run again under this idempotency key, so retrying with it cannot succeed.',
    });
  }
}
