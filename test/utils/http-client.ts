import { request as httpRequest } from 'node:http';

/**
 * Codes of a connection lost before any response came back: the server
 * closed it (`UND_ERR_SOCKET`, "other side closed") or reset it
 * (`ECONNRESET`, `EPIPE`) under the request. The usual cause is a keep-alive
 * connection that sat idle past the server's keep-alive timeout while the
 * client, busy, had not yet seen it close: the client sends the next request
 * on it, and the server never reads it. A refused connection
 * (`ECONNREFUSED`: nothing listens) is not one of them.
 */
const CONNECTION_LOST = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET']);

/** Whether `error`, a rejection of `fetch`, is a connection lost before any response. */
export function isConnectionLost(error: unknown): boolean {
  // fetch rejects with TypeError('fetch failed') and the socket's error as
  // its cause. Not `instanceof`: under Jest the error is of another realm.
  const { message, cause } = error as {
    message?: unknown;
    cause?: { code?: unknown };
  };
  return (
    message === 'fetch failed' &&
    typeof cause?.code === 'string' &&
    CONNECTION_LOST.has(cause.code)
  );
}

/** A request whose body can be sent again as it is. */
export interface ResendableInit extends Omit<RequestInit, 'body' | 'signal'> {
  readonly body?: string | Uint8Array;
  /** Each attempt's own time limit (`AbortSignal.timeout`), if any. */
  readonly timeoutMs?: number;
}

/** A response, and how many times its request was sent to get it. */
export interface Sent {
  readonly response: Response;
  readonly attempts: number;
}

/**
 * `fetch`, as a client of an idempotent API sends a request: when the
 * connection is lost before any response ({@link isConnectionLost}), it sends
 * the same request again, with the same idempotency key and body, up to
 * `attempts` times in all; any other failure (a refused connection, a
 * timeout) and the last attempt's loss are thrown as they are. A response,
 * whatever its status, is returned: the request reached the server.
 *
 * Before sending again it lets the event loop run once (`setImmediate`), so
 * that the client sees the other connections the server closed meanwhile and
 * does not pick one of them for the next attempt.
 */
export async function fetchResending(
  url: string,
  { timeoutMs, ...init }: ResendableInit = {},
  attempts = 3,
): Promise<Sent> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      const response = await fetch(url, {
        ...init,
        signal:
          timeoutMs === undefined ? undefined : AbortSignal.timeout(timeoutMs),
      });
      return { response, attempts: attempt };
    } catch (error) {
      if (attempt >= attempts || !isConnectionLost(error)) {
        throw error;
      }
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }
}

/**
 * POSTs `{}` with JSON to `url` under idempotency key `key`, with the
 * `Host` header `host` (which `fetch` does not let a caller set): a request
 * for a controller's `host`.
 */
export function postWithHost(
  url: string,
  host: string,
  key: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const request = httpRequest(
      {
        hostname: target.hostname,
        port: target.port,
        path: target.pathname,
        method: 'POST',
        headers: {
          host,
          'content-type': 'application/json',
          'idempotency-key': key,
        },
      },
      (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () =>
          resolve({ status: response.statusCode ?? 0, body }),
        );
      },
    );
    request.on('error', reject);
    request.end('{}');
  });
}
