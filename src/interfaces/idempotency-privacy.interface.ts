/**
 * Encryption at rest of what the module stores: the responses replayed to
 * duplicates (status aside: body and headers) and the results of steps.
 */
export interface IdempotencyEncryptionOptions {
  /**
   * The key ring: each key by its id, 32 bytes (AES-256), as a `Buffer` or
   * in base64. Every record names the id of the key it was sealed with, so
   * keys retired from writing stay here for as long as records sealed with
   * them may be read (the longest `ttl`), or until `reencrypt()` resealed
   * them. An id is 1 to 64 characters of `[A-Za-z0-9._-]`.
   * @example { '2026-01': process.env.IDEMPOTENCY_KEY_2026_01, '2025-07': process.env.IDEMPOTENCY_KEY_2025_07 }
   */
  keys: Record<string, Buffer | string>;
  /** The id, among `keys`, of the key new records are sealed with. */
  current: string;
  /**
   * Whether a record or step stored before encryption was on (not sealed)
   * is read as it is, for the time it takes to turn encryption on: deploy
   * with `readPlaintext: true`, reseal the old records (`npx
   * nestjs-idempotency reencrypt`) or let them expire (the longest `ttl`),
   * then deploy without it. Otherwise such a record is unreadable and its
   * duplicates get `503` until it expires. A sealed record is always
   * opened and checked: this never lets an altered or moved one through,
   * nor one whose key left the ring. A sealed value is told by its whole
   * shape (`IDS1`, a key id's length and a key id, room for the nonce and
   * the tag), so an old body or step result that merely begins as one does
   * (`IDS1-batch-1`, `idempotency-sealed:batch-1`) is read as it is.
   * @default false
   */
  readPlaintext?: boolean;
}

/**
 * A response about to be stored, as a redactor receives it and returns it:
 * its status, its headers (lower-cased names, those the replay options keep)
 * and its body's bytes. For a message, job, `run()` or GraphQL mutation the
 * body is the JSON of its result.
 */
export interface IdempotencyStoredResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | string[]>>;
  readonly body: Buffer;
}

/** What a redactor gives to store in place of the response: its headers and body. */
export interface IdempotencyRedactedResponse {
  readonly headers: Readonly<Record<string, string | string[]>>;
  /** A string is stored as its UTF-8 bytes. */
  readonly body: Buffer | string;
}

/**
 * Called with each response about to be stored (a success, or an error kept
 * by `storeErrors`), it returns what to store and replay to duplicates: drop
 * headers, mask fields of the body. The first caller's own answer is never
 * changed. It runs before the record is written, in the handler's
 * transaction with the PostgreSQL store; when it throws, nothing commits and
 * the client gets a 503 (an error response is then not stored, and the key
 * is released).
 * @example
 * (response) => ({
 *   headers: response.headers,
 *   body: JSON.stringify({ ...JSON.parse(response.body.toString()), cardNumber: undefined }),
 * })
 */
export type IdempotencyRedactor = (
  response: IdempotencyStoredResponse,
) => IdempotencyRedactedResponse | Promise<IdempotencyRedactedResponse>;
