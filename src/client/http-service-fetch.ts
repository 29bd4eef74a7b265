import { NULL_BODY_STATUSES } from './null-body-statuses.js';

/**
 * What {@link fetchFromHttpService} needs of `@nestjs/axios`'s `HttpService`
 * (or of any holder of an axios instance): its `axiosRef`. Typed here so
 * that the module never loads axios itself.
 */
export interface AxiosHttpService {
  /** The axios instance, with the interceptors and defaults the application gave it. */
  readonly axiosRef: {
    request(config: {
      url: string;
      method: string;
      headers: Record<string, string>;
      data?: Uint8Array;
      responseType: 'arraybuffer';
      validateStatus: (status: number) => boolean;
      maxRedirects?: number;
      signal?: AbortSignal;
    }): Promise<{
      status: number;
      statusText: string;
      headers: unknown;
      data: unknown;
    }>;
  };
}

/**
 * A `fetch` over `@nestjs/axios`'s `HttpService`, for the module's
 * `outgoing.fetch` option (the calls of `IdempotencyContext.fetch()`) or an
 * {@link IdempotentClient}'s `fetch`: the calls then go through the
 * application's axios instance (its interceptors, agents and defaults). Every status is an answer, as with `fetch`; a request that got
 * no answer rejects with a `TypeError`, as `fetch` does, so that it is
 * retried; an aborted one with the signal's reason. The answer's reason
 * phrase is its `statusText` when a `Response` takes it, else `''`.
 *
 * @example
 * import { fetchFromHttpService } from 'nestjs-idempotency/client';
 *
 * IdempotencyModule.forRootAsync({
 *   imports: [HttpModule],
 *   inject: [HttpService],
 *   useFactory: (http: HttpService) => ({ outgoing: { fetch: fetchFromHttpService(http) } }),
 * });
 */
export function fetchFromHttpService(
  http: AxiosHttpService,
): (input: string | URL, init?: RequestInit) => Promise<Response> {
  return async (input, init = {}) => {
    // The platform's Request normalizes what fetch takes (a body of any
    // kind, its content type, the headers) into bytes and a header list.
    const request = new Request(input, { ...init, signal: undefined });
    const headers: Record<string, string> = {};
    request.headers.forEach((value, name) => {
      headers[name] = value;
    });
    const body = request.body
      ? new Uint8Array(await request.arrayBuffer())
      : undefined;
    let answer;
    try {
      answer = await http.axiosRef.request({
        url: request.url,
        method: request.method,
        headers,
        data: body,
        responseType: 'arraybuffer',
        validateStatus: () => true,
        maxRedirects: init.redirect === 'manual' ? 0 : undefined,
        signal: init.signal ?? undefined,
      });
    } catch (error) {
      if (init.signal?.aborted) {
        throw init.signal.reason;
      }
      // Axios's error for a request that got no answer (a refused or
      // dropped connection, a timeout): fetch's is a TypeError.
      if (
        (error as { isAxiosError?: unknown }).isAxiosError === true &&
        (error as { response?: unknown }).response === undefined
      ) {
        throw new TypeError('fetch failed', { cause: error });
      }
      throw error;
    }
    return new Response(
      NULL_BODY_STATUSES.has(answer.status) ? null : toBytes(answer.data),
      {
        status: answer.status,
        statusText: reasonPhrase(answer.statusText),
        headers: toHeaders(answer.headers),
      },
    );
  };
}

/**
 * A reason phrase as HTTP defines it (tabs, spaces, visible ASCII and
 * obs-text), the only `statusText` a `Response` takes.
 */
const REASON_PHRASE = /^[\t\x20-\x7E\x80-\xFF]*$/;

/**
 * `text` when a `Response` takes it as its `statusText`, else `''`: Node.js
 * hands axios a reason phrase with any byte but CR and LF (a control
 * character), which would make the answer a `TypeError`, taken for no
 * answer at all and sent again.
 */
function reasonPhrase(text: unknown): string {
  return typeof text === 'string' && REASON_PHRASE.test(text) ? text : '';
}

function toBytes(data: unknown): Uint8Array<ArrayBuffer> {
  if (data instanceof Uint8Array) {
    // Axios's `arraybuffer` data: a Buffer (Node.js) over an ArrayBuffer,
    // never a SharedArrayBuffer, which a Response would not take.
    return data as Uint8Array<ArrayBuffer>;
  }
  if (data instanceof ArrayBuffer) {
    return new Uint8Array(data);
  }
  if (data === undefined) {
    // An answer without data (an adapter's of the application): no bytes.
    return new Uint8Array();
  }
  // Data an interceptor or a transform turned into a value: its JSON.
  return new TextEncoder().encode(
    typeof data === 'string' ? data : JSON.stringify(data),
  );
}

/** Axios's response headers (an `AxiosHeaders` or a plain object) as `Headers`. */
function toHeaders(source: unknown): Headers {
  const headers = new Headers();
  const entries =
    typeof (source as { toJSON?: unknown })?.toJSON === 'function'
      ? (source as { toJSON(): Record<string, unknown> }).toJSON()
      : ((source ?? {}) as Record<string, unknown>);
  for (const [name, value] of Object.entries(entries)) {
    for (const one of Array.isArray(value) ? value : [value]) {
      if (one !== undefined && one !== null) {
        headers.append(name, String(one));
      }
    }
  }
  return headers;
}
