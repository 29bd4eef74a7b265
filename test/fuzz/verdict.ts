/**
 * Judging the answers: what kind of answer each response is, which kinds a
 * request may get, and the state of the keys of one scenario.
 */
import type { Platform } from '../utils/test-app.js';
import { FUZZ_ROUTES, RUN_HEADER } from './fuzz.module.js';
import { fingerprint, readBody } from './oracle.js';
import type { RawResponse } from './raw-http.js';
import { KNOWN_METHODS, type PlannedRequest } from './requests.js';

/** What an answer is, as far as the invariant is concerned. */
export type Outcome =
  /** The server closed the connection without a response. */
  | 'closed'
  /**
   * The HTTP server's own `400 Bad Request` for bytes that are not valid
   * HTTP: Node's bare one, or Fastify's `clientError` answer.
   */
  | 'http-400'
  /** Another 4xx of the platform (body parser, router): not the module's. */
  | 'platform-400'
  | 'platform-404'
  | 'platform-405'
  /** The module's answers, by problem type. */
  | 'missing-key'
  | 'invalid-key'
  | 'in-progress'
  | 'key-reused'
  | 'not-replayable'
  | 'unavailable'
  /** A first execution: the handler ran. */
  | 'fresh'
  /** A stored response, `Idempotent-Replayed: true`. */
  | 'replay'
  /** Anything else (a 5xx, a 2xx without a run, an unknown problem type). */
  | `unexpected-${string}`;

const PROBLEMS: Record<string, Outcome> = {
  'urn:idempotency:missing-key': 'missing-key',
  'urn:idempotency:invalid-key': 'invalid-key',
  'urn:idempotency:request-in-progress': 'in-progress',
  'urn:idempotency:key-reused': 'key-reused',
  'urn:idempotency:not-replayable': 'not-replayable',
  'urn:idempotency:unavailable': 'unavailable',
};

const MODULE_STATUS: Partial<Record<Outcome, number>> = {
  'missing-key': 400,
  'invalid-key': 400,
  'in-progress': 409,
  'key-reused': 422,
  'not-replayable': 422,
  unavailable: 503,
};

/** What Fastify's `clientError` handler sends for bytes llhttp refuses. */
const FASTIFY_CLIENT_ERROR = Buffer.from(
  '{"error":"Bad Request","message":"Client Error","statusCode":400}',
);

function header(response: RawResponse, name: string): string | undefined {
  return response.headers.get(name)?.[0];
}

/** Classifies one response. */
export function classify(response: RawResponse): Outcome {
  const { status } = response;
  if (status === undefined) {
    return 'closed';
  }
  const type = header(response, 'content-type') ?? '';
  if (type.startsWith('application/problem+json')) {
    let problem: { type?: unknown; status?: unknown };
    try {
      problem = JSON.parse(response.body.toString('utf8'));
    } catch {
      return `unexpected-${status}-unparsable-problem`;
    }
    const outcome = PROBLEMS[String(problem.type)];
    return outcome &&
      MODULE_STATUS[outcome] === status &&
      problem.status === status
      ? outcome
      : `unexpected-${status}-problem-${String(problem.type)}`;
  }
  if (status >= 200 && status < 300) {
    if (header(response, 'idempotent-replayed') === 'true') {
      return 'replay';
    }
    return header(response, RUN_HEADER) !== undefined
      ? 'fresh'
      : `unexpected-${status}-without-run`;
  }
  if (
    status === 400 &&
    ((type === '' && response.body.length === 0) ||
      response.body.equals(FASTIFY_CLIENT_ERROR))
  ) {
    return 'http-400';
  }
  if (status === 400 || status === 404 || status === 405) {
    return `platform-${status}`;
  }
  return `unexpected-${status}`;
}

/** The first successful execution of a key. */
export interface Winner {
  readonly request: PlannedRequest;
  readonly id: string;
  readonly fingerprint: string;
  readonly response: RawResponse;
}

/** A request sent, and what came back. */
export interface Exchange {
  readonly request: PlannedRequest;
  readonly id: string;
  readonly bytes: Buffer;
  readonly response: RawResponse;
  readonly outcome: Outcome;
}

/** A broken invariant, with what it takes to reproduce it. */
export class Violation extends Error {
  constructor(message: string, exchange: Exchange) {
    super(`${message}\n${describeExchange(exchange)}`);
    this.name = 'Violation';
  }
}

function preview(bytes: Buffer, max = 1500): string {
  const text = JSON.stringify(bytes.toString('latin1'));
  return text.length > max
    ? `${text.slice(0, max)}... (${bytes.length} bytes)`
    : text;
}

/** The request bytes and the raw answer, JSON-escaped (latin1). */
export function describeExchange(exchange: Exchange): string {
  const { request, response } = exchange;
  return [
    `  request #${request.index} (${exchange.id}), key category ${request.category}, reading ${JSON.stringify(request.reading)}`,
    `  body kind ${request.body.kind}${request.body.chunked ? ' (chunked)' : ''}, route ${request.template ?? 'none'}${request.ref === undefined ? '' : `, reuses the key of #${request.ref}${request.race ? ' (same wave)' : ''}`}`,
    `  sent:     ${preview(exchange.bytes)}`,
    `  received: ${preview(response.raw)}${response.socketError ? ` [socket error ${response.socketError}]` : ''}${response.timedOut ? ' [timed out]' : ''}`,
    `  outcome:  ${exchange.outcome}`,
  ].join('\n');
}

/**
 * The outcomes a request may get that do not depend on the keys' state, or
 * `undefined` when it reaches the module with a valid key.
 */
export function staticExpectation(
  request: PlannedRequest,
  platform: Platform,
): readonly Outcome[] | undefined {
  if (!KNOWN_METHODS.has(request.method)) {
    // llhttp refuses the request line.
    return ['http-400', 'closed'];
  }
  if (request.reading.kind === 'broken') {
    return ['http-400', 'closed'];
  }
  if (request.template === undefined) {
    // Not a method of the route: 404 (neither platform answers 405 here),
    // or 400 when the platform refuses the body or the method first.
    return ['platform-404', 'platform-405', 'platform-400'];
  }
  if (!readBody(request.body, platform).accepted) {
    // The body parser answers before any interceptor runs.
    return ['platform-400'];
  }
  switch (request.reading.kind) {
    case 'missing':
      return ['missing-key'];
    case 'invalid':
      return ['invalid-key'];
    case 'valid':
      return undefined;
  }
}

/** Model fingerprint of a request that reaches the module. */
export function requestFingerprint(
  request: PlannedRequest,
  platform: Platform,
): string {
  const body = readBody(request.body, platform);
  if (!body.accepted || request.template === undefined) {
    throw new Error(`request #${request.index} never reaches the module`);
  }
  return fingerprint(request.method, request.template, request.path, body);
}

/** Checks a fresh response, and that a replay is the winner's, byte for byte. */
export function checkSuccess(exchange: Exchange, winner: Winner | undefined) {
  const { request, response, outcome } = exchange;
  if (outcome === 'fresh') {
    const expected =
      FUZZ_ROUTES[request.method as keyof typeof FUZZ_ROUTES]?.status;
    if (response.status !== expected) {
      throw new Violation(
        `a first execution answered ${response.status}, not ${expected}`,
        exchange,
      );
    }
    if (expected !== 204) {
      const body = JSON.parse(response.body.toString('utf8')) as {
        request?: string;
      };
      if (body.request !== exchange.id) {
        throw new Violation(
          `the response belongs to request ${body.request}`,
          exchange,
        );
      }
    }
    return;
  }
  if (outcome === 'replay') {
    if (!winner) {
      throw new Violation('a replay of a key never executed', exchange);
    }
    const original = winner.response;
    const same =
      response.status === original.status &&
      response.body.equals(original.body) &&
      header(response, RUN_HEADER) === header(original, RUN_HEADER) &&
      header(response, 'content-type') === header(original, 'content-type');
    if (!same) {
      throw new Violation(
        `the replay differs from the original response of ${winner.id}: ${preview(original.raw, 600)}`,
        exchange,
      );
    }
  }
}
