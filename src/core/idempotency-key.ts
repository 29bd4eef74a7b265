import { IdempotencyKeyInvalidException } from '../exceptions/idempotency-key-invalid.exception.js';
import type { IdempotencyKeyLocation } from '../exceptions/idempotency-key-missing.exception.js';
import type { ResolvedKeyValidation } from './executor.options.js';

/** @internal Why `key` breaks the rules, or `undefined` when it is valid. */
export function keyProblem(
  key: string,
  rules: ResolvedKeyValidation,
): string | undefined {
  if (key.length < rules.minLength || key.length > rules.maxLength) {
    return `it must be ${rules.minLength} to ${rules.maxLength} characters long`;
  }
  if (!rules.pattern.test(key) || (rules.validate && !rules.validate(key))) {
    return 'it has an invalid format';
  }
  return undefined;
}

/**
 * @internal The key, once it follows the rules.
 * @param field where the key came from (a header, a field or an option's
 * name), for the message; `where` says which.
 * @throws IdempotencyKeyInvalidException otherwise.
 */
export function validKey(
  key: unknown,
  rules: ResolvedKeyValidation,
  field: string,
  where: IdempotencyKeyLocation = 'header',
): string {
  const problem =
    typeof key === 'string' ? keyProblem(key, rules) : 'it is not a string';
  if (problem) {
    throw new IdempotencyKeyInvalidException(field, problem, where);
  }
  return key as string;
}
