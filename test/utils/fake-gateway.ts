import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A payment gateway stand-in: a real HTTP server that charges at most once per
 * idempotency key, as a real gateway does, and counts every charge call.
 */
export class FakeGateway {
  /** Charge calls received, by idempotency key. */
  readonly calls = new Map<string, number>();
  private readonly charges = new Map<string, { id: string; amount: number }>();
  private server?: Server;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => (body += chunk.toString()));
      request.on('end', () => {
        const key = String(request.headers['idempotency-key']);
        this.calls.set(key, (this.calls.get(key) ?? 0) + 1);
        let charge = this.charges.get(key);
        if (!charge) {
          charge = {
            id: `ch_${this.charges.size + 1}`,
            amount: (JSON.parse(body) as { amount: number }).amount,
          };
          this.charges.set(key, charge);
        }
        response
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify(charge));
      });
    });
    await new Promise<void>((resolve) =>
      this.server!.listen(0, '127.0.0.1', resolve),
    );
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** Distinct charges made (what the customer is billed for). */
  get chargeCount(): number {
    return this.charges.size;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>(
      (resolve) => this.server?.close(() => resolve()) ?? resolve(),
    );
  }
}

/** Asks the gateway at `url` to charge `amount` under `idempotencyKey`. */
export async function requestCharge(
  url: string,
  amount: number,
  idempotencyKey: string,
): Promise<{ id: string; amount: number }> {
  const response = await fetch(`${url}/charges`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'idempotency-key': idempotencyKey,
    },
    body: JSON.stringify({ amount }),
  });
  return (await response.json()) as { id: string; amount: number };
}
