import { HttpException } from '@nestjs/common';

/**
 * Body of every error answer of the module: an RFC 9457 problem detail,
 * sent as `application/problem+json`.
 */
export interface IdempotencyProblem {
  /**
   * URI that identifies the kind of problem: `urn:idempotency:<slug>`, or
   * `<problemTypeBaseUrl><slug>` when the module's `problemTypeBaseUrl` is
   * set (see {@link problemType}).
   */
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

/** What every problem type of the module starts with, by default. */
const URN_PREFIX = 'urn:idempotency:';

/**
 * The problem type of the module's problem `slug` (such as `key-reused`):
 * `urn:idempotency:<slug>` by default, or `<baseUrl><slug>` with the
 * module's `problemTypeBaseUrl`, which is used as given (end it with `/` or
 * `#`).
 *
 * @example
 * problemType('key-reused'); // 'urn:idempotency:key-reused'
 * problemType('key-reused', 'https://docs.example.com/errors/');
 * // 'https://docs.example.com/errors/key-reused'
 */
export function problemType(slug: string, baseUrl?: string): string {
  return `${baseUrl ?? URN_PREFIX}${slug}`;
}

/**
 * Base class of the HTTP errors the module answers with. Catch it (or one of
 * its subclasses) in an exception filter to map them to your own format.
 * Outside HTTP (`run()`, messages, jobs), its `message` is its problem's
 * `<title>: <detail>`.
 */
export abstract class IdempotencyHttpException extends HttpException {
  /** Headers sent with the answer besides `Content-Type`. */
  readonly headers: Readonly<Record<string, string>>;
  /**
   * The kind of problem, as the last part of its type (`key-reused`,
   * `request-in-progress`, ...): the same whatever `problemTypeBaseUrl`
   * makes of `type`, so that code can branch on it.
   */
  readonly slug: string | undefined;

  protected constructor(
    problem: IdempotencyProblem,
    headers: Record<string, string> = {},
  ) {
    super(problem, problem.status);
    // Nest would name the class: the problem says what happened.
    this.message = `${problem.title}: ${problem.detail}`;
    this.headers = headers;
    this.slug = problem.type.startsWith(URN_PREFIX)
      ? problem.type.slice(URN_PREFIX.length)
      : undefined;
  }

  /** The problem detail sent as the response body. */
  getProblem(): IdempotencyProblem {
    return this.getResponse() as IdempotencyProblem;
  }

  /**
   * @internal Points the problem's type at `baseUrl` (the module's
   * `problemTypeBaseUrl`) before the problem is answered; `undefined`
   * keeps the URN.
   */
  withTypeBase(baseUrl: string | undefined): this {
    if (baseUrl !== undefined && this.slug !== undefined) {
      this.getProblem().type = problemType(this.slug, baseUrl);
    }
    return this;
  }
}
