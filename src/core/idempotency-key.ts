import { IdempotencyKeyInvalidException } from '../exceptions/idempotency-key-invalid.exception.js';
import type { IdempotencyKeyLocation } from '../exceptions/idempotency-key-missing.exception.js';
import type { ResolvedKeyValidation } from './executor.options.js';

/**
 * @internal Why `text` (a key, a scope) cannot identify a record in every
 * store, or `undefined` when it can. A string that is not well-formed
 * Unicode (a lone UTF-16 surrogate, `\ud800`) is written by PostgreSQL's
 * driver as U+FFFD, so two of them would share one record there: two
 * tenants, or two requests, one response. PostgreSQL refuses a NUL
 * character in text outright: every claim of it would fail (a 503 for ever).
 */
export function textProblem(text: string): string | undefined {
  if (!text.isWellFormed()) {
    return 'it is not well-formed Unicode (it has a lone surrogate)';
  }
  if (text.includes('\0')) {
    return 'it has a NUL character (U+0000), which PostgreSQL cannot store';
  }
  return undefined;
}

/**
 * @internal Longest key, in bytes of UTF-8, whatever `keyValidation`'s
 * `maxLength` (which counts UTF-16 code units, as JavaScript does): with
 * the longest scope and suffix, the record's primary key stays within what
 * PostgreSQL's index takes (2704 bytes), which a longer one would fail at
 * every claim (a 503 for ever).
 */
export const MAX_KEY_BYTES = 1024;

/** @internal Why `key` breaks the rules, or `undefined` when it is valid. */
export function keyProblem(
  key: string,
  rules: ResolvedKeyValidation,
): string | undefined {
  if (key.length < rules.minLength || key.length > rules.maxLength) {
    return `it must be ${rules.minLength} to ${rules.maxLength} characters long`;
  }
  // A global or sticky pattern's test() starts where its last match
  // ended (`lastIndex`): every key is checked from its start.
  rules.pattern.lastIndex = 0;
  if (!rules.pattern.test(key)) {
    return 'it has an invalid format';
  }
  const problem = textProblem(key);
  if (problem) {
    return problem;
  }
  const bytes = key.length > MAX_KEY_BYTES / 3 ? Buffer.byteLength(key) : 0;
  if (bytes > MAX_KEY_BYTES) {
    return `it is ${bytes} bytes long in UTF-8, more than the ${MAX_KEY_BYTES} a key may have`;
  }
  return rules.validate && !rules.validate(key)
    ? 'it has an invalid format'
    : undefined;
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
