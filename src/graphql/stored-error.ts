import { HttpException } from '@nestjs/common';
import type { StoredResponse } from '../interfaces/idempotency-store.interface.js';
import { GraphqlRefusalError } from './graphql-refusal.error.js';

/**
 * What is kept of an error a mutation threw, when the error policy stores it:
 * enough to throw an error that the GraphQL driver answers with in the same
 * way (message, `extensions`, and for an `HttpException` its response and
 * status, which the drivers' and the application's formatting read).
 */
interface StoredError {
  readonly name: string;
  readonly message: string;
  readonly extensions?: Record<string, unknown>;
  readonly http?: { readonly response: unknown; readonly status: number };
}

/** Content type of a stored mutation error, telling it from a result. */
const STORED_ERROR_TYPE = 'application/vnd.idempotency.graphql-error+json';

function record(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null
    ? (value as Record<string, unknown>)
    : undefined;
}

/**
 * @internal The status the error policy is asked about for a mutation's
 * error: an `HttpException`'s status, else the `extensions.http.status` of a
 * `GraphQLError` (Apollo's convention), else 500.
 */
export function errorStatus(error: unknown): number {
  if (error instanceof HttpException) {
    return error.getStatus();
  }
  const status = record(record(record(error)?.extensions)?.http)?.status;
  return typeof status === 'number' ? status : 500;
}

/** @internal A mutation's error as the record stores it. */
export function storeError(error: unknown, status: number): StoredResponse {
  const fields = record(error);
  const stored: StoredError = {
    name: typeof fields?.name === 'string' ? fields.name : 'Error',
    message:
      typeof fields?.message === 'string' ? fields.message : String(error),
    extensions: record(fields?.extensions),
    http:
      error instanceof HttpException
        ? { response: error.getResponse(), status: error.getStatus() }
        : undefined,
  };
  return {
    status,
    headers: { 'content-type': STORED_ERROR_TYPE },
    body: Buffer.from(JSON.stringify(stored)),
  };
}

/**
 * @internal The error to throw again for a stored one: an `HttpException`
 * with the same response, status and message, a refusal of the module's
 * (which the resolver threw) as such, unlogged as it was, or an `Error`
 * with the same name, message and `extensions` (which GraphQL copies into
 * the error it answers with).
 */
export function restoreError(response: StoredResponse): Error {
  const stored = JSON.parse(response.body.toString('utf8')) as StoredError;
  const error = stored.http
    ? new HttpException(
        stored.http.response as string | Record<string, unknown>,
        stored.http.status,
      )
    : stored.name === 'GraphqlRefusalError' && stored.extensions
      ? new GraphqlRefusalError(stored.message, stored.extensions)
      : new Error(stored.message);
  error.name = stored.name;
  error.message = stored.message;
  if (stored.extensions) {
    Object.assign(error, { extensions: stored.extensions });
  }
  return error;
}
