import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A charge the gateway made: at most one per idempotency key. */
export interface GatewayCharge {
  readonly id: string;
  readonly key: string;
  readonly amount: number;
  readonly currency: string;
}

/** One `POST /charges` as the gateway received it. */
export interface GatewayCall {
  readonly key: string;
  readonly amount: number;
  readonly currency: string;
  /** When it arrived (epoch ms). */
  readonly at: number;
  /**
   * Refused (400): its key had a charge for another amount or currency,
   * which it was not given.
   */
  readonly refused: boolean;
}

/**
 * The refusal of a key reused with other parameters, as Stripe words it
 * (`idempotency_error`).
 */
export const KEY_REUSED = {
  error: {
    type: 'idempotency_error',
    message:
      'Keys for idempotent requests can only be used with the same parameters they were first used with.',
  },
};

/**
 * A payment gateway stand-in for the soak: idempotent per key as real
 * gateways are (a call with a key it has seen and the same amount and
 * currency answers that key's charge; with another amount or currency it is
 * refused with 400 and {@link KEY_REUSED}, never given the charge), it
 * records every call and every charge, and answers after a delay the test
 * chooses (`delayMs`), as a real gateway takes its time. The charge is made
 * when the call arrives: a caller killed while it waits leaves the charge
 * behind, and its retry must get it back by the same key.
 */
export class RecordingGateway {
  readonly calls: GatewayCall[] = [];
  readonly charges = new Map<string, GatewayCharge>();
  url = '';
  private server?: Server;
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(private readonly delayMs: () => number) {}

  /** Listens on a free loopback port (`url`). */
  async start(): Promise<this> {
    this.server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        const key = String(request.headers['idempotency-key']);
        const { amount, currency } = JSON.parse(
          Buffer.concat(chunks).toString(),
        ) as { amount: number; currency: string };
        let charge = this.charges.get(key);
        if (!charge) {
          charge = { id: `ch_${this.charges.size + 1}`, key, amount, currency };
          this.charges.set(key, charge);
        }
        const refused =
          charge.amount !== amount || charge.currency !== currency;
        this.calls.push({ key, amount, currency, at: Date.now(), refused });
        const body = JSON.stringify(
          refused ? KEY_REUSED : { id: charge.id, amount: charge.amount },
        );
        const timer = setTimeout(() => {
          this.timers.delete(timer);
          // No keep-alive: a connection the gateway closes while idle is
          // then never one the app sends its next call on.
          response
            .writeHead(refused ? 400 : 200, {
              'content-type': 'application/json',
              connection: 'close',
            })
            .end(body);
        }, this.delayMs());
        this.timers.add(timer);
      });
    });
    await new Promise<void>((resolve) =>
      this.server!.listen(0, '127.0.0.1', resolve),
    );
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.timers.forEach((timer) => clearTimeout(timer));
    this.timers.clear();
    this.server?.closeAllConnections();
    await new Promise<void>(
      (resolve) => this.server?.close(() => resolve()) ?? resolve(),
    );
  }
}
