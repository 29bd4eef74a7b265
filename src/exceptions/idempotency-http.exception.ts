import { HttpException } from '@nestjs/common';

/**
 * Body of every error answer of the module: an RFC 9457 problem detail,
 * sent as `application/problem+json`.
 */
export interface IdempotencyProblem {
  /** URI that identifies the kind of problem. */
  type: string;
  /** Short, human-readable summary of the kind of problem. */
  title: string;
  /** HTTP status code. */
  status: number;
  /** Explanation of this occurrence, safe to show to the client. */
  detail: string;
  /** The idempotency key of the request, where it is safe to echo it. */
  key?: string;
}

/**
 * Base class of the HTTP errors the module answers with. Catch it (or one of
 * its subclasses) in an exception filter to map them to your own format.
 */
export abstract class IdempotencyHttpException extends HttpException {
  /** Headers sent with the answer besides `Content-Type`. */
  readonly headers: Readonly<Record<string, string>>;

  protected constructor(
    problem: IdempotencyProblem,
    headers: Record<string, string> = {},
  ) {
    super(problem, problem.status);
    this.headers = headers;
  }

  /** The problem detail sent as the response body. */
  getProblem(): IdempotencyProblem {
    return this.getResponse() as IdempotencyProblem;
  }
}
