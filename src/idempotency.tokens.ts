/**
 * @internal Injection token of the resolved module options (defaults merged).
 */
export const IDEMPOTENCY_RESOLVED_OPTIONS = Symbol(
  'IDEMPOTENCY_RESOLVED_OPTIONS',
);
