import { connect } from 'node:net';

/**
 * What came back for one request sent as raw bytes: a parsed response, or
 * nothing at all (the server closed the connection without answering).
 */
export interface RawResponse {
  /** Status of the first response, `undefined` when none was received. */
  readonly status: number | undefined;
  /** Lower-cased header names; a repeated header has several values. */
  readonly headers: ReadonlyMap<string, readonly string[]>;
  /** The body, de-chunked. */
  readonly body: Buffer;
  /** Everything received, as sent by the server. */
  readonly raw: Buffer;
  /** A socket error seen while talking to the server (e.g. `ECONNRESET`). */
  readonly socketError: string | undefined;
  /** The request was not answered within the time limit. */
  readonly timedOut: boolean;
}

const HEAD_END = Buffer.from('\r\n\r\n');

function dechunk(data: Buffer): Buffer {
  const parts: Buffer[] = [];
  let offset = 0;
  for (;;) {
    const lineEnd = data.indexOf('\r\n', offset);
    if (lineEnd < 0) {
      break;
    }
    const size = parseInt(data.subarray(offset, lineEnd).toString(), 16);
    if (!Number.isFinite(size) || size === 0) {
      break;
    }
    parts.push(data.subarray(lineEnd + 2, lineEnd + 2 + size));
    offset = lineEnd + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

/** Parses the first HTTP/1.x response in `raw`. */
export function parseResponse(
  raw: Buffer,
): Pick<RawResponse, 'status' | 'headers' | 'body'> {
  const headEnd = raw.indexOf(HEAD_END);
  const head = raw
    .subarray(0, headEnd < 0 ? raw.length : headEnd)
    .toString('latin1');
  const [statusLine = '', ...lines] = head.split('\r\n');
  const match = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(statusLine);
  const headers = new Map<string, string[]>();
  if (!match || headEnd < 0) {
    return { status: undefined, headers, body: Buffer.alloc(0) };
  }
  for (const line of lines) {
    const colon = line.indexOf(':');
    if (colon > 0) {
      const name = line.slice(0, colon).trim().toLowerCase();
      headers.set(name, [
        ...(headers.get(name) ?? []),
        line.slice(colon + 1).trim(),
      ]);
    }
  }
  const status = Number(match[1]);
  let body = raw.subarray(headEnd + HEAD_END.length);
  // A response to HEAD has no body bytes: slicing what arrived gives none.
  // (Node's answer to bytes it cannot parse has one, whatever the method.)
  if (status === 204 || status === 304) {
    body = Buffer.alloc(0);
  } else if (headers.get('transfer-encoding')?.[0]?.includes('chunked')) {
    body = dechunk(body);
  } else if (headers.has('content-length')) {
    body = body.subarray(0, Number(headers.get('content-length')?.[0]));
  }
  return { status, headers, body };
}

/**
 * Sends `request` as it is over a new TCP connection to `port` and reads
 * until the server closes it (the request says `Connection: close`). Nothing
 * is validated or normalized on the client side, unlike `fetch` or
 * `http.request`, which refuse invalid header values.
 */
export function exchange(
  port: number,
  request: Buffer,
  timeoutMs = 15_000,
): Promise<RawResponse> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1' });
    const chunks: Buffer[] = [];
    let socketError: string | undefined;
    let timedOut = false;
    let done = false;
    const finish = () => {
      if (done) {
        return;
      }
      done = true;
      clearTimeout(timer);
      const raw = Buffer.concat(chunks);
      resolve({
        ...parseResponse(raw),
        raw,
        socketError,
        timedOut,
      });
    };
    const timer = setTimeout(() => {
      timedOut = true;
      socket.destroy();
      finish();
    }, timeoutMs);
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', (error: NodeJS.ErrnoException) => {
      socketError = error.code ?? error.message;
    });
    socket.on('close', finish);
    // Written, not ended: a half-closed connection is a client that left,
    // and Node's server would abandon the request.
    socket.on('connect', () => socket.write(request));
  });
}
