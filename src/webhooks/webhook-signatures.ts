import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Whether `signature` is the HMAC-SHA256 of `content` under `key`, written
 * in `encoding`, compared in constant time (`crypto.timingSafeEqual`). A
 * missing or malformed signature is no match.
 *
 * @param key the secret, as a string (used as its UTF-8 bytes) or bytes
 * @param content the signed bytes (the raw body, or what the provider signs)
 * @param signature the signature as the delivery carries it, without prefix
 * @param encoding how the signature is written: `'hex'` (GitHub, Stripe) or
 * `'base64'` (Standard Webhooks)
 *
 * @example
 * hmacSha256Matches(secret, request.rawBody, request.header('x-signature'), 'hex')
 */
export function hmacSha256Matches(
  key: string | Buffer,
  content: string | Buffer,
  signature: string | undefined,
  encoding: 'hex' | 'base64',
): boolean {
  if (signature === undefined || signature.length === 0) {
    return false;
  }
  // Exactly the digest's 32 bytes, as their one encoding writes them (hex
  // in either case; base64 with or without its padding): Node.js decodes
  // leniently, dropping a trailing nibble, padding or bits, which would
  // let other texts of a signature match.
  const pattern =
    encoding === 'hex' ? /^[0-9a-fA-F]{64}$/ : /^[A-Za-z0-9+/]{43}=?$/;
  if (!pattern.test(signature)) {
    return false;
  }
  const given = Buffer.from(signature, encoding);
  if (
    encoding === 'base64' &&
    given.toString('base64') !== signature.padEnd(44, '=')
  ) {
    return false;
  }
  const expected = createHmac('sha256', key).update(content).digest();
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/**
 * @internal The fields of a comma-separated `name=value` header (Stripe's
 * `t=...,v1=...,v1=...`): every value of each name, in order.
 */
export function headerFields(value: string | undefined): Map<string, string[]> {
  const fields = new Map<string, string[]>();
  for (const part of (value ?? '').split(',')) {
    const at = part.indexOf('=');
    if (at > 0) {
      const name = part.slice(0, at).trim();
      fields.set(name, [
        ...(fields.get(name) ?? []),
        part.slice(at + 1).trim(),
      ]);
    }
  }
  return fields;
}

/** @internal A whole number of seconds written in decimal, or `undefined`. */
export function epochSeconds(value: string | undefined): number | undefined {
  return value !== undefined && /^\d{1,12}$/.test(value)
    ? Number(value)
    : undefined;
}
