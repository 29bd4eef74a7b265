import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { isIsolationLevel } from '../idempotency.options.js';
import type { PostgresAdapterOptions } from '../interfaces/postgres-adapter.interface.js';

/**
 * @internal Checks the options every adapter of the PostgreSQL store takes
 * (`presence`, `isolationLevel`), as its constructor receives them.
 * @throws IdempotencyConfigurationError naming the adapter and the option.
 */
export function checkAdapterOptions(
  adapter: string,
  options: PostgresAdapterOptions,
): void {
  const { presence, isolationLevel } = options;
  if (
    presence !== undefined &&
    typeof presence !== 'boolean' &&
    !(
      typeof presence === 'object' &&
      presence !== null &&
      typeof presence.url === 'string' &&
      presence.url.length > 0
    )
  ) {
    throw new IdempotencyConfigurationError(
      `Invalid "presence" of ${adapter}: ${JSON.stringify(presence)}.`,
      'Give true, false or { url: string }.',
    );
  }
  if (isolationLevel !== undefined && !isIsolationLevel(isolationLevel)) {
    throw new IdempotencyConfigurationError(
      `Invalid "isolationLevel" of ${adapter}: ${JSON.stringify(isolationLevel)}.`,
      "Give 'READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ' or 'SERIALIZABLE'.",
    );
  }
}
