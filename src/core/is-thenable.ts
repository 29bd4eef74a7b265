/**
 * @internal Whether `value` is a promise (or another thenable). A
 * resolver's result is awaited only then, so that a synchronous one costs
 * the request no turn of the microtask queue.
 */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}
