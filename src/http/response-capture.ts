import { ServerResponse, type OutgoingHttpHeaders } from 'node:http';
import { isCorsHeader } from '../core/stored-headers.js';

/** @internal A response as the platform was about to send it. */
export interface CapturedResponse {
  readonly status: number;
  /** Lower-cased names. */
  readonly headers: Record<string, string | string[]>;
  readonly body: Buffer;
}

type Callback = (error?: Error | null) => void;
type WriteHead = ServerResponse['writeHead'];
type Write = ServerResponse['write'];
type End = ServerResponse['end'];

function toBuffer(chunk: unknown, encoding: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) {
    return chunk;
  }
  if (chunk instanceof Uint8Array) {
    return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  }
  return Buffer.from(
    String(chunk),
    typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8',
  );
}

/** The callback among a writer's arguments, if any (it comes last). */
function callbackOf(args: readonly unknown[]): Callback | undefined {
  return args.find((value) => typeof value === 'function') as
    Callback | undefined;
}

/** Ends `response` with `body` through its own (unwrapped) `end`. */
function endWith(
  response: ServerResponse,
  end: End,
  body: Buffer,
  done: Callback | undefined,
): void {
  (end as (chunk: Buffer, callback?: Callback) => void).call(
    response,
    body,
    done,
  );
}

function addHeaders(
  target: Record<string, string | string[]>,
  headers: OutgoingHttpHeaders | readonly unknown[] | undefined,
): void {
  if (!headers) {
    return;
  }
  if (Array.isArray(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) {
      target[String(headers[i]).toLowerCase()] = String(headers[i + 1]);
    }
    return;
  }
  const record = headers as OutgoingHttpHeaders;
  for (const name of Object.keys(record)) {
    const value = record[name];
    if (value !== undefined) {
      target[name.toLowerCase()] = Array.isArray(value)
        ? value.map(String)
        : String(value);
    }
  }
}

/** The methods a response writes through, as they were before an interception. */
interface Writers {
  readonly writeHead: WriteHead;
  readonly write: Write;
  readonly end: End;
}

/** What an interception does in place of each writer (`this`: the response). */
interface Interception {
  writeHead(response: ServerResponse, args: unknown[]): ServerResponse;
  write(response: ServerResponse, args: unknown[]): boolean;
  end(response: ServerResponse, args: unknown[]): ServerResponse;
}

interface Intercepted {
  readonly interception: Interception;
  /** The writers to restore: those before it, or the shared ones when nested. */
  readonly writers: Writers;
  readonly outer?: Intercepted;
}

const intercepted = new WeakMap<ServerResponse, Intercepted>();

// The same three functions on every intercepted response, each finding its
// response's interception: a closure of its own per response, set as a
// property of the response, would make V8 give every response object a new
// shape, whose cost showed as several times the garbage promoted per request.
function interceptedWriteHead(this: ServerResponse, ...args: unknown[]) {
  return writeThrough(this, 'writeHead', interceptedWriteHead, args);
}
function interceptedWrite(this: ServerResponse, ...args: unknown[]) {
  return writeThrough(this, 'write', interceptedWrite, args);
}
function interceptedEnd(this: ServerResponse, ...args: unknown[]) {
  return writeThrough(this, 'end', interceptedEnd, args);
}

/**
 * Hands a writer's call to the response's interception or, once that ended
 * (another wrapper kept the writer and calls it later), to the writer the
 * response has now.
 */
function writeThrough<K extends keyof Writers>(
  response: ServerResponse,
  name: K,
  shared: unknown,
  args: unknown[],
): ReturnType<Interception[K]> {
  const current = intercepted.get(response);
  if (current) {
    return current.interception[name](response, args) as ReturnType<
      Interception[K]
    >;
  }
  const writer = (
    response[name] === shared ? ServerResponse.prototype[name] : response[name]
  ) as (...args: unknown[]) => ReturnType<Interception[K]>;
  return writer.apply(response, args);
}

/**
 * Routes the writers of `response` to `interception` until {@link release}.
 * @returns the writers that write for real (or to the interception this one
 * is nested in).
 */
function intercept(
  response: ServerResponse,
  interception: Interception,
): Writers {
  const outer = intercepted.get(response);
  // Nested in another interception, these are the shared functions, which
  // then reach the outer one.
  const writers: Writers = {
    writeHead: response.writeHead,
    write: response.write,
    end: response.end,
  };
  intercepted.set(response, { interception, writers, outer });
  if (!outer) {
    response.writeHead = interceptedWriteHead as WriteHead;
    response.write = interceptedWrite as Write;
    response.end = interceptedEnd as End;
  }
  return writers;
}

/** Ends the interception of `response`: its writers write again. */
function release(response: ServerResponse): void {
  const current = intercepted.get(response);
  if (!current) {
    return;
  }
  if (current.outer) {
    intercepted.set(response, current.outer);
    return;
  }
  intercepted.delete(response);
  response.writeHead = current.writers.writeHead;
  response.write = current.writers.write;
  response.end = current.writers.end;
}

/**
 * @internal Holds back the response a platform writes on `response` (Express
 * and Fastify both end in Node's `ServerResponse`) until `settle` has run with
 * what it was about to send. When `settle` resolves, the response goes out
 * unchanged but for the headers it names, taken off; when it
 * rejects, `replace` gives the response sent instead, with the CORS headers
 * (`Access-Control-*`) and `Vary` of the one it replaces.
 *
 * Nothing reaches the client before `settle` resolves, so a transaction it
 * commits is durable before the client learns of the outcome.
 */
export function holdResponse(
  response: ServerResponse,
  settle: (captured: CapturedResponse) => Promise<void | readonly string[]>,
  replace: (error: unknown) => CapturedResponse,
): void {
  const chunks: Buffer[] = [];
  let head: Parameters<WriteHead> | undefined;
  const writers = intercept(response, {
    writeHead(target, args) {
      head = args as Parameters<WriteHead>;
      return target;
    },
    write(_target, args) {
      const [chunk, encoding] = args;
      chunks.push(toBuffer(chunk, encoding));
      const done = callbackOf(args);
      if (done) {
        process.nextTick(done);
      }
      return true;
    },
    end(target, args) {
      release(target);
      const [chunk, encoding] = args;
      if (
        typeof chunk !== 'function' &&
        chunk !== undefined &&
        chunk !== null
      ) {
        chunks.push(toBuffer(chunk, encoding));
      }
      const done = callbackOf(args);
      const headers: Record<string, string | string[]> = {};
      addHeaders(headers, target.getHeaders());
      const headArgs = head;
      if (headArgs) {
        const last = headArgs[headArgs.length - 1];
        addHeaders(
          headers,
          typeof last === 'object' ? (last as OutgoingHttpHeaders) : undefined,
        );
      }
      const status = headArgs ? Number(headArgs[0]) : target.statusCode;
      const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
      settle({ status, headers, body }).then(
        (dropped) => {
          for (const name of dropped ?? NO_HEADERS) {
            withoutHeader(target, headArgs, name);
          }
          if (headArgs) {
            writers.writeHead.apply(target, headArgs);
          }
          endWith(target, writers.end, body, done);
        },
        (error: unknown) => {
          const replacement = replace(error);
          if (target.headersSent) {
            target.destroy();
            return;
          }
          // What described the answer replaced goes; the CORS headers (and
          // `Vary`, which they extend with `Origin`) answer the request, and
          // stay: without them a browser could not read the replacement
          // (a 503 to retry, its `Retry-After`).
          const kept: Record<string, string | string[]> = {};
          for (const [name, value] of Object.entries(headers)) {
            if (keptOnReplacement(name)) {
              kept[name] = value;
            }
          }
          for (const name of target.getHeaderNames()) {
            target.removeHeader(name);
          }
          writers.writeHead.call(target, replacement.status, {
            ...kept,
            ...replacement.headers,
          });
          endWith(target, writers.end, replacement.body, done);
        },
      );
      return target;
    },
  });
}

/**
 * Whether a header (lower-cased) of a response replaced goes out with its
 * replacement: a CORS header, or `Vary`.
 */
function keptOnReplacement(name: string): boolean {
  return isCorsHeader(name) || name === 'vary';
}

/**
 * Takes header `name` off a response about to be written:
 * set on it, or given to its `writeHead()` (as Fastify gives its headers).
 */
function withoutHeader(
  response: ServerResponse,
  head: Parameters<WriteHead> | undefined,
  name: string,
): void {
  response.removeHeader(name);
  const last = head?.[head.length - 1];
  if (last && typeof last === 'object' && !Array.isArray(last)) {
    const headers = last as Record<string, unknown>;
    for (const key of Object.keys(headers)) {
      if (key.toLowerCase() === name.toLowerCase()) {
        delete headers[key];
      }
    }
  }
}

/** Headers that describe a body: those of a body replaced go with it. */
const BODY_HEADERS: readonly string[] = ['content-length', 'etag'];
const NO_HEADERS: readonly string[] = [];

/**
 * @internal Sends `replacement` (status, headers set over those already on
 * the response, and body) in place of the empty answer the platform is about
 * to write on `response`: what Nest sends for a handler result of
 * `undefined`, on Express as on Fastify. A stored response goes out this way
 * as one write of its bytes, where a web `Response` would be streamed.
 *
 * An error's answer with a body (an exception filter's, after an error
 * thrown by an interceptor outside this one) goes out unchanged instead. A
 * success's with a body is what an interceptor outside this one made of
 * the `undefined` (an envelope, `{ data: undefined, ok: true }`): replaced
 * too, as the stored response is what that interceptor made of the first
 * answer.
 */
export function sendInPlaceOfEmpty(
  response: ServerResponse,
  replacement: CapturedResponse,
): void {
  let head: unknown[] | undefined;
  // Anything else than an empty answer: the platform's own, unchanged.
  const passThrough = (target: ServerResponse) => {
    release(target);
    if (head) {
      (writers.writeHead as (...args: unknown[]) => ServerResponse).apply(
        target,
        head,
      );
    }
  };
  const writers = intercept(response, {
    writeHead(target, args) {
      head = args;
      return target;
    },
    write(target, args) {
      passThrough(target);
      return (writers.write as (...args: unknown[]) => boolean).apply(
        target,
        args,
      );
    },
    end(target, args) {
      const [chunk] = args;
      const status =
        typeof head?.[0] === 'number' ? head[0] : target.statusCode;
      const body =
        typeof chunk !== 'function' &&
        chunk !== undefined &&
        chunk !== null &&
        (chunk as { length?: number }).length !== 0;
      if (body && status >= 400) {
        passThrough(target);
        return (writers.end as (...args: unknown[]) => ServerResponse).apply(
          target,
          args,
        );
      }
      release(target);
      const done = callbackOf(args);
      // Headers the platform gave writeHead (Fastify's) are kept, under the
      // replacement's.
      // Those that described the body replaced (an outer interceptor's) go.
      const described = body ? BODY_HEADERS : NO_HEADERS;
      for (const name of described) {
        target.removeHeader(name);
      }
      const last = head?.[head.length - 1];
      if (last && typeof last === 'object') {
        const given: Record<string, string | string[]> = {};
        addHeaders(given, last as OutgoingHttpHeaders | readonly unknown[]);
        for (const [name, value] of Object.entries(given)) {
          if (!described.includes(name.toLowerCase())) {
            target.setHeader(name, value);
          }
        }
      }
      for (const [name, value] of Object.entries(replacement.headers)) {
        target.setHeader(name, value);
      }
      target.statusCode = replacement.status;
      endWith(target, writers.end, replacement.body, done);
      return target;
    },
  });
}
