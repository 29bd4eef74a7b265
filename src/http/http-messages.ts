import { StreamableFile } from '@nestjs/common';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { isNeverStored } from '../core/stored-headers.js';
import { IDEMPOTENT_BODY_OMITTED_HEADER } from '../client/client.constants.js';
import type { ResolvedRouteOptions } from '../core/executor.options.js';
import type { StoredResponse } from '../interfaces/idempotency-store.interface.js';
import {
  queryParameters,
  UnreadableBody,
  type FingerprintParts,
} from '../core/request-fingerprint.js';
import type { CapturedResponse } from './response-capture.js';

/** @internal A request as the HTTP platforms (Express, Fastify) give it. */
export type HttpRequest = IncomingMessage & {
  body?: unknown;
  /** The body's bytes, kept by the platform's parsers with `rawBody: true`. */
  rawBody?: unknown;
  params?: Record<string, unknown>;
  /** The parameters of a controller's `host` pattern, as Nest sets them. */
  hosts?: Record<string, unknown>;
  /** Express: the route that matched, its pattern in `path`. */
  route?: { path?: unknown };
  /** Fastify: the route that matched, its pattern in `url`. */
  routeOptions?: { url?: unknown };
  /** Express: the URL as received, before any mount point was cut off. */
  originalUrl?: string;
  raw?: IncomingMessage;
};

/**
 * @internal What the default fingerprint of an HTTP request is made of. The query is
 * read from the URL itself, the same way on every platform.
 */
export function fingerprintParts(
  request: HttpRequest,
  route: string,
  globalPrefix = '',
  variant?: Readonly<Record<string, string>>,
): FingerprintParts {
  const { hosts } = request;
  // The route's version and host (see `DecoratedRoute.variant`), apart
  // from the parameters by their `@`: two handlers of one path under
  // header versioning, or of two hosts, are two routes.
  const params: Record<string, unknown> = { ...variant, ...request.params };
  // A controller's `host` parameters (`:tenant.example.com`), apart from
  // the path's; a request without them fingerprints as before.
  if (hosts) {
    for (const [name, value] of Object.entries(hosts)) {
      params[`host:${name}`] = value;
    }
  }
  return {
    method: request.method ?? 'GET',
    route: matchedRoute(request, route, globalPrefix),
    params,
    query: queryParameters(request.originalUrl ?? (request.raw ?? request).url),
    body: requestBody(request),
  };
}

/** `/a/b`, from `a/b/`, `/a//b` or `a/b`. */
function normalPath(path: string): string {
  return `/${path
    .split('/')
    .filter((segment) => segment.length > 0)
    .join('/')}`;
}

/**
 * The route of a request, as its fingerprint names it: the handler's route
 * template (`template`, from its decorators), unless the platform matched
 * another pattern than that template under the application's global
 * prefix (a version, `/v2/orders`; a `RouterModule` path; another entry of
 * an array of paths): that pattern then, less the global prefix, so that
 * two endpoints of one handler, or two handlers of one template, are two
 * routes. Where the platform does not say, the template.
 */
export function matchedRoute(
  request: HttpRequest,
  template: string,
  globalPrefix: string,
): string {
  const raw = request as HttpRequest & { raw?: HttpRequest };
  const pattern = raw.routeOptions?.url ?? raw.route?.path;
  if (typeof pattern !== 'string' || pattern === template) {
    return template;
  }
  let path = normalPath(pattern);
  const prefix = normalPath(globalPrefix);
  if (prefix !== '/' && (path === prefix || path.startsWith(`${prefix}/`))) {
    path = normalPath(path.slice(prefix.length));
  }
  return path === normalPath(template) ? template : path;
}

/**
 * The body of a request as the fingerprint takes it: the body a parser read
 * from its bytes; else its raw bytes, when something kept them; else, when
 * the request carries a body all the same that nothing read (no parser for
 * its content type), an {@link UnreadableBody}, which is refused rather than
 * taken for none, or for the placeholder (`{}`) some middleware sets.
 */
function requestBody(request: HttpRequest): unknown {
  const raw = (request.raw ?? request) as HttpRequest;
  const { headers } = raw;
  const length = Number(headers['content-length'] ?? 0);
  const carriesBody =
    headers['transfer-encoding'] !== undefined ||
    !(Number.isFinite(length) && length === 0);
  // Multer, as a middleware, keeps the files apart from the text fields it
  // sets as the body: the handler reads them, the fingerprint cannot.
  if (carriesFiles(request)) {
    return new UnreadableBody(headers['content-type'], true);
  }
  // A parser reads the stream to its end before the handler runs.
  if (!carriesBody || (request.body !== undefined && raw.readableEnded)) {
    return request.body;
  }
  const bytes = request.rawBody ?? raw.rawBody;
  if (Buffer.isBuffer(bytes) || typeof bytes === 'string') {
    return bytes;
  }
  return new UnreadableBody(headers['content-type']);
}

/**
 * Whether a middleware (Multer's) set files of the request apart from its
 * body: data, never a method (`@fastify/multipart` gives every request
 * `file()` and `files()`).
 */
function carriesFiles(request: HttpRequest): boolean {
  const { file, files } = request as { file?: unknown; files?: unknown };
  return (
    (typeof file === 'object' && file !== null) ||
    (Array.isArray(files)
      ? files.length > 0
      : typeof files === 'object' &&
        files !== null &&
        Object.keys(files).length > 0)
  );
}

/** @internal A response as the HTTP platforms give it. */
export type HttpResponse = { raw?: ServerResponse } & object;

/** @internal {@link IDEMPOTENT_BODY_OMITTED_HEADER}, lower-cased as stored headers are. */
export const BODY_OMITTED_HEADER = IDEMPOTENT_BODY_OMITTED_HEADER.toLowerCase();

/** @internal A body the platform streams: it is sent as it is produced, never whole. */
export function isStream(value: unknown): boolean {
  return (
    value instanceof StreamableFile ||
    value instanceof Readable ||
    value instanceof ReadableStream ||
    value instanceof Response ||
    (typeof value === 'object' &&
      value !== null &&
      typeof (value as AsyncIterable<unknown>)[Symbol.asyncIterator] ===
        'function' &&
      typeof (value as PromiseLike<unknown>).then !== 'function')
  );
}

/**
 * @internal Takes header `name` off a response not sent yet: Express's
 * response and Fastify's reply both have `removeHeader()`.
 */
export function removeHeader(response: HttpResponse, name: string): void {
  (response as { removeHeader?: (name: string) => void }).removeHeader?.(name);
}

/** @internal The Node.js response under the platform's. */
export function rawResponse(response: HttpResponse): ServerResponse {
  return (response.raw ?? response) as ServerResponse;
}

/**
 * @internal The response to store for replay: its status, body and the
 * headers the replay options keep.
 */
export function toStored(
  captured: CapturedResponse,
  options: ResolvedRouteOptions,
): StoredResponse {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(captured.headers)) {
    const replayed =
      name === 'content-type' ||
      name === options.expiresHeader ||
      (!isNeverStored(name) &&
        !options.replayDeny.has(name) &&
        (options.replayAllow === undefined || options.replayAllow.has(name)));
    if (replayed) {
      headers[name] = value;
    }
  }
  return { status: captured.status, headers, body: captured.body };
}
