import type { IncomingMessage } from 'node:http';
import type { ExecutionContext } from '@nestjs/common';
import type { ResolvedRouteOptions } from '../core/executor.options.js';
import { validKey } from '../core/idempotency-key.js';
import { isThenable } from '../core/is-thenable.js';
import { readKeyValues, type KeyReading } from '../core/key-header.js';
import { IdempotencyKeyInvalidException } from '../exceptions/idempotency-key-invalid.exception.js';
import type { IdempotencyKeyLocation } from '../exceptions/idempotency-key-missing.exception.js';

/**
 * @internal Reads the key header of a request: a plain token or a quoted
 * sf-string, sent once (see {@link readKeyValues}).
 */
export function readKeyHeader(
  request: IncomingMessage,
  field: string,
): KeyReading {
  const value = request.headers[field];
  if (value === undefined) {
    return undefined;
  }
  // Node.js joins the lines of a header into one value: each line is a
  // value sent.
  const lines: string[] = [];
  const { rawHeaders } = request;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    // Only a name of the field's length can be it: the others are not
    // lower-cased (a string each).
    const name = rawHeaders[i];
    if (name.length === field.length && name.toLowerCase() === field) {
      lines.push(rawHeaders[i + 1]);
    }
  }
  return readKeyValues(
    typeof value !== 'string' ? value : lines.length > 1 ? lines : [value],
  );
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
