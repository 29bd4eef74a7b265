import type { IncomingMessage } from 'node:http';
import type { ExecutionContext } from '@nestjs/common';
import type { ResolvedRouteOptions } from '../core/executor.options.js';
import { validKey } from '../core/idempotency-key.js';
import { isThenable } from '../core/is-thenable.js';
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
  const { rawHeaders } = request;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    // Only a name of the field's length can be it: the others are not
    // lower-cased (a string each).
    const name = rawHeaders[i];
    if (name.length === field.length && name.toLowerCase() === field) {
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
 * request carries none. A promise only when the resolver returns one.
 * @throws IdempotencyKeyInvalidException for a malformed or repeated key.
 */
export function requestKey(
  context: ExecutionContext,
  options: ResolvedRouteOptions,
  header: { readonly name: string; readonly field: string },
  request: IncomingMessage | undefined,
): string | undefined | Promise<string | undefined> {
  if (options.key) {
    const key = options.key(context);
    return isThenable(key)
      ? Promise.resolve(key).then((found) =>
          validRequestKey(found, options, header.name),
        )
      : validRequestKey(key, options, header.name);
  }
  const reading = request && readKeyHeader(request, header.field);
  if (reading && 'problem' in reading) {
    throw new IdempotencyKeyInvalidException(header.name, reading.problem);
  }
  return validRequestKey(reading?.key, options, header.name);
}

/** @internal {@link requestKey}, as a promise. */
export async function resolveRequestKey(
  context: ExecutionContext,
  options: ResolvedRouteOptions,
  header: { readonly name: string; readonly field: string },
  request: IncomingMessage | undefined,
): Promise<string | undefined> {
  return requestKey(context, options, header, request);
}

function validRequestKey(
  key: unknown,
  options: ResolvedRouteOptions,
  headerName: string,
): string | undefined {
  if (key === undefined) {
    return undefined;
  }
  const { keyField, keyLocation } = keySource(options, headerName);
  return validKey(key, options.keyValidation, keyField, keyLocation);
}
