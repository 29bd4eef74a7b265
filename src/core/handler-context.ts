import { AsyncLocalStorage } from 'node:async_hooks';
import type { OutgoingCall, OutgoingCallRecord } from './attempt-telemetry.js';
import type { HandlerTransaction } from '../interfaces/handler-transaction.interface.js';

/**
 * @internal What the code of a decorated handler runs with, through its
 * async calls: what identifies its request, its recovery points and its
 * transaction (see `IdempotencyContext`).
 */
export interface HandlerContext {
  readonly scope: string;
  /** `undefined` for a keyless request. */
  readonly key: string | undefined;
  /** Runs a recovery point of the request (see `IdempotencyContext.step`). */
  step<T>(name: string, fn: () => T | Promise<T>): Promise<T>;
  /** The key of a downstream call (see `IdempotencyContext.deriveKey`). */
  deriveKey(name: string): string;
  readonly transaction: HandlerTransaction;
  /** When the attempt's time is up (epoch ms): its outgoing calls end before. */
  readonly deadline: number;
  /** The `Retry-After` (seconds) of the attempt's 503s. */
  readonly retryAfter: number;
  /** Runs `fn`, an outgoing call of the handler, in its telemetry span. */
  call<T>(
    call: OutgoingCall,
    fn: (record: OutgoingCallRecord) => Promise<T>,
  ): Promise<T>;
}

/** @internal Carries the handler's context through its async calls. */
export const handlerContexts = new AsyncLocalStorage<HandlerContext>();
