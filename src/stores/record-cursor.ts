import { IdempotencyAdminInputError } from '../exceptions/idempotency-admin.errors.js';

/**
 * @internal The opaque cursor of a page of records: where it ended (the
 * store's own position, such as the last scope and key), as base64url JSON.
 */
export function encodeCursor(position: readonly string[]): string {
  return Buffer.from(JSON.stringify(position)).toString('base64url');
}

/**
 * @internal The position a cursor of {@link encodeCursor} holds: `parts`
 * strings, as the store that made it writes its positions.
 * @throws IdempotencyAdminInputError when it is not one: not base64url
 * JSON of `parts` strings, or a string holding a NUL character or a lone
 * surrogate (refused on every store alike: PostgreSQL cannot hold a NUL in
 * text, and its driver writes U+FFFD in place of a lone surrogate).
 */
export function decodeCursor(cursor: string, parts: number): string[] {
  try {
    const position: unknown = JSON.parse(
      Buffer.from(cursor, 'base64url').toString('utf8'),
    );
    if (
      Array.isArray(position) &&
      position.length === parts &&
      position.every(
        (part) =>
          typeof part === 'string' &&
          !part.includes('\u0000') &&
          part.isWellFormed(),
      )
    ) {
      return position as string[];
    }
  } catch {
    // Not JSON: refused below.
  }
  throw new IdempotencyAdminInputError(
    `The cursor "${cursor}" is not one that a page of records returned.`,
  );
}
