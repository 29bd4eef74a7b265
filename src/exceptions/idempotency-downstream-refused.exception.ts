import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/** What a downstream service answered to an outgoing call. */
export interface IdempotencyDownstreamAnswer {
  /** Its status. */
  readonly status: number;
  /** Its headers, names lower-cased. */
  readonly headers: Readonly<Record<string, string>>;
  /** Its body, as text. */
  readonly body: string;
}

/**
 * `502 Bad Gateway`: an outgoing call (`IdempotencyContext.fetch`) got an
 * answer that another try with the same key cannot change: a 4xx other
 * than 409 and 429, a 501 or 505, or a replayed error (`Idempotent-Replayed:
 * true`). Nothing of it is stored: a retry of the request calls again, with
 * the same key. Catch it in the handler to answer otherwise (a `402` for a
 * declined card); the downstream answer is in `downstream`, and stays out of
 * the problem the client gets.
 */
export class IdempotencyDownstreamRefusedException extends IdempotencyHttpException {
  /**
   * @param step the step of the call.
   * @param downstream what the downstream service answered.
   */
  constructor(
    readonly step: string,
    readonly downstream: IdempotencyDownstreamAnswer,
  ) {
    super({
      type: problemType('downstream-refused'),
      title: 'Downstream service refused the request',
      status: HttpStatus.BAD_GATEWAY,
      detail: `A service this request depends on answered ${downstream.status}.`,
    });
  }
}
