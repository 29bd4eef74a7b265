/** The key of the object a step's JSON that `jsonb` refuses is kept in. */
const AS_TEXT = '$idempotency:json';

/**
 * What `jsonb` refuses in JSON text: the escape of U+0000, and an unpaired
 * surrogate (which `JSON.stringify` writes as an escape). A text with an
 * escaped backslash before `u0000` matches too, harmlessly (kept as text).
 */
const JSONB_REFUSES = /\\u0000|\\ud[89a-f][0-9a-f]{2}/i;

/**
 * @internal A step's result as the `jsonb` column keeps it: its JSON, or,
 * where `jsonb` would refuse it (a string with U+0000 or an unpaired
 * surrogate, which a handler may return), that JSON as the text of a
 * one-key object: saved, rather than refused after its effect happened
 * (its retry would run it again, and be refused again). A result shaped
 * as that object is kept as text too, so that reading never mistakes one
 * for the other.
 */
export function stepJson(result: unknown): string {
  const json = JSON.stringify(result ?? null);
  return JSONB_REFUSES.test(json) || asText(result) !== undefined
    ? JSON.stringify({ [AS_TEXT]: json })
    : json;
}

/** @internal A step's result as {@link stepJson} kept it. */
export function stepResult(stored: unknown): unknown {
  const text = asText(stored);
  return text === undefined ? stored : (JSON.parse(text) as unknown);
}

/** The JSON text of a value kept as text, or undefined for another value. */
function asText(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return undefined;
  }
  const text = (value as Record<string, unknown>)[AS_TEXT];
  return Object.keys(value).length === 1 && typeof text === 'string'
    ? text
    : undefined;
}
