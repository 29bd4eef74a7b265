import type { IdempotencyTelemetryKeys } from '../interfaces/idempotency-module-options.interface.js';
import type { Attempt } from '../core/attempt.js';
import type { OutgoingCall } from '../core/attempt-telemetry.js';
import { keyHash } from '../core/log-key.js';

/** @internal Attributes of a span or a data point, as OpenTelemetry takes them. */
export type TelemetryAttributes = Record<string, string>;

/** @internal Names of the module's spans. */
export const SPAN_NAMES = {
  /** The parent of the others when no span is active (no instrumentation). */
  attempt: 'idempotency.attempt',
  claim: 'idempotency.claim',
  handler: 'idempotency.handler',
  commit: 'idempotency.commit',
  replay: 'idempotency.replay',
  /** An outgoing call of the handler (`IdempotencyContext.fetch`), retries included. */
  call: 'idempotency.call',
} as const;

/** @internal Names of the module's instruments. */
export const METRIC_NAMES = {
  requests: 'idempotency.requests',
  requestDuration: 'idempotency.request.duration',
  claimDuration: 'idempotency.claim.duration',
  commitDuration: 'idempotency.commit.duration',
} as const;

/** @internal Names of the module's attributes. */
export const ATTRIBUTES = {
  outcome: 'idempotency.outcome',
  claimResult: 'idempotency.claim.result',
  httpMethod: 'http.request.method',
  httpRoute: 'http.route',
  operationType: 'idempotency.operation.type',
  operationName: 'idempotency.operation.name',
  keyHash: 'idempotency.key.hash',
  key: 'idempotency.key',
  scope: 'idempotency.scope',
  step: 'idempotency.step',
  callResult: 'idempotency.call.result',
  urlFull: 'url.full',
  serverAddress: 'server.address',
  statusCode: 'http.response.status_code',
  resendCount: 'http.request.resend_count',
} as const;

/**
 * The methods the transports other than HTTP give their attempts (a
 * message, a `run()`, a GraphQL mutation, a BullMQ job): any other method is
 * an HTTP request's, RFC 9110's and PATCH as much as WebDAV's (`MOVE`,
 * `COPY`, `MKCOL`, ... on a decorated route).
 */
const OPERATION_METHODS = new Set(['MESSAGE', 'RUN', 'MUTATION', 'JOB']);

/**
 * @internal What an attempt is, in low-cardinality attributes (those of
 * metrics): the method and route template of an HTTP request; otherwise the
 * kind (`message`, `run`, `mutation`, `job`) and the pattern, run name,
 * mutation or queue.
 */
export function routeAttributes(attempt: Attempt): TelemetryAttributes {
  return OPERATION_METHODS.has(attempt.method)
    ? {
        [ATTRIBUTES.operationType]: attempt.method.toLowerCase(),
        [ATTRIBUTES.operationName]: attempt.path,
      }
    : {
        [ATTRIBUTES.httpMethod]: attempt.method,
        [ATTRIBUTES.httpRoute]: attempt.path,
      };
}

/**
 * @internal The attributes of an attempt's spans: its route, and its key as
 * `keys` says (a keyless attempt has none).
 */
export function spanAttributes(
  attempt: Attempt,
  keys: IdempotencyTelemetryKeys,
): TelemetryAttributes {
  const attributes = routeAttributes(attempt);
  if (attempt.key === undefined || keys === 'none') {
    return attributes;
  }
  if (keys === 'raw') {
    return {
      ...attributes,
      [ATTRIBUTES.key]: attempt.key,
      [ATTRIBUTES.scope]: attempt.scope,
    };
  }
  return { ...attributes, [ATTRIBUTES.keyHash]: keyHash(attempt.key) };
}

/**
 * @internal The attributes of an outgoing call's span: its step, method and
 * URL (without its query, which may carry secrets, nor credentials), and
 * the key it sends downstream as `keys` says.
 */
export function callAttributes(
  call: OutgoingCall,
  keys: IdempotencyTelemetryKeys,
): Record<string, string> {
  const { url } = call;
  const attributes: Record<string, string> = {
    [ATTRIBUTES.step]: call.step,
    [ATTRIBUTES.httpMethod]: call.method,
    [ATTRIBUTES.urlFull]: `${url.origin}${url.pathname}`,
    [ATTRIBUTES.serverAddress]: url.hostname,
  };
  if (keys === 'raw') {
    attributes[ATTRIBUTES.key] = call.key;
  } else if (keys === 'hash') {
    attributes[ATTRIBUTES.keyHash] = keyHash(call.key);
  }
  return attributes;
}
