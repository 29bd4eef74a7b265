import { HttpStatus, Inject, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host.js';
import { IDEMPOTENT_METADATA } from '../idempotency.constants.js';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from '../idempotency.tokens.js';
import {
  resolveRouteOptions,
  type ResolvedIdempotencyOptions,
} from '../idempotency.options.js';
import type { ResolvedRouteOptions } from '../core/executor.options.js';
import type {
  IdempotencyScopeResolver,
  IdempotentOptions,
} from '../interfaces/idempotency-options.interface.js';
import { IdempotencyHttpException } from '../exceptions/idempotency-http.exception.js';
import { IdempotencyNotReplayableException } from '../exceptions/idempotency-not-replayable.exception.js';
import { IdempotencyStepResultTooLargeException } from '../exceptions/idempotency-step-result-too-large.exception.js';
import { IdempotencyStepResultNotJsonException } from '../exceptions/idempotency-step-result-not-json.exception.js';
import { newAttempt, type Attempt } from '../core/attempt.js';
import { IdempotencyExecutor } from '../core/idempotency.executor.js';
import { loadRequiredPeer } from '../core/optional-peer.js';

/**
 * What `ExecutionContext.getType()` says inside the `key`, `scope` and
 * `fingerprint` resolvers of a BullMQ processor.
 */
const BULLMQ_CONTEXT_TYPE = 'bullmq';

/**
 * @internal The fields of a BullMQ `Job` the module reads. Typed here rather
 * than imported: `bullmq` is an optional peer dependency.
 */
export interface QueueJob {
  readonly id?: string;
  /** When the job was added (epoch ms): kept by every retry of it. */
  readonly timestamp?: number;
  readonly name: string;
  readonly queueName: string;
  /**
   * `<prefix>:<queueName>`, the queue's identity in Redis: the same queue
   * name under another BullMQ `prefix` is another queue.
   */
  readonly queueQualifiedName?: string;
  readonly data: unknown;
}

/**
 * @internal A `process(job, token?, signal?)` method of a processor (BullMQ
 * passes its abort signal as a third argument to a method that declares
 * one).
 */
export type ProcessMethod = (
  this: object,
  job: QueueJob,
  token?: string,
  ...rest: unknown[]
) => Promise<unknown>;

/** @internal A decorated processor class and its `process` method. */
export interface DecoratedProcessor {
  readonly type: abstract new (...args: never[]) => unknown;
  /** The method as it carries the metadata (the module's wrapper). */
  readonly handler: ProcessMethod;
}

/**
 * The key of a job by default, `<queueName>:<jobId>`: a job id the
 * producer set names its logical job. An id of BullMQ's own, a number from
 * the queue's counter, is given again once that counter starts over (the
 * queue obliterated, its Redis flushed or failed over without
 * persistence), to another job: its key also has the job's creation time,
 * `<queueName>:<jobId>@<timestamp>`, which every retry of the job keeps.
 * (BullMQ refuses a `jobId` that is an integer.)
 */
function defaultJobKey(job: QueueJob): string {
  const key = `${job.queueName}:${job.id}`;
  const id = job.id ?? '';
  // BullMQ's own test of an integer id (a custom one may be zero-padded).
  return job.timestamp !== undefined && String(Number.parseInt(id, 10)) === id
    ? `${key}@${job.timestamp}`
    : key;
}

/** BullMQ's `prefix` when the queue's options set none. */
const DEFAULT_PREFIX = 'bull';

/**
 * The scope of a job by default: one per queue, `bullmq:<queueName>` under
 * BullMQ's default prefix (`bull`), else `bullmq:<prefix>:<queueName>`.
 * A queue name under two prefixes is two queues (two tenants, two
 * applications on one Redis): one scope would replay one's job for the
 * other's. The default prefix keeps the scope without it, which the records
 * of earlier versions have; a queue name has no `:`, so neither form can
 * stand for another queue's.
 */
const queueScope: IdempotencyScopeResolver = (context) => {
  const job = context.getArgByIndex<QueueJob>(0);
  const qualified = job.queueQualifiedName;
  return qualified === undefined ||
    qualified === `${DEFAULT_PREFIX}:${job.queueName}`
    ? `bullmq:${job.queueName}`
    : `bullmq:${qualified}`;
};

/**
 * The module's refusals as a job fails with them, each with the reason
 * `<title>: <detail>` of its problem, their message (BullMQ keeps an error's
 * message as the job's `failedReason`). Refusals that a retry of the same
 * job can only meet again (400, 422, and the 500 of a step whose result
 * was too large to keep): BullMQ fails such a job at once
 * (`UnrecoverableError`) instead of retrying it. A 409 (a duplicate
 * running) and a 503 (the database unreachable, a deadline passed) are
 * thrown themselves, for the `instanceof` of the worker's `failed`
 * listeners, and BullMQ retries the job by its `attempts` and `backoff`.
 */
async function toJobError(error: unknown): Promise<unknown> {
  if (!(error instanceof IdempotencyHttpException)) {
    return error;
  }
  // A step whose result could not be kept fails every retry the same way.
  if (
    error.getStatus() === HttpStatus.CONFLICT ||
    (error.getStatus() >= 500 &&
      !(error instanceof IdempotencyStepResultTooLargeException) &&
      !(error instanceof IdempotencyStepResultNotJsonException))
  ) {
    return error;
  }
  // Loaded here only: applications without BullMQ do not need it.
  const { UnrecoverableError } = await loadRequiredPeer(
    'bullmq',
    () => import('bullmq'),
    'Idempotent BullMQ processors need bullmq, which is not installed.',
  );
  const unrecoverable = new UnrecoverableError(error.message);
  unrecoverable.cause = error;
  return unrecoverable;
}

/**
 * @internal `@Idempotent()` on the `process(job, token?)` method of a
 * `@nestjs/bullmq` processor: the same shared transaction as for HTTP; the
 * processor's return value is stored with its writes, and a duplicate job
 * (the same queue, under the same prefix, and job id by default) gets it
 * back without running.
 */
@Injectable()
export class IdempotencyJobs {
  /** The options of each processor class, resolved on its first job. */
  private readonly processors = new WeakMap<object, ResolvedRouteOptions>();

  constructor(
    private readonly executor: IdempotencyExecutor,
    private readonly reflector: Reflector,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly moduleOptions: ResolvedIdempotencyOptions,
  ) {}

  /**
   * Processes `job` once per key: the stored result for a duplicate, else
   * `run`'s, in a transaction that commits the record with its writes.
   */
  async execute(
    processor: DecoratedProcessor,
    job: QueueJob,
    token: string | undefined,
    run: () => Promise<unknown>,
  ): Promise<unknown> {
    const options = this.options(processor);
    const context = new ExecutionContextHost(
      [job, token],
      processor.type as never,
      processor.handler,
    );
    context.setType(BULLMQ_CONTEXT_TYPE);
    let attempt: Attempt;
    try {
      const key: unknown = options.key
        ? await options.key(context)
        : defaultJobKey(job);
      attempt = await newAttempt(context, options, {
        key,
        keyField: 'key',
        keyLocation: 'option',
        parts: {
          method: 'JOB',
          route: job.queueName,
          params: { name: job.name },
          query: [],
          body: job.data,
        },
      });
    } catch (error) {
      throw await toJobError(error);
    }
    let ran = false;
    try {
      const { result } = await this.executor.execute(attempt, options, () => {
        ran = true;
        return run();
      });
      return result;
    } catch (error) {
      if (error instanceof IdempotencyNotReplayableException && !ran) {
        // A job processed already, whose result was not stored (over
        // maxResponseSize): done, without its result; failed, it would be
        // retried or reprocessed as if it had not run. (One that `process`
        // met, in a nested `run()`, failed it: its writes rolled back.)
        return undefined;
      }
      throw await toJobError(error);
    }
  }

  /**
   * The processor's options over the module's, with the defaults of a job:
   * the module-wide `key`, `scope` and `fingerprint` describe HTTP requests
   * and messages, so a processor takes only its own `@Idempotent()`'s.
   */
  private options(processor: DecoratedProcessor): ResolvedRouteOptions {
    let options = this.processors.get(processor.type);
    if (!options) {
      const own =
        this.reflector.getAllAndOverride<IdempotentOptions | undefined>(
          IDEMPOTENT_METADATA,
          [processor.handler, processor.type],
        ) ?? {};
      options = {
        ...resolveRouteOptions(this.moduleOptions, own),
        key: own.key,
        scope: own.scope ?? queueScope,
        fingerprint: own.fingerprint ?? {},
      };
      this.processors.set(processor.type, options);
    }
    return options;
  }
}
