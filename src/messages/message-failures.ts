import { HttpException, Logger } from '@nestjs/common';
import type { Attempt } from '../core/attempt.js';
import type { ResolvedRouteOptions } from '../core/executor.options.js';
import { RETRY_LATER_STATUSES } from '../core/failures.js';
import type { IdempotencyExecutor } from '../core/idempotency.executor.js';
import { loadRequiredPeer } from '../core/optional-peer.js';
import { IdempotencyDownstreamRefusedException } from '../exceptions/idempotency-downstream-refused.exception.js';
import { IdempotencyDownstreamUnavailableException } from '../exceptions/idempotency-downstream-unavailable.exception.js';
import { IdempotencyHttpException } from '../exceptions/idempotency-http.exception.js';
import { IdempotencyNotReplayableException } from '../exceptions/idempotency-not-replayable.exception.js';
import { IdempotencyStepResultTooLargeException } from '../exceptions/idempotency-step-result-too-large.exception.js';
import { IdempotencyStepResultNotJsonException } from '../exceptions/idempotency-step-result-not-json.exception.js';
import type { MessageOutcome } from './message-transport.js';
import { messageOf } from '../core/error-message.js';

const logger = new Logger('Idempotency');

/**
 * Client errors that a redelivery of the same message may not raise again:
 * those that ask for a retry later, and a duplicate still executing (409).
 */
const RETRYABLE_CLIENT_STATUSES = new Set([...RETRY_LATER_STATUSES, 409]);

/**
 * @internal How a failed message is settled: rejected (dead-lettered, or
 * dropped when the queue has no dead-letter exchange) when a redelivery can
 * only fail the same way (the key of another message, a malformed key, or
 * a 4xx `HttpException` such as a `ValidationPipe` refusal); acknowledged
 * for a duplicate of a message processed already whose result was not
 * stored (refused, not failed); requeued otherwise (a database outage, a concurrent duplicate in reject mode, any
 * other error).
 * @param ran whether the message's handler ran: then a refusal as not
 * replayable is one it met (a nested `run()`'s) and threw, its writes
 * rolled back, a 4xx as any other, not the answer to a duplicate.
 */
export function failedOutcome(error: unknown, ran = false): MessageOutcome {
  if (error instanceof IdempotencyNotReplayableException && !ran) {
    // A duplicate of a message processed already, whose result was not
    // stored: done, not failed (never to a dead-letter queue, whose
    // reprocessing would run it again).
    return 'ack';
  }
  if (
    error instanceof IdempotencyStepResultTooLargeException ||
    error instanceof IdempotencyStepResultNotJsonException
  ) {
    // A step ran whose result cannot be kept: every redelivery meets the
    // same refusal (the step never runs again), as a 4xx would.
    return 'reject';
  }
  if (error instanceof HttpException) {
    const status = error.getStatus();
    return status >= 400 &&
      status < 500 &&
      !RETRYABLE_CLIENT_STATUSES.has(status)
      ? 'reject'
      : 'requeue';
  }
  return 'requeue';
}

/**
 * @internal Whether `error` is a failure of the handler (what it threw, or
 * what its outgoing call, `IdempotencyContext.fetch()`, threw in it: the
 * downstream's refusal or its silence), not a refusal of the module's
 * (the key, a duplicate, a lost transaction): counted for `maxAttempts`,
 * and logged as `failed`.
 */
export function isHandlerFailure(error: unknown): boolean {
  return (
    !(error instanceof IdempotencyHttpException) ||
    error instanceof IdempotencyDownstreamRefusedException ||
    error instanceof IdempotencyDownstreamUnavailableException
  );
}

/** @internal The message a failed attempt was of, for `deadLetter`. */
export interface FailedMessage {
  readonly pattern: string;
  readonly data: unknown;
  /** The transport's context, or the kafkajs payload. */
  readonly context: unknown;
}

/**
 * @internal What becomes of a failed message: `'dead-lettered'` once the
 * route's `deadLetter` took it (the handler's failures reached
 * `maxAttempts`, counted in the store, or a redelivery can only fail the
 * same way: a 4xx, a missing or malformed key, another message's key),
 * else how it is settled as failed. A count or a hand-over that fails
 * leaves the message to come back. A failure of the handler's is reported
 * as a `failed` event first.
 * @param attempt `undefined` when the message was refused before it had
 * one (its key).
 * @param ran whether the handler ran (see {@link failedOutcome}).
 */
export async function afterFailure(
  executor: IdempotencyExecutor,
  attempt: Attempt | undefined,
  options: ResolvedRouteOptions,
  error: unknown,
  message: FailedMessage,
  ran: boolean,
): Promise<MessageOutcome | 'dead-lettered'> {
  if (attempt && isHandlerFailure(error)) {
    // Transports do not log a failed event handler, nor kafkajs a failed
    // eachMessage: the module does.
    executor.emit('failed', attempt, { error });
  }
  const outcome = failedOutcome(error, ran);
  const { maxAttempts, deadLetter } = options;
  if (maxAttempts === undefined || !deadLetter) {
    return outcome;
  }
  // The module's own refusals are no failure of the handler (its outgoing
  // calls' are), and a keyless message has nothing to count by: only what
  // a redelivery repeats is handed over at once.
  const counted = attempt?.key !== undefined && isHandlerFailure(error);
  if (outcome === 'ack' || (!counted && outcome !== 'reject')) {
    return outcome;
  }
  let attempts = 0;
  let stage = 'counted';
  try {
    if (counted) {
      attempts = await executor.countFailure(attempt, options);
    }
    if (attempts < maxAttempts && outcome !== 'reject') {
      return outcome;
    }
    stage = 'handed to deadLetter';
    await deadLetter({
      scope: attempt?.scope,
      key: attempt?.key,
      pattern: message.pattern,
      data: message.data,
      error,
      attempts,
      context: message.context,
    });
  } catch (failure) {
    logger.warn(
      `A failed message of ${message.pattern} could not be ${stage}; it comes back: ${messageOf(failure)}`,
    );
    return 'requeue';
  }
  logger.warn(
    `A message of ${message.pattern} was handed to deadLetter after ${attempts} failed attempt(s): ${messageOf(error)}`,
  );
  if (counted) {
    // Published again once its cause is fixed, the message gets
    // `maxAttempts` attempts anew. Handed over already: a count left
    // behind only makes that message's next failure its last.
    await executor.forgetFailures(attempt).catch((failure: unknown) => {
      logger.warn(
        `The count of failed attempts of a dead-lettered message of ${message.pattern} could not be forgotten: ${messageOf(failure)}`,
      );
    });
  }
  return 'dead-lettered';
}

/**
 * @internal Logs a message refused for good that its broker cannot set
 * aside, and so is dropped (see `MessageTransport.dropsRefused`).
 */
export function logDropped(pattern: string, error: unknown): void {
  const status = error instanceof HttpException ? `${error.getStatus()}: ` : '';
  logger.error(
    `A message of ${pattern} was refused for good and dropped, its offset committed, not to hold up the rest of its partition (${status}${messageOf(error)}). Give the route a deadLetter to keep such messages.`,
  );
}

/**
 * @internal The module's refusals as an `RpcException` (what microservice
 * transports send back), with the problem details as its error.
 */
export async function toRpcException(error: unknown): Promise<unknown> {
  if (!(error instanceof IdempotencyHttpException)) {
    return error;
  }
  // Loaded here only: applications without microservices do not need it.
  const { RpcException } = await loadRequiredPeer(
    '@nestjs/microservices',
    () => import('@nestjs/microservices'),
    'Idempotent message handlers need @nestjs/microservices, which is not installed.',
  );
  return new RpcException({ ...error.getProblem() });
}
