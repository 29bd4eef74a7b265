import { IDEMPOTENT_BODY_OMITTED_HEADER } from '../client/client.constants.js';

/**
 * Response headers that are never stored nor replayed: cookies, the date of
 * the original answer, and hop-by-hop headers that describe one connection.
 * The CORS headers (`Access-Control-*`) are not stored either.
 */
export const UNSAFE_REPLAY_HEADERS: readonly string[] = [
  'set-cookie',
  'date',
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'idempotent-replayed',
];

/**
 * @internal The headers never stored, lower-cased: {@link
 * UNSAFE_REPLAY_HEADERS} and `Idempotent-Body-Omitted`, which a replay sets
 * itself.
 */
export const NEVER_STORED_HEADERS: ReadonlySet<string> = new Set([
  ...UNSAFE_REPLAY_HEADERS,
  IDEMPOTENT_BODY_OMITTED_HEADER.toLowerCase(),
]);

/**
 * @internal Whether a response header (lower-cased) is never stored: one of
 * {@link NEVER_STORED_HEADERS}, or a CORS header (`Access-Control-*`), which
 * the CORS layer sets for each request from its `Origin`: the replay gets
 * its own, and the first request's would refuse a browser of another
 * origin.
 */
export function isNeverStored(name: string): boolean {
  return NEVER_STORED_HEADERS.has(name) || isCorsHeader(name);
}

/**
 * @internal Whether a response header (lower-cased) is a CORS header
 * (`Access-Control-*`): set by the CORS layer for each request from its
 * `Origin`, it answers the request, not the body it goes with.
 */
export function isCorsHeader(name: string): boolean {
  return name.startsWith('access-control-');
}

/**
 * @internal The headers a `redact` returned, as they are stored: lower-cased,
 * without those never stored ({@link isNeverStored}), and with the
 * response's own `Content-Type` and expiry header (`expiresHeader`) where
 * the redaction dropped them: both are always kept.
 */
export function storedRedactedHeaders(
  redacted: Readonly<Record<string, string | string[]>>,
  original: Readonly<Record<string, string | string[]>>,
  expiresHeader: string | undefined,
): Record<string, string | string[]> {
  const kept: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(redacted)) {
    const lower = name.toLowerCase();
    if (!isNeverStored(lower)) {
      kept[lower] = value;
    }
  }
  for (const name of ['content-type', expiresHeader]) {
    const value = name === undefined ? undefined : original[name];
    if (name !== undefined && value !== undefined && !(name in kept)) {
      kept[name] = value;
    }
  }
  return kept;
}
