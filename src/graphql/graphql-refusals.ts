import {
  IdempotencyHttpException,
  problemType,
} from '../exceptions/idempotency-http.exception.js';
import { loadRequiredPeer } from '../core/optional-peer.js';
import { GraphqlRefusalError } from './graphql-refusal.error.js';

/**
 * The `extensions.code` of each refusal of the module to a GraphQL mutation,
 * by the problem type it stands for (its URN, whatever `problemTypeBaseUrl`
 * makes of `extensions.type`). Stable: clients may branch on them.
 *
 * - `IDEMPOTENCY_KEY_MISSING` (status 400): the mutation requires an
 *   `Idempotency-Key` header and the request carries none.
 * - `IDEMPOTENCY_KEY_INVALID` (400): the key is malformed, empty, too long
 *   or repeated.
 * - `IDEMPOTENCY_CONFLICT` (409, with `retryAfter`): the same mutation with
 *   the same key is still running.
 * - `IDEMPOTENCY_KEY_REUSED` (422): the key was used for another mutation or
 *   other arguments.
 * - `IDEMPOTENCY_NOT_REPLAYABLE` (422): the mutation ran, and its result was
 *   too large to store (`maxResponseSize`).
 * - `IDEMPOTENCY_UNAVAILABLE` (503, with `retryAfter`): nothing took effect
 *   (the database was unreachable, the transaction timed out or could not
 *   commit); retry with the same key.
 * - `IDEMPOTENCY_DOWNSTREAM_REFUSED` (502): a service the mutation calls
 *   through `IdempotencyContext.fetch()` gave a final error answer.
 * - `IDEMPOTENCY_DOWNSTREAM_UNAVAILABLE` (503, with `retryAfter`): such a
 *   service gave no final answer in time; retry with the same key.
 * - `IDEMPOTENCY_STEP_RESULT_TOO_LARGE` (500): a step of the mutation ran,
 *   and its result was too large for the store to keep; a retry with the
 *   same key gets the same answer, the step never run again.
 * - `IDEMPOTENCY_STEP_RESULT_NOT_JSON` (500): a step of the mutation ran,
 *   and its result was not a value JSON can hold; a retry with the same
 *   key gets the same answer, the step never run again.
 */
export const IDEMPOTENCY_GRAPHQL_CODES = {
  'urn:idempotency:missing-key': 'IDEMPOTENCY_KEY_MISSING',
  'urn:idempotency:invalid-key': 'IDEMPOTENCY_KEY_INVALID',
  'urn:idempotency:request-in-progress': 'IDEMPOTENCY_CONFLICT',
  'urn:idempotency:key-reused': 'IDEMPOTENCY_KEY_REUSED',
  'urn:idempotency:not-replayable': 'IDEMPOTENCY_NOT_REPLAYABLE',
  'urn:idempotency:unavailable': 'IDEMPOTENCY_UNAVAILABLE',
  'urn:idempotency:downstream-refused': 'IDEMPOTENCY_DOWNSTREAM_REFUSED',
  'urn:idempotency:downstream-unavailable':
    'IDEMPOTENCY_DOWNSTREAM_UNAVAILABLE',
  'urn:idempotency:step-result-too-large': 'IDEMPOTENCY_STEP_RESULT_TOO_LARGE',
  'urn:idempotency:step-result-not-json': 'IDEMPOTENCY_STEP_RESULT_NOT_JSON',
} as const;

/**
 * @internal One of the module's refusals as the error a mutation throws,
 * which the client gets as a `GraphQLError`: its detail as the message, and
 * as `extensions` the `code`, the HTTP `status` REST would answer with,
 * `retryAfter` (seconds) where REST sends `Retry-After`, and the problem
 * details (`type`, `title`, `detail`, `key`; the type under
 * `problemTypeBaseUrl` when it is given). A 4xx is a
 * {@link GraphqlRefusalError}, which Nest does not log; a 5xx a
 * `GraphQLError`, which Nest logs at ERROR as it does the resolvers' own
 * errors. Other errors are returned as they are.
 */
export async function toGraphqlError(
  error: unknown,
  problemTypeBaseUrl?: string,
): Promise<unknown> {
  if (!(error instanceof IdempotencyHttpException)) {
    return error;
  }
  const { status, ...problem } = error
    .withTypeBase(problemTypeBaseUrl)
    .getProblem();
  const retryAfter = error.headers['Retry-After'];
  const extensions = {
    // By the problem's URN: the type may point at the documentation.
    code:
      IDEMPOTENCY_GRAPHQL_CODES[
        problemType(error.slug ?? '') as keyof typeof IDEMPOTENCY_GRAPHQL_CODES
      ] ?? 'IDEMPOTENCY_ERROR',
    status,
    ...(retryAfter === undefined ? {} : { retryAfter: Number(retryAfter) }),
    ...problem,
  };
  // The client's mistake is not logged as a server error; a 503 still is.
  if (status < 500) {
    return new GraphqlRefusalError(problem.detail, extensions);
  }
  // Loaded here only: the peer of every GraphQL driver, needed by no other
  // application.
  const { GraphQLError } = await loadRequiredPeer(
    'graphql',
    () => import('graphql'),
    'Idempotent GraphQL mutations need graphql, which is not installed.',
  );
  return new GraphQLError(problem.detail, { extensions });
}
