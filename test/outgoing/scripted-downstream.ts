import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * What the downstream stand-in does with one request, instead of answering:
 * - `drop`: closes the connection before charging;
 * - `drop-after`: charges, then closes the connection (the answer is lost);
 * - `409`, `429`, `503`: answers that status with `Retry-After: <retryAfter>`;
 * - `hang`: never answers (the caller's timeout ends it);
 * - `400`: refuses (a final answer);
 * - `replayed-500`: answers 500 marked `Idempotent-Replayed: true`.
 */
export type DownstreamFault =
  | 'drop'
  | 'drop-after'
  | '409'
  | '429'
  | '503'
  | 'hang'
  | '400'
  | 'replayed-500';

/** The faults a scripted downstream may draw for a test of many operations. */
export const TRANSIENT_FAULTS: readonly DownstreamFault[] = [
  'drop',
  'drop-after',
  '409',
  '429',
  '503',
  'hang',
];

/** One request the stand-in received. */
export interface ReceivedCall {
  /** The `Idempotency-Key` it carried. */
  readonly key: string | undefined;
  /** The `reference` of its body: the order it charges for. */
  readonly reference: string | undefined;
  /** When it arrived (`performance.now()`). */
  readonly at: number;
  /** What the stand-in did with it: a fault, or `charged`. */
  readonly outcome: DownstreamFault | 'charged';
}

/**
 * An idempotent downstream service (a payment provider) over real HTTP:
 * `POST /charges` charges at most once per `Idempotency-Key`, and answers
 * the same charge to every request with that key. Requests are told apart
 * by the `reference` of their body as well, which a test knows before it
 * sends anything (the key a request derives is known only once it claimed
 * its key): each reference can be given a script of faults, played one per
 * request in order before it answers normally.
 */
export class ScriptedDownstream {
  /** Every request, in the order they came. */
  readonly received: ReceivedCall[] = [];
  /** The charges made, by key: what the customer is billed for. */
  readonly charges = new Map<string, { id: string; amount: number }>();
  private readonly scripts = new Map<string, DownstreamFault[]>();
  private server?: Server;
  /** The `Retry-After` of its 409, 429 and 503 answers, in seconds. */
  retryAfter = 0;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => (body += chunk.toString()));
      request.on('end', () => {
        const header = request.headers['idempotency-key'];
        const key = typeof header === 'string' ? header : undefined;
        const { amount, reference } = JSON.parse(body) as {
          amount: number;
          reference?: string;
        };
        const fault =
          reference === undefined
            ? undefined
            : this.scripts.get(reference)?.shift();
        this.received.push({
          key,
          reference,
          at: performance.now(),
          outcome: fault ?? 'charged',
        });
        const charge = () => {
          let charged = this.charges.get(key ?? '');
          if (!charged) {
            charged = { id: `ch_${this.charges.size + 1}`, amount };
            this.charges.set(key ?? '', charged);
          }
          return charged;
        };
        switch (fault) {
          case 'drop':
            request.socket.destroy();
            return;
          case 'drop-after':
            charge();
            request.socket.destroy();
            return;
          case 'hang':
            return;
          case '409':
          case '429':
          case '503':
            response
              .writeHead(Number(fault), {
                'retry-after': String(this.retryAfter),
              })
              .end();
            return;
          case '400':
            response
              .writeHead(400, { 'content-type': 'application/json' })
              .end(JSON.stringify({ error: 'card_declined' }));
            return;
          case 'replayed-500':
            response
              .writeHead(500, { 'idempotent-replayed': 'true' })
              .end('{"error":"stored failure"}');
            return;
          default:
            if (!key) {
              response.writeHead(400).end('{"error":"no key"}');
              return;
            }
            response
              .writeHead(201, { 'content-type': 'application/json' })
              .end(JSON.stringify(charge()));
        }
      });
    });
    await new Promise<void>((resolve) =>
      this.server!.listen(0, '127.0.0.1', resolve),
    );
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /**
   * Plays `faults`, one per request for the order `reference`, before
   * answering normally.
   */
  script(reference: string, ...faults: DownstreamFault[]): void {
    this.scripts.set(reference, [...faults]);
  }

  /** The requests that came for the order `reference`, in order. */
  callsWith(reference: string): ReceivedCall[] {
    return this.received.filter((call) => call.reference === reference);
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>(
      (resolve) => this.server?.close(() => resolve()) ?? resolve(),
    );
  }
}
