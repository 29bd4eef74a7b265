import { Inject, Injectable, Logger } from '@nestjs/common';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from './idempotency.tokens.js';
import type { ResolvedIdempotencyOptions } from './idempotency.options.js';
import type { ExecutorEvents } from './core/executor.events.js';
import { LogKeys } from './core/log-key.js';
import type {
  IdempotencyEvent,
  IdempotencyEventType,
} from './interfaces/idempotency-event.interface.js';
import { messageOf } from './core/error-message.js';
import { isThenable } from './core/is-thenable.js';

/**
 * Log level of each event. Per-request outcomes are debug-level, the
 * refusals a client caused included (a duplicate, a reused key): as many as
 * the requests, counted by the metrics, and none of them the server's fault.
 */
const LEVELS: Record<IdempotencyEventType, 'debug' | 'log' | 'warn'> = {
  executed: 'debug',
  replayed: 'debug',
  conflict: 'debug',
  mismatch: 'debug',
  'not-replayable': 'debug',
  'stored-error': 'debug',
  gc: 'log',
  timeout: 'warn',
  failed: 'warn',
  'lease-lost': 'warn',
  abandoned: 'warn',
};

/**
 * @internal Logs the module's events as `key=value` lines (logfmt) under the
 * `Idempotency` context, their key as telemetry's `keys` option says (see
 * {@link LogKeys}), and hands them, key and all, to the `onEvent` option:
 * the core's {@link ExecutorEvents}.
 */
@Injectable()
export class IdempotencyEvents implements ExecutorEvents {
  private readonly logger = new Logger('Idempotency');
  /** How the lines show keys. */
  private readonly keys: LogKeys;

  constructor(
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {
    this.keys = new LogKeys(options);
  }

  /**
   * Whether an attempt's event of `type` goes anywhere (the `onEvent`
   * option, or a log level enabled for it): an event nobody takes is not
   * built. (The collector's `gc` events, whose level depends on what they
   * removed, are always emitted.)
   */
  wanted(type: IdempotencyEventType): boolean {
    return (
      this.options.onEvent !== undefined || Logger.isLevelEnabled(LEVELS[type])
    );
  }

  emit(event: IdempotencyEvent): void {
    const level =
      event.type === 'gc' && event.removed === 0 ? 'debug' : LEVELS[event.type];
    // A line per request costs time: built only when the level is logged.
    if (Logger.isLevelEnabled(level)) {
      this.logger[level](logfmt(event, this.keys));
    }
    if (this.options.onEvent) {
      const threw = (error: unknown) =>
        this.logger.warn(`onEvent threw: ${messageOf(error)}`);
      try {
        // An async listener's rejection is its throw: logged, never left
        // unhandled (which would end the process).
        const returned: unknown = this.options.onEvent(event);
        if (isThenable(returned)) {
          returned.then(undefined, threw);
        }
      } catch (error) {
        threw(error);
      }
    }
  }
}

/** The event as `key=value` pairs (logfmt), its key as `keys` shows it. */
function logfmt(event: IdempotencyEvent, keys: LogKeys): string {
  return [
    `event=${event.type}`,
    event.method && `method=${event.method}`,
    event.path && `path=${JSON.stringify(event.path)}`,
    event.status !== undefined && `status=${event.status}`,
    ...keys.fields(event.scope, event.key),
    event.removed !== undefined && `removed=${event.removed}`,
    // Their names only: a step's result (a charge, a customer) is what
    // encryption keeps unread at rest, and no log's business; `onEvent`
    // gets it.
    event.steps !== undefined &&
      `steps=${JSON.stringify(event.steps.map(({ step }) => step))}`,
    event.durationMs !== undefined && `duration_ms=${event.durationMs}`,
    event.error !== undefined &&
      `error=${JSON.stringify(messageOf(event.error))}`,
  ]
    .filter(Boolean)
    .join(' ');
}
