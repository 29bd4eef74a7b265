import type { IncomingMessage } from 'node:http';
import type { ExecutionContext } from '@nestjs/common';
import type { ResolvedRouteOptions } from '../core/executor.options.js';
import { validKey } from '../core/idempotency-key.js';
import { IdempotencyKeyInvalidException } from '../exceptions/idempotency-key-invalid.exception.js';
import type { IdempotencyKeyLocation } from '../exceptions/idempotency-key-missing.exception.js';

/** @internal A key, or why the header does not carry a usable one. */
export type KeyReading = { key: string } | { problem: string } | undefined;

/**
 * Reads an RFC 8941 sf-string (`"..."` with `\"` and `\\` escapes).
 * @returns the string, or `undefined` when the value is not a valid sf-string.
 */
function parseSfString(value: string): string | undefined {
  let result = '';
  for (let i = 1; i < value.length; i += 1) {
    const char = value[i];
    if (char === '\\') {
      const escaped = value[i + 1];
      if (escaped !== '"' && escaped !== '\\') {
        return undefined;
      }
      result += escaped;
      i += 1;
    } else if (char === '"') {
      return i === value.length - 1 ? result : undefined;
    } else if (char < ' ' || char > '~') {
      return undefined;
    } else {
      result += char;
    }
  }
  return undefined;
}

/**
 * @internal Reads the key header of a request: a plain token or a quoted
 * sf-string, sent once.
 */
export function readKeyHeader(
  request: IncomingMessage,
  field: string,
): KeyReading {
  const value = request.headers[field];
  if (value === undefined) {
    return undefined;
  }
  let count = 0;
  for (let i = 0; i < request.rawHeaders.length; i += 2) {
    if (request.rawHeaders[i].toLowerCase() === field) {
      count += 1;
    }
  }
  if (typeof value !== 'string' || count > 1) {
    return { problem: 'it is repeated' };
  }
  if (!value.startsWith('"')) {
    return { key: value };
  }
  const key = parseSfString(value);
  return key === undefined
    ? { problem: 'it is not a valid quoted string' }
    : { key };
}

/**
 * @internal Where a route looks for its key, as its refusals name it: its
 * `key` option when it has one, else the key header named `headerName`.
 */
export function keySource(
  options: ResolvedRouteOptions,
  headerName: string,
): { readonly keyField: string; readonly keyLocation: IdempotencyKeyLocation } {
  return options.key
    ? { keyField: 'key', keyLocation: 'option' }
    : { keyField: headerName, keyLocation: 'header' };
}

/**
 * @internal The key of a request: the `key` option's resolver, else the key
 * header of `request` (when there is one), validated; `undefined` when the
 * request carries none.
 * @throws IdempotencyKeyInvalidException for a malformed or repeated key.
 */
export async function resolveRequestKey(
  context: ExecutionContext,
  options: ResolvedRouteOptions,
  header: { readonly name: string; readonly field: string },
  request: IncomingMessage | undefined,
): Promise<string | undefined> {
  let key: unknown;
  if (options.key) {
    key = await options.key(context);
  } else {
    const reading = request && readKeyHeader(request, header.field);
    if (reading && 'problem' in reading) {
      throw new IdempotencyKeyInvalidException(header.name, reading.problem);
    }
    key = reading?.key;
  }
  const { keyField, keyLocation } = keySource(options, header.name);
  return key === undefined
    ? undefined
    : validKey(key, options.keyValidation, keyField, keyLocation);
}
