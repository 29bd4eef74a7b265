import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';

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
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) {
      target[name.toLowerCase()] = Array.isArray(value)
        ? value.map(String)
        : String(value);
    }
  }
}

/**
 * @internal Holds back the response a platform writes on `response` (Express
 * and Fastify both end in Node's `ServerResponse`) until `settle` has run with
 * what it was about to send. When `settle` resolves, the response goes out
 * unchanged; when it rejects, `replace` gives the response sent instead.
 *
 * Nothing reaches the client before `settle` resolves, so a transaction it
 * commits is durable before the client learns of the outcome.
 */
export function holdResponse(
  response: ServerResponse,
  settle: (captured: CapturedResponse) => Promise<void>,
  replace: (error: unknown) => CapturedResponse,
): void {
  const originalWriteHead = response.writeHead;
  const originalWrite = response.write;
  const originalEnd = response.end;
  const chunks: Buffer[] = [];
  let head: Parameters<WriteHead> | undefined;

  response.writeHead = function (this: ServerResponse, ...args: unknown[]) {
    head = args as Parameters<WriteHead>;
    return this;
  } as WriteHead;

  response.write = function (
    chunk: unknown,
    encoding?: unknown,
    callback?: unknown,
  ) {
    chunks.push(toBuffer(chunk, encoding));
    const done = (typeof encoding === 'function' ? encoding : callback) as
      Callback | undefined;
    if (done) {
      process.nextTick(done);
    }
    return true;
  } as Write;

  response.end = function (
    this: ServerResponse,
    chunk?: unknown,
    encoding?: unknown,
    callback?: unknown,
  ) {
    response.writeHead = originalWriteHead;
    response.write = originalWrite;
    response.end = originalEnd;
    let done: Callback | undefined;
    if (typeof chunk === 'function') {
      done = chunk as Callback;
    } else {
      if (chunk !== undefined && chunk !== null) {
        chunks.push(toBuffer(chunk, encoding));
      }
      done = (typeof encoding === 'function' ? encoding : callback) as
        Callback | undefined;
    }
    const headers: Record<string, string | string[]> = {};
    addHeaders(headers, response.getHeaders());
    const headArgs = head;
    if (headArgs) {
      const last = headArgs[headArgs.length - 1];
      addHeaders(
        headers,
        typeof last === 'object' ? (last as OutgoingHttpHeaders) : undefined,
      );
    }
    const status = headArgs ? Number(headArgs[0]) : response.statusCode;
    const body = Buffer.concat(chunks);
    settle({ status, headers, body }).then(
      () => {
        if (headArgs) {
          originalWriteHead.apply(response, headArgs);
        }
        endWith(response, originalEnd, body, done);
      },
      (error: unknown) => {
        const replacement = replace(error);
        if (response.headersSent) {
          response.destroy();
          return;
        }
        for (const name of response.getHeaderNames()) {
          response.removeHeader(name);
        }
        originalWriteHead.call(
          response,
          replacement.status,
          replacement.headers,
        );
        endWith(response, originalEnd, replacement.body, done);
      },
    );
    return this;
  } as End;
}

/**
 * @internal Sends `replacement` (status, headers set over those already on
 * the response, and body) in place of the empty answer the platform is about
 * to write on `response`: what Nest sends for a handler result of
 * `undefined`, on Express as on Fastify. A stored response goes out this way
 * as one write of its bytes, where a web `Response` would be streamed.
 *
 * An answer with a body (an exception filter's, after an error thrown by an
 * interceptor outside this one) goes out unchanged instead.
 */
export function sendInPlaceOfEmpty(
  response: ServerResponse,
  replacement: CapturedResponse,
): void {
  const originalWriteHead = response.writeHead;
  const originalWrite = response.write;
  const originalEnd = response.end;
  let head: unknown[] | undefined;
  const restore = () => {
    response.writeHead = originalWriteHead;
    response.write = originalWrite;
    response.end = originalEnd;
  };
  // Anything else than an empty answer: the platform's own, unchanged.
  const passThrough = () => {
    restore();
    if (head) {
      (originalWriteHead as (...args: unknown[]) => ServerResponse).apply(
        response,
        head,
      );
    }
  };

  response.writeHead = function (this: ServerResponse, ...args: unknown[]) {
    head = args;
    return this;
  } as WriteHead;

  response.write = function (this: ServerResponse, ...args: Parameters<Write>) {
    passThrough();
    return originalWrite.apply(this, args);
  } as Write;

  response.end = function (this: ServerResponse, ...args: unknown[]) {
    const [chunk, encoding, callback] = args;
    if (
      typeof chunk !== 'function' &&
      chunk !== undefined &&
      chunk !== null &&
      (chunk as { length?: number }).length !== 0
    ) {
      passThrough();
      return (originalEnd as (...args: unknown[]) => ServerResponse).apply(
        this,
        args,
      );
    }
    restore();
    const done = [chunk, encoding, callback].find(
      (value) => typeof value === 'function',
    ) as Callback | undefined;
    // Headers the platform gave writeHead (Fastify's) are kept, under the
    // replacement's.
    const last = head?.[head.length - 1];
    if (last && typeof last === 'object') {
      const given: Record<string, string | string[]> = {};
      addHeaders(given, last as OutgoingHttpHeaders | readonly unknown[]);
      for (const [name, value] of Object.entries(given)) {
        response.setHeader(name, value);
      }
    }
    for (const [name, value] of Object.entries(replacement.headers)) {
      response.setHeader(name, value);
    }
    response.statusCode = replacement.status;
    endWith(response, originalEnd, replacement.body, done);
    return this;
  } as End;
}
