import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Barrier } from '../utils/barrier.js';
import type { FakeGateway } from '../utils/fake-gateway.js';
import { fetchResending } from '../utils/http-client.js';

/**
 * A gateway in front of a {@link FakeGateway} that holds every charge call at
 * a barrier until the test opens it, then forwards it: the handler making the
 * call waits inside its transaction, with no statement running.
 */
export class HeldGateway {
  /** Charge calls wait here; `reached(n)` tells the test they arrived. */
  barrier = new Barrier();
  /** Charge calls sent again after a connection lost before any response. */
  resent = 0;
  private server?: Server;
  url = '';

  constructor(private readonly gateway: FakeGateway) {}

  async start(): Promise<this> {
    this.server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        void this.barrier
          .wait()
          .then(() =>
            fetchResending(`${this.gateway.url}${request.url ?? '/'}`, {
              method: request.method,
              headers: {
                'content-type': 'application/json',
                'idempotency-key': String(request.headers['idempotency-key']),
              },
              body: Buffer.concat(chunks),
            }),
          )
          .then(async ({ response: answer, attempts }) => {
            this.resent += attempts > 1 ? 1 : 0;
            response
              .writeHead(answer.status, {
                'content-type':
                  answer.headers.get('content-type') ?? 'application/json',
              })
              .end(Buffer.from(await answer.arrayBuffer()));
          })
          .catch(() => response.destroy());
      });
    });
    await new Promise<void>((resolve) =>
      this.server!.listen(0, '127.0.0.1', resolve),
    );
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.barrier.open();
    this.server?.closeAllConnections();
    await new Promise<void>(
      (resolve) => this.server?.close(() => resolve()) ?? resolve(),
    );
  }
}
