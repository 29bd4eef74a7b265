import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Barrier } from '../utils/barrier.js';
import type { FakeGateway } from '../utils/fake-gateway.js';
import { fetchResending } from '../utils/http-client.js';

/** One `POST /payments` as its client saw it. */
export interface PaymentAttempt {
  readonly key: string;
  /**
   * `answered`: an HTTP response came back; `transport`: the connection
   * failed or closed without one; `hang`: nothing came back in time.
   */
  readonly outcome: 'answered' | 'transport' | 'hang';
  readonly status?: number;
  readonly contentType?: string | null;
  readonly retryAfter?: string | null;
  /** Whether it carries `Idempotent-Replayed: true`. */
  readonly replayed?: boolean;
  /** The body, byte for byte. */
  readonly body?: Buffer;
  /** What the client saw instead of a response. */
  readonly error?: string;
  /**
   * How many times it was sent: more than once when a connection was lost
   * before any response, and the client sent it again with the same key and
   * body ({@link fetchResending}).
   */
  readonly attempts?: number;
}

/** The body of the payment for `key`: the same for every retry of it. */
export function paymentFor(key: string): Record<string, unknown> {
  let amount = 1000;
  for (const char of key) {
    amount = (amount * 31 + char.charCodeAt(0)) % 100_000;
  }
  return { amount: amount + 1, currency: 'EUR', merchantId: `m_${key}` };
}

/**
 * Sends `POST /payments` for `key` and records what comes back, whatever it
 * is: an answer, a transport error, or nothing within `timeoutMs` (a hang).
 * A connection lost before any response is sent again, up to `attempts`
 * times in all; the transport error recorded is the last attempt's.
 */
export async function postPayment(
  url: string,
  key: string,
  timeoutMs = 10_000,
  attempts = 3,
): Promise<PaymentAttempt> {
  try {
    const sent = await fetchResending(
      `${url}/payments`,
      {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          'Idempotency-Key': key,
        },
        body: JSON.stringify(paymentFor(key)),
        timeoutMs,
      },
      attempts,
    );
    const { response } = sent;
    return {
      attempts: sent.attempts,
      key,
      outcome: 'answered',
      status: response.status,
      contentType: response.headers.get('content-type'),
      retryAfter: response.headers.get('retry-after'),
      replayed: response.headers.get('idempotent-replayed') === 'true',
      body: Buffer.from(await response.arrayBuffer()),
    };
  } catch (error) {
    const { name, message, cause } = error as Error & { cause?: Error };
    return {
      key,
      outcome: name === 'TimeoutError' ? 'hang' : 'transport',
      error: `${message}${cause ? `: ${cause.message}` : ''}`,
    };
  }
}

/** An attempt of the load, with when it was sent. */
export interface LoadAttempt extends PaymentAttempt {
  /** The phase the test was in when the request was sent. */
  readonly sentIn: string;
  /** When it was sent and when it came back (ms since the epoch). */
  readonly sentAt?: number;
  readonly answeredAt?: number;
}

/**
 * A steady load of unique-key payments: `clients` loops, each sending one
 * request with a new key as soon as its previous one has come back. The test
 * waits on what the answers say ({@link PaymentLoad.until}), never on time.
 */
export class PaymentLoad {
  /** Every attempt that has come back, in the order they did. */
  readonly attempts: LoadAttempt[] = [];
  /** Set by the test; recorded with each request sent. */
  phase = 'before';
  private running = false;
  private loops: Array<Promise<void>> = [];
  private sent = 0;
  private readonly waiters: Array<{
    condition: (attempts: readonly LoadAttempt[]) => boolean;
    resolve: () => void;
  }> = [];

  /**
   * @param timeoutMs how long a request may take before it counts as a hang.
   * @param nextKey the key of the `sent`-th request: a new one unless told.
   */
  constructor(
    private readonly url: string,
    prefix: string,
    private readonly clients = 4,
    private readonly timeoutMs = 10_000,
    private readonly nextKey = (sent: number) => `${prefix}${sent}`,
  ) {}

  /** Starts the clients. */
  start(): this {
    this.running = true;
    this.loops = Array.from({ length: this.clients }, () => this.loop());
    return this;
  }

  /**
   * Resolves once `condition` holds for the attempts come back so far.
   * Fails after `timeoutMs`.
   */
  until(
    condition: (attempts: readonly LoadAttempt[]) => boolean,
    description: string,
    timeoutMs = 15_000,
  ): Promise<void> {
    if (condition(this.attempts)) {
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(
          new Error(`Timed out waiting for ${description}: ${this.summary()}`),
        );
      }, timeoutMs);
      const waiter = {
        condition,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      this.waiters.push(waiter);
    });
  }

  /**
   * What has come back so far, by the phase it was sent in and its outcome
   * (`201`, `503`, `hang`…), and how many requests are still out: what a
   * timed-out wait reports.
   */
  summary(): string {
    const counts = new Map<string, number>();
    for (const { sentIn, outcome, status } of this.attempts) {
      const what = `${sentIn} ${outcome === 'answered' ? status : outcome}`;
      counts.set(what, (counts.get(what) ?? 0) + 1);
    }
    const answered = [...counts].map(([what, n]) => `${n} × ${what}`);
    return `${this.sent - this.attempts.length} out; ${answered.join(', ') || 'nothing back'}`;
  }

  /** Stops sending, and waits for the requests still out to come back. */
  async stop(): Promise<readonly LoadAttempt[]> {
    this.running = false;
    await Promise.all(this.loops);
    return this.attempts;
  }

  private async loop(): Promise<void> {
    while (this.running) {
      this.sent += 1;
      const key = this.nextKey(this.sent);
      const sentIn = this.phase;
      const sentAt = Date.now();
      // Sent once: the load records what each request met, a lost
      // connection included; the scenarios send those again themselves.
      const attempt = await postPayment(this.url, key, this.timeoutMs, 1);
      this.attempts.push({
        ...attempt,
        sentIn,
        sentAt,
        answeredAt: Date.now(),
      });
      for (const waiter of this.waiters.filter((w) =>
        w.condition(this.attempts),
      )) {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        waiter.resolve();
      }
    }
  }
}

/**
 * A payment gateway in front of a {@link FakeGateway} that can hold the
 * charge of one idempotency key: the request making it then sits inside its
 * transaction, idle, for as long as the test wants.
 */
export class HoldingGateway {
  url = '';
  private server?: Server;
  private held?: { key: string; arrived: Barrier; gate: Barrier };

  constructor(private readonly gateway: FakeGateway) {}

  /** Listens on a free loopback port (`url`). */
  async start(): Promise<this> {
    this.server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        void this.forward(
          request.url ?? '/',
          String(request.headers['idempotency-key']),
          Buffer.concat(chunks),
        ).then(
          ({ status, body }) =>
            response
              .writeHead(status, { 'content-type': 'application/json' })
              .end(body),
          () => response.writeHead(502).end(),
        );
      });
    });
    await new Promise<void>((resolve) =>
      this.server!.listen(0, '127.0.0.1', resolve),
    );
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /**
   * Holds the next charge with idempotency key `key` until `release()`.
   * @returns a promise that resolves once that charge has arrived.
   */
  hold(key: string): Promise<void> {
    this.held = { key, arrived: new Barrier(), gate: new Barrier() };
    return this.held.arrived.reached();
  }

  /** Lets the held charge through to the gateway. */
  release(): void {
    this.held?.gate.open();
  }

  /** Lets any held charge go, and closes the server. */
  async stop(): Promise<void> {
    this.release();
    this.server?.closeAllConnections();
    await new Promise<void>(
      (resolve) => this.server?.close(() => resolve()) ?? resolve(),
    );
  }

  private async forward(
    path: string,
    key: string,
    body: Buffer,
  ): Promise<{ status: number; body: string }> {
    if (this.held?.key === key) {
      const { arrived, gate } = this.held;
      void arrived.wait();
      await gate.wait();
    }
    const response = await fetch(`${this.gateway.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: new Uint8Array(body),
    });
    return { status: response.status, body: await response.text() };
  }
}
