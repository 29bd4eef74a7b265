import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Barrier } from '../utils/barrier.js';
import type { FakeGateway } from '../utils/fake-gateway.js';
import { fetchResending } from '../utils/http-client.js';

/**
 * A gateway in front of a {@link FakeGateway} that holds every charge call at
 * a barrier until the test opens it, then forwards it: the handler making the
 * call waits inside its transaction, with no statement running.
 *
 * A caller held long enough (its attempt's timeout, on a busy machine) gives
 * up and sends the call again with the same key: the second call is held
 * too, and both are forwarded, as a network delivers a request whose client
 * gave up. The gateway then gets two calls of one key and charges once.
 */
export class HeldGateway {
  /**
   * Charge calls wait here; `reached(n)` tells the test that calls of `n`
   * keys arrived (a call of a key already held waits uncounted).
   */
  barrier = new Barrier();
  /** Charge calls sent again after a connection lost before any response. */
  resent = 0;
  /** The keys whose calls each barrier counted. */
  private readonly counted = new WeakMap<Barrier, Set<string>>();
  private server?: Server;
  url = '';

  constructor(private readonly gateway: FakeGateway) {}

  async start(): Promise<this> {
    this.server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        const key = request.headers['idempotency-key'];
        void this.hold(key)
          .then(() =>
            fetchResending(`${this.gateway.url}${request.url ?? '/'}`, {
              method: request.method,
              headers: {
                'content-type': 'application/json',
                ...(typeof key === 'string' ? { 'idempotency-key': key } : {}),
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

  /** Waits at the barrier, counted as an arrival for the first call of `key` only. */
  private hold(key: string | string[] | undefined): Promise<void> {
    const { barrier } = this;
    const keys = this.counted.get(barrier) ?? new Set<string>();
    this.counted.set(barrier, keys);
    if (typeof key === 'string') {
      if (keys.has(key)) {
        return barrier.whenOpen();
      }
      keys.add(key);
    }
    return barrier.wait();
  }

  async stop(): Promise<void> {
    this.barrier.open();
    this.server?.closeAllConnections();
    await new Promise<void>(
      (resolve) => this.server?.close(() => resolve()) ?? resolve(),
    );
  }
}
