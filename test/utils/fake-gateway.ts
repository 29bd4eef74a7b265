import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A charge the stand-in made: an effect, what the customer is billed for. */
export interface GatewayCharge {
  readonly id: string;
  readonly amount: number;
}

/** A charge call the stand-in received (an HTTP request), as it came. */
export interface GatewayCall {
  /** Its `Idempotency-Key` header; `undefined` without one. */
  readonly key: string | undefined;
  /** Its body, as text. */
  readonly body: string;
  /** The charge it was answered with: made by this call, or replayed. */
  readonly charge: GatewayCharge;
}

/**
 * A payment gateway stand-in: a real HTTP server that charges at most once
 * per idempotency key, as a real gateway does. It counts calls (HTTP
 * requests received) apart from charges (effects): a call that repeats a
 * key gets the first charge of that key back and charges nothing, so a
 * caller that sends a call again with its key (its attempt timed out, its
 * connection broke) makes one charge of several calls. A call without a key
 * is charged every time.
 */
export class FakeGateway {
  /** Charge calls received (HTTP requests), by idempotency key. */
  readonly calls = new Map<string, number>();
  /** Every charge call received, in the order they came. */
  readonly received: GatewayCall[] = [];
  /** Every charge made (the effects), in the order they were made. */
  readonly charges: GatewayCharge[] = [];
  private readonly byKey = new Map<string, GatewayCharge>();
  private server?: Server;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => (body += chunk.toString()));
      request.on('end', () => {
        const header = request.headers['idempotency-key'];
        const key = typeof header === 'string' ? header : undefined;
        this.calls.set(String(key), (this.calls.get(String(key)) ?? 0) + 1);
        let charge = key === undefined ? undefined : this.byKey.get(key);
        if (!charge) {
          charge = {
            id: `ch_${this.charges.length + 1}`,
            amount: (JSON.parse(body) as { amount: number }).amount,
          };
          this.charges.push(charge);
          if (key !== undefined) {
            this.byKey.set(key, charge);
          }
        }
        this.received.push({ key, body, charge });
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

  /** Charges made (what the customer is billed for): effects, not calls. */
  get chargeCount(): number {
    return this.charges.length;
  }

  /** The charge made under idempotency key `key`, if any. */
  chargeOf(key: string): GatewayCharge | undefined {
    return this.byKey.get(key);
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
