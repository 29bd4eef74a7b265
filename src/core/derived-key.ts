import { hash } from 'node:crypto';

/** @internal What a downstream call's key is unique to. */
export interface DerivedKeyParts {
  readonly scope: string;
  readonly key: string;
  /** The fingerprint of the request. */
  readonly fingerprint: string;
  /** The key's generation, as its store's claim returned it. */
  readonly generation: string;
  /** The name of the outgoing call (the step's). */
  readonly name: string;
}

/** Tells the input of this derivation from any other hashed text. */
const DERIVATION = 'nestjs-idempotency/derived-key/v1';

/**
 * @internal The key a request sends downstream for its call `name`: a UUID
 * of version 8 (RFC 9562, for names of an application's own scheme) whose
 * 122 free bits are the first ones of the SHA-256 of scope, key, the
 * request's fingerprint, the key's generation and `name`. Thirty-six
 * characters, lower-case hexadecimal and hyphens, whatever the length of
 * its parts: what gateways that ask for a UUID, or cap their keys at 40 to
 * 255 characters, all take.
 */
export function derivedKey(parts: DerivedKeyParts): string {
  const digest = hash(
    'sha256',
    JSON.stringify([
      DERIVATION,
      parts.scope,
      parts.key,
      parts.fingerprint,
      parts.generation,
      parts.name,
    ]),
    'buffer',
  );
  digest[6] = (digest[6] & 0x0f) | 0x80;
  digest[8] = (digest[8] & 0x3f) | 0x80;
  const hex = digest.toString('hex', 0, 16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
