import type {
  IdempotencyEvent,
  IdempotencyEventType,
} from '../interfaces/idempotency-event.interface.js';

/**
 * @internal Where the request sequence sends the events of its attempts:
 * the module's logs and its `onEvent` option (`IdempotencyEvents`
 * implements it).
 *
 * The interface doubles as its injection token.
 */
export interface ExecutorEvents {
  /** Whether an event of `type` goes anywhere: one nobody takes is not built. */
  wanted(type: IdempotencyEventType): boolean;
  emit(event: IdempotencyEvent): void;
}

/** @internal Injection token of the {@link ExecutorEvents}. */
export const ExecutorEvents = Symbol('ExecutorEvents');
