import { request } from 'node:http';
import type { SeededRandom } from './seeded-random.js';

/** The body of `POST /payments`. */
export interface PaymentBody {
  readonly amount: number;
  readonly currency: string;
  readonly merchantId: string;
}

/**
 * Why a request was sent: the payment itself (until a 2xx); its rival,
 * another body under its key sent right after the payment's first failed
 * answer (until 422, its own 2xx, or 502 for a charge the gateway refused);
 * a duplicate of the key's 2xx; another body under the key after its 2xx
 * (must get 422); or the check after the run that no key is stuck.
 */
export type Role = 'payment' | 'rival' | 'replay' | 'conflict' | 'final';

/** One request and what came back, as the client saw it. */
export interface Exchange {
  readonly key: string;
  readonly role: Role;
  /** The body sent. */
  readonly sent: PaymentBody;
  /** Index of the instance it was sent to. */
  readonly instance: number;
  /** The data library that instance writes with, if the client knows it. */
  readonly library?: string;
  /** When it was sent, in ms since the run started. */
  readonly sentAt: number;
  readonly tookMs: number;
  readonly status?: number;
  /** Whether it carries `Idempotent-Replayed: true`. */
  readonly replayed?: boolean;
  readonly retryAfter?: string;
  /** The body, byte for byte. */
  readonly body?: Buffer;
  /** Instead of a response: the socket's error code, or `timeout`. */
  readonly error?: string;
}

type Reply =
  | {
      readonly status: number;
      readonly replayed: boolean;
      readonly retryAfter?: string;
      readonly body: Buffer;
    }
  | { readonly error: string };

/**
 * Sends one `POST /payments` on a connection of its own (no keep-alive: a
 * connection closed while idle is never reused), and gives up after
 * `timeoutMs`.
 */
export function postPayment(
  url: string,
  key: string,
  body: PaymentBody,
  timeoutMs: number,
): Promise<Reply> {
  return new Promise((resolve) => {
    const payload = JSON.stringify(body);
    let settled = false;
    const settle = (reply: Reply) => {
      if (!settled) {
        settled = true;
        clearTimeout(timer);
        resolve(reply);
      }
    };
    const sent = request(
      `${url}/payments`,
      {
        method: 'POST',
        agent: false,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(payload),
          'idempotency-key': key,
        },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('error', (error: NodeJS.ErrnoException) =>
          settle({ error: error.code ?? error.message }),
        );
        response.on('end', () => {
          const retryAfter = response.headers['retry-after'];
          settle({
            status: response.statusCode ?? 0,
            replayed: response.headers['idempotent-replayed'] === 'true',
            ...(retryAfter !== undefined && { retryAfter }),
            body: Buffer.concat(chunks),
          });
        });
      },
    );
    const timer = setTimeout(() => {
      settle({ error: 'timeout' });
      sent.destroy();
    }, timeoutMs);
    sent.on('error', (error: NodeJS.ErrnoException) =>
      settle({ error: error.code ?? error.message }),
    );
    sent.end(payload);
  });
}

/** How the client goes on after an answer. */
type Verdict = 'done' | 'retry' | 'stop';

/**
 * A 2xx ends a payment, its duplicates and the final check; a 422 ends a
 * request with another body; a rival ends with a 2xx, a 422 or a 502. 409
 * (the key is being executed), 503 (retry with the same key) and a
 * connection lost or timed out are retried; any other answer stops the
 * request, for the checker to report.
 */
function verdict(role: Role, reply: Reply): Verdict {
  if ('error' in reply) {
    return 'retry';
  }
  const { status } = reply;
  if (status === 503 || (status === 409 && role !== 'conflict')) {
    return 'retry';
  }
  if (role === 'conflict') {
    return status === 422 ? 'done' : 'stop';
  }
  if (role === 'rival' && (status === 422 || status === 502)) {
    return 'done';
  }
  return status >= 200 && status < 300 ? 'done' : 'stop';
}

/** Where a request goes first, and what is done after its first failure. */
export interface SendOptions {
  /** The instance of the first attempt (else the random stream picks). */
  readonly instance?: number;
  /**
   * Run once, after the first answer that is retried (409, 503, a lost
   * connection), before the retry.
   */
  readonly afterFailure?: () => Promise<unknown>;
}

export interface SoakClientOptions {
  /** The instances' URLs now; `undefined` for one that is down. */
  readonly urls: () => ReadonlyArray<string | undefined>;
  /** Epoch ms the run started: exchanges are timed from it. */
  readonly startedAt: number;
  /** Each request's time limit. */
  readonly timeoutMs: number;
  /** The longest wait a `Retry-After` buys. */
  readonly retryAfterCapMs: number;
  /** Epoch ms after which nothing is sent any more. */
  readonly deadline: () => number;
  /** The data library instance `index` writes with, for the record. */
  readonly libraryOf?: (index: number) => string;
}

/**
 * Clients of the sample app that retry as a client of an idempotent API
 * does: the same key and the same body, after 409, 503 or a lost
 * connection, on an instance the caller's random stream picks each time,
 * until an answer ends it. Every exchange is kept for the checker.
 */
export class SoakClient {
  readonly exchanges: Exchange[] = [];

  constructor(private readonly options: SoakClientOptions) {}

  /**
   * Sends `body` under `key` until an answer ends it (see `verdict`) or the
   * deadline passes.
   * @returns the last exchange, `undefined` if none was made.
   */
  async send(
    key: string,
    body: PaymentBody,
    role: Role,
    random: SeededRandom,
    { instance: firstInstance, afterFailure }: SendOptions = {},
  ): Promise<Exchange | undefined> {
    const { urls, startedAt, timeoutMs, retryAfterCapMs, deadline, libraryOf } =
      this.options;
    let last: Exchange | undefined;
    let next = firstInstance;
    let failed = false;
    while (Date.now() < deadline()) {
      const all = urls();
      const first = next ?? random.int(0, all.length - 1);
      next = undefined;
      const instance = [...all.keys()]
        .map((offset) => (first + offset) % all.length)
        .find((index) => all[index] !== undefined);
      if (instance === undefined) {
        await delay(50);
        continue;
      }
      const sentAt = Date.now();
      const reply = await postPayment(all[instance]!, key, body, timeoutMs);
      last = {
        key,
        role,
        sent: body,
        instance,
        ...(libraryOf && { library: libraryOf(instance) }),
        sentAt: sentAt - startedAt,
        tookMs: Date.now() - sentAt,
        ...reply,
      };
      this.exchanges.push(last);
      const then = verdict(role, reply);
      if (then !== 'retry') {
        return last;
      }
      if (!failed) {
        failed = true;
        await afterFailure?.();
      }
      if ('error' in reply) {
        await delay(reply.error === 'timeout' ? 0 : random.int(20, 100));
      } else {
        const asked = Number(reply.retryAfter ?? '0') * 1000;
        await delay(
          Math.min(Number.isFinite(asked) ? asked : 0, retryAfterCapMs) +
            random.int(0, 100),
        );
      }
    }
    return last;
  }
}

/** Waits `ms`: a client's think time or back-off, never a race. */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
