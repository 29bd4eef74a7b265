/**
 * The configuration errors of the module's options, as the unit specs of
 * their resolution (src/idempotency.options.spec.ts,
 * src/idempotency.module-options.spec.ts) expect them.
 */
import { IdempotencyConfigurationError } from '../../src/exceptions/idempotency-configuration.error.js';
import type { IdempotencyModuleOptions } from '../../src/interfaces/idempotency-module-options.interface.js';
import { resolveModuleOptions } from '../../src/idempotency.module-options.js';

/** The error `resolve` throws; fails the test when it throws none or another. */
export function configurationError(resolve: () => unknown): Error {
  try {
    resolve();
  } catch (error) {
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as Error).name).toBe('IdempotencyConfigurationError');
    return error as Error;
  }
  throw new Error('expected an IdempotencyConfigurationError, got none');
}

/** The message of an IdempotencyConfigurationError with one solution. */
export function refusalMessage(problem: string, solution: string): string {
  return `${problem}\nPotential solutions:\n- ${solution}`;
}

/** The message of the error that `resolveModuleOptions(options)` throws. */
export function refusal(options: IdempotencyModuleOptions): string {
  return configurationError(() => resolveModuleOptions(options)).message;
}

/** Options the type system refuses, as a JavaScript caller may give them. */
export function untyped(
  options: Record<string, unknown>,
): IdempotencyModuleOptions {
  return options as IdempotencyModuleOptions;
}
