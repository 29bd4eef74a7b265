import type {
  IdempotencyConcurrencyMode,
  IdempotencyErrorPolicy,
  IdempotencyFingerprintFields,
  IdempotencyFingerprintFunction,
  IdempotencyIsolationLevel,
  IdempotencyKeyResolver,
  IdempotencyScopeResolver,
} from '../interfaces/idempotency-options.interface.js';
import type { IdempotencyDeadLetterHandler } from '../interfaces/idempotency-dead-letter.interface.js';
import type { IdempotencyTelemetryKeys } from '../interfaces/idempotency-module-options.interface.js';
import type { IdempotencyRedactor } from '../interfaces/idempotency-privacy.interface.js';
import type { RecordSealing } from './record-sealing.js';

/**
 * @internal Options of one route, with every default applied: what the
 * request sequence runs an attempt by. The module's options resolve them
 * (`idempotency.options.ts`).
 */
export interface ResolvedRouteOptions {
  readonly ttlMs: number;
  readonly concurrency: IdempotencyConcurrencyMode;
  readonly waitTimeoutMs: number;
  readonly transactionTimeoutMs: number;
  readonly scope: IdempotencyScopeResolver;
  readonly required: boolean;
  readonly retryAfter: number;
  readonly key: IdempotencyKeyResolver | undefined;
  readonly keyValidation: ResolvedKeyValidation;
  readonly fingerprint:
    IdempotencyFingerprintFields | IdempotencyFingerprintFunction;
  readonly storeErrors: IdempotencyErrorPolicy | undefined;
  readonly maxResponseSize: number;
  /** Lower-cased names; `undefined` allows every header. */
  readonly replayAllow: ReadonlySet<string> | undefined;
  readonly replayDeny: ReadonlySet<string>;
  readonly acknowledge: boolean;
  /** `undefined`: unbounded (no dead-letter path). */
  readonly maxAttempts: number | undefined;
  readonly deadLetter: IdempotencyDeadLetterHandler | undefined;
  /** `undefined`: the DataSource's or the server's default. */
  readonly isolationLevel: IdempotencyIsolationLevel | undefined;
  /** `undefined`: responses are stored as they were sent. */
  readonly redact: IdempotencyRedactor | undefined;
  /** The expiry header's name, lower-cased; `undefined` when off. */
  readonly expiresHeader: string | undefined;
}

/** @internal The key rules of a route, with every default applied. */
export interface ResolvedKeyValidation {
  readonly minLength: number;
  readonly maxLength: number;
  readonly pattern: RegExp;
  readonly validate: ((key: string) => boolean) | undefined;
}

/**
 * @internal What the executor needs of the module's options besides a
 * route's: the port the module's resolved options fill (provided under
 * this token by the module's providers).
 *
 * The interface doubles as its injection token.
 */
export interface ExecutorOptions {
  /** How long a claim lasts unless renewed (ms). */
  readonly leaseMs: number;
  /** Telemetry's options (`false` when off): how log lines show keys. */
  readonly telemetry: false | { readonly keys: IdempotencyTelemetryKeys };
  /** How stored records are sealed (`encryption`); `undefined`: in the clear. */
  readonly sealing: RecordSealing | undefined;
}

/** @internal Injection token of the {@link ExecutorOptions}. */
export const ExecutorOptions = Symbol('ExecutorOptions');
