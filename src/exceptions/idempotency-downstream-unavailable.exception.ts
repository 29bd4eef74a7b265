import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/**
 * `503 Service Unavailable`: an outgoing call (`IdempotencyContext.fetch`)
 * got no final answer within its attempts or before the handler's deadline:
 * network errors, timeouts, 409, 429 or 5xx to the end. The downstream
 * service may have done it (a lost answer): the client's retry of this
 * request calls again with the same key, which the service answers once.
 * The request's key is released, nothing is stored, and the client is told
 * to retry after `Retry-After`.
 */
export class IdempotencyDownstreamUnavailableException extends IdempotencyHttpException {
  /**
   * @param step the step of the call.
   * @param attempts how many times it was sent.
   * @param lastStatus the status of the last answer; `undefined` when the
   *   last attempt got none (a network error, a timeout).
   * @param retryAfterSeconds the `Retry-After` the client gets (GraphQL's
   *   `retryAfter`).
   * @param cause the error of the last attempt, when it got no answer.
   */
  constructor(
    readonly step: string,
    readonly attempts: number,
    readonly lastStatus: number | undefined,
    readonly retryAfterSeconds: number,
    cause?: unknown,
  ) {
    super(
      {
        type: problemType('downstream-unavailable'),
        title: 'Downstream service unavailable',
        status: HttpStatus.SERVICE_UNAVAILABLE,
        detail:
          'A service this request depends on did not answer in time. Retry it with the same idempotency key: it takes effect exactly once.',
      },
      { 'Retry-After': String(retryAfterSeconds) },
    );
    if (cause !== undefined) {
      this.cause = cause;
    }
  }
}
