import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { SpanKind, context, trace, type Tracer } from '@opentelemetry/api';

/** Request header that names a request's server span (`test.request`). */
export const REQUEST_ID_HEADER = 'x-test-request';

type RequestListener = (
  request: IncomingMessage,
  response: ServerResponse,
) => void;

/**
 * Opens a server span around every request of `server`, active while the
 * application handles it, the way an HTTP instrumentation does: the
 * platform's listeners run in the span's context, and the request and
 * response emitters are bound to it (so that the body, read later from the
 * socket, is parsed in it too). The span is named `<method> <url>`, carries
 * the request's `x-test-request` header as `test.request`, and ends when the
 * response closes.
 *
 * @returns a function that resolves once the span of a request named
 * `requestId` has ended (in the same process as the client, the response
 * may be read before the server's `close` event).
 */
export function traceRequests(
  server: Server,
  tracer: Tracer,
): (requestId: string) => Promise<void> {
  const listeners = server.listeners('request') as RequestListener[];
  const ended = new Map<string, { promise: Promise<void>; end: () => void }>();
  const entry = (requestId: string) => {
    let found = ended.get(requestId);
    if (!found) {
      let end!: () => void;
      const promise = new Promise<void>((resolve) => (end = resolve));
      found = { promise, end };
      ended.set(requestId, found);
    }
    return found;
  };
  server.removeAllListeners('request');
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    const requestId = request.headers[REQUEST_ID_HEADER];
    const span = tracer.startSpan(`${request.method} ${request.url}`, {
      kind: SpanKind.SERVER,
      attributes:
        typeof requestId === 'string' ? { 'test.request': requestId } : {},
    });
    const active = trace.setSpan(context.active(), span);
    context.bind(active, request);
    context.bind(active, response);
    response.once('close', () => {
      span.end();
      if (typeof requestId === 'string') {
        entry(requestId).end();
      }
    });
    context.with(active, () => {
      for (const listener of listeners) {
        listener.call(server, request, response);
      }
    });
  });
  return (requestId) => entry(requestId).promise;
}
