import { once } from 'node:events';
import {
  createServer,
  request,
  type IncomingHttpHeaders,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';

/** What the client of a {@link ResponseServer} got. */
export interface Received {
  readonly status: number;
  readonly statusMessage: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
  /** Whether the whole response arrived. */
  readonly complete: boolean;
}

/**
 * A plain Node.js HTTP server for the unit specs of what writes a
 * response (src/http/response-capture.ts): each request goes to the
 * handler the test set last, and {@link send} sends one on a connection of
 * its own. Listens in `beforeAll` and closes in `afterAll` of the spec
 * that makes it.
 */
export class ResponseServer {
  /** What the next request is served by. */
  handle: (response: ServerResponse) => void = () => undefined;
  private server: Server | undefined;
  private port = 0;

  constructor() {
    beforeAll(async () => {
      const server = createServer((incoming, response) => {
        incoming.resume();
        this.handle(response);
      });
      this.server = server;
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      this.port = (server.address() as AddressInfo).port;
    });
    afterAll(async () => {
      const { server } = this;
      if (server) {
        server.closeAllConnections();
        server.close();
        await once(server, 'close');
      }
    });
  }

  /** Sends a request on a connection of its own. */
  send(): { response: Promise<Received>; responded(): boolean } {
    let responded = false;
    const response = new Promise<Received>((resolve, reject) => {
      const outgoing = request(
        {
          host: '127.0.0.1',
          port: this.port,
          method: 'POST',
          path: '/',
          agent: false,
        },
        (incoming) => {
          responded = true;
          const chunks: Buffer[] = [];
          incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
          // A response cut short errors; `complete` tells.
          incoming.on('error', () => undefined);
          incoming.on('close', () =>
            resolve({
              status: incoming.statusCode ?? 0,
              statusMessage: incoming.statusMessage ?? '',
              headers: incoming.headers,
              body: Buffer.concat(chunks),
              complete: incoming.complete,
            }),
          );
        },
      );
      outgoing.on('error', reject);
      outgoing.end();
    });
    // A test that fails before awaiting the response must not crash the run
    // when the server then closes the connection.
    response.catch(() => undefined);
    return { response, responded: () => responded };
  }
}
