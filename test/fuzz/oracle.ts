/**
 * What the fuzzed application must answer, computed from the request alone:
 * an independent model of HTTP header parsing (Node's llhttp, strict mode),
 * of the documented key rules (README, "Keys") and of the fingerprint
 * (README, "Fingerprint"). It deliberately does not import the library.
 */
import type { Platform } from '../utils/test-app.js';

/** How the key header line is written on the wire. */
export type Framing =
  | 'normal' // `Idempotency-Key: value`
  | 'no-space' // `Idempotency-Key:value`
  | 'tab' // `Idempotency-Key:\tvalue`
  | 'space-before-colon' // `Idempotency-Key : value` (invalid HTTP)
  | 'obs-fold'; // `Idempotency-Key: va\r\n lue` (obsolete line folding, refused)

/** One key header line as sent: the value is written as UTF-8. */
export interface KeyHeader {
  readonly name: string;
  readonly value: string;
  readonly framing: Framing;
}

/** How the server must understand the key header(s) of a request. */
export type KeyReading =
  /** The bytes are not valid HTTP: the server answers 400 or just closes. */
  | { readonly kind: 'broken'; readonly reason: string }
  | { readonly kind: 'missing' }
  | { readonly kind: 'invalid'; readonly reason: string }
  | { readonly kind: 'valid'; readonly key: string };

/** The line (without CRLF) of a key header, as bytes. */
export function keyHeaderLine(header: KeyHeader): Buffer {
  const value = Buffer.from(header.value, 'utf8');
  switch (header.framing) {
    case 'normal':
      return Buffer.concat([Buffer.from(`${header.name}: `), value]);
    case 'no-space':
      return Buffer.concat([Buffer.from(`${header.name}:`), value]);
    case 'tab':
      return Buffer.concat([Buffer.from(`${header.name}:\t`), value]);
    case 'space-before-colon':
      return Buffer.concat([Buffer.from(`${header.name} : `), value]);
    case 'obs-fold': {
      const half = Math.floor(value.length / 2);
      return Buffer.concat([
        Buffer.from(`${header.name}: `),
        value.subarray(0, half),
        Buffer.from('\r\n '),
        value.subarray(half),
      ]);
    }
  }
}

/**
 * Bytes llhttp refuses in a header value: control characters other than
 * HTAB, and DEL. Bytes 0x80-0xff are accepted (obs-text) and decoded as latin1.
 */
// eslint-disable-next-line no-control-regex
const INVALID_VALUE_BYTES = /[\x00-\x08\x0a-\x1f\x7f]/;
/** Optional whitespace around a header value, stripped by the server. */
const OWS = /^[ \t]+|[ \t]+$/g;
/** The default key rule of the README: 1 to 255 visible ASCII characters. */
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

/** RFC 8941 sf-string: `"..."` with only `\"` and `\\` escapes, 0x20-0x7e. */
function parseSfString(value: string): string | undefined {
  let result = '';
  for (let i = 1; i < value.length; i += 1) {
    const char = value[i];
    const code = char.charCodeAt(0);
    if (char === '\\') {
      const next = value[i + 1];
      if (next !== '"' && next !== '\\') {
        return undefined;
      }
      result += next;
      i += 1;
    } else if (char === '"') {
      return i === value.length - 1 ? result : undefined;
    } else if (code < 0x20 || code > 0x7e) {
      return undefined;
    } else {
      result += char;
    }
  }
  return undefined;
}

/** `key` as a quoted sf-string: the same key for the server. */
export function sfQuote(key: string): string {
  return `"${key.replace(/[\\"]/g, (char) => `\\${char}`)}"`;
}

/** How the server must read the key header lines of one request. */
export function readKey(headers: readonly KeyHeader[]): KeyReading {
  for (const header of headers) {
    if (header.framing === 'space-before-colon') {
      return { kind: 'broken', reason: 'whitespace before the colon' };
    }
    if (header.framing === 'obs-fold') {
      return { kind: 'broken', reason: 'obsolete line folding' };
    }
    if (
      INVALID_VALUE_BYTES.test(
        Buffer.from(header.value, 'utf8').toString('latin1'),
      )
    ) {
      return { kind: 'broken', reason: 'control character in the value' };
    }
  }
  if (headers.length === 0) {
    return { kind: 'missing' };
  }
  if (headers.length > 1) {
    return { kind: 'invalid', reason: 'repeated' };
  }
  // Node decodes header bytes as latin1; UTF-8 text becomes chars >= 0x80.
  const value = Buffer.from(headers[0].value, 'utf8')
    .toString('latin1')
    .replace(OWS, '');
  const key = value.startsWith('"') ? parseSfString(value) : value;
  if (key === undefined) {
    return { kind: 'invalid', reason: 'not a valid sf-string' };
  }
  if (!KEY_PATTERN.test(key)) {
    return { kind: 'invalid', reason: 'not 1-255 visible ASCII characters' };
  }
  return { kind: 'valid', key };
}

/** A request body as sent. */
export interface BodySpec {
  /** How it was generated (for the statistics). */
  readonly kind:
    'none' | 'object' | 'json' | 'anything' | 'invalid' | 'empty' | 'deep'; // nested 64 to 40,000 levels deep (valid JSON, under 100 KB)
  /** The bytes sent (UTF-8); `none` sends no body and no `Content-Type`. */
  readonly text: string;
  readonly chunked: boolean;
}

/** What the platform does with a body before any handler or interceptor. */
export type BodyReading =
  | { readonly accepted: false }
  | { readonly accepted: true; readonly canonical: string };

/**
 * The body as the handler sees it: a number JSON writes as another value
 * (`1e309` parsed is `Infinity`, written `null`; `-0` written `0`) keeps
 * its own text.
 */
function canonicalJson(value: unknown): string {
  if (
    typeof value === 'number' &&
    (!Number.isFinite(value) || Object.is(value, -0))
  ) {
    return Object.is(value, -0) ? '-0' : String(value);
  }
  if (value === null || typeof value !== 'object') {
    return JSON.stringify(value) ?? 'null';
  }
  if (Array.isArray(value)) {
    return `[${value.map(canonicalJson).join(',')}]`;
  }
  const record = value as Record<string, unknown>;
  return `{${Object.keys(record)
    .sort()
    .map((name) => `${JSON.stringify(name)}:${canonicalJson(record[name])}`)
    .join(',')}}`;
}

/** Fastify's secure-json-parse refuses `__proto__` and `constructor.prototype`. */
function poisoned(value: unknown): boolean {
  if (value === null || typeof value !== 'object') {
    return false;
  }
  if (Object.hasOwn(value, '__proto__')) {
    return true;
  }
  const ctor = (value as Record<string, unknown>).constructor;
  if (
    Object.hasOwn(value, 'constructor') &&
    ctor !== null &&
    typeof ctor === 'object' &&
    Object.hasOwn(ctor, 'prototype')
  ) {
    return true;
  }
  return Object.values(value).some(poisoned);
}

/**
 * What the platform makes of a body (observed behaviour of Nest's default
 * parsers): Express's JSON parser is strict (objects and arrays only) and
 * reads an empty body as `{}`; Fastify's accepts any JSON value but refuses an
 * empty body and prototype poisoning. Both answer 400 for invalid JSON.
 */
export function readBody(body: BodySpec, platform: Platform): BodyReading {
  if (body.kind === 'none') {
    return { accepted: true, canonical: 'undefined' };
  }
  if (body.kind === 'deep') {
    // Valid JSON, an array or object, no `__proto__`: both parsers accept it.
    // Its text is its canonical form (no spaces, one key per object); it is
    // not parsed here, where a recursive walk would overflow the stack.
    return { accepted: true, canonical: `deep:${body.text}` };
  }
  if (body.text.length === 0) {
    return platform === 'express'
      ? { accepted: true, canonical: 'j:{}' }
      : { accepted: false };
  }
  let value: unknown;
  try {
    // Both parsers skip a leading byte order mark.
    value = JSON.parse(body.text.replace(/^\ufeff/, ''));
  } catch {
    return { accepted: false };
  }
  if (platform === 'express') {
    return value !== null && typeof value === 'object'
      ? { accepted: true, canonical: `j:${canonicalJson(value)}` }
      : { accepted: false };
  }
  if (poisoned(value)) {
    return { accepted: false };
  }
  return {
    accepted: true,
    canonical:
      typeof value === 'string' ? `s:${value}` : `j:${canonicalJson(value)}`,
  };
}

/**
 * Model of the fingerprint: method, route template, path parameter (the
 * member id, as sent: the fuzzer never sends two spellings of one id), the
 * query parameters (by name, a repeated one's values in their order) and the
 * canonical body.
 */
export function fingerprint(
  method: string,
  template: string,
  path: string,
  body: BodyReading & { accepted: true },
): string {
  const [pathname, search = ''] = path.split(/\?(.*)/s);
  const id = template.endsWith('/:id') ? pathname.split('/').pop() : '';
  const query = [...new URLSearchParams(search)].sort(([a], [b]) =>
    a < b ? -1 : a > b ? 1 : 0,
  );
  return `${method}\n${template}\n${id}\n${JSON.stringify(query)}\n${body.canonical}`;
}
