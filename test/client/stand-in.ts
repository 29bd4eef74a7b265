import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * How the stand-in answers one attempt of a key:
 * - `drop`: destroys the connection once the request is read, before any
 *   effect;
 * - `effect-drop`: takes effect, then destroys the connection (the answer
 *   is lost, the effect is not);
 * - `hang`: never answers, no effect;
 * - `effect-hang`: takes effect, never answers;
 * - `stream`: takes effect, sends the status, the headers and a first chunk
 *   of the body, and never ends it;
 * - a status: answers it with a problem body (and `Retry-After`,
 *   `Idempotent-Replayed: true`, under the stand-in's name for it, when
 *   given), no effect.
 */
export type ScriptedAnswer =
  | 'drop'
  | 'effect-drop'
  | 'hang'
  | 'effect-hang'
  | 'stream'
  | {
      readonly status: number;
      readonly retryAfter?: string;
      readonly replayed?: boolean;
    };

/** One attempt, as the stand-in received it. */
export interface ReceivedAttempt {
  /** Its idempotency key header (under the stand-in's `headerName`). */
  readonly key: string | undefined;
  readonly method: string;
  readonly contentType: string | undefined;
  /** The body, byte for byte. */
  readonly body: Buffer;
  /** `performance.now()` when the stand-in had read it. */
  readonly at: number;
  /** Every header, as Node.js parsed them. */
  readonly headers: Record<string, string | string[] | undefined>;
}

/**
 * A downstream idempotent API stand-in: a real HTTP server whose every key
 * takes effect at most once, as the module's do. Each attempt of a key gets
 * the next answer of the key's script (its own, else a copy of
 * `defaultScript`); once the script is used up, the key takes effect (201
 * with a new effect id) or, if it already has, gets its stored answer back
 * with `Idempotent-Replayed: true`.
 */
export class StandInDownstream {
  /** Attempts received, by key (`''` for a request without one). */
  readonly received = new Map<string, ReceivedAttempt[]>();
  /**
   * The answer stored for each key that took effect: one entry per key that
   * ever did, so a retry under a new key would show as a second effect.
   */
  readonly effects = new Map<string, string>();
  /** The script of every key without one of its own. */
  defaultScript: readonly ScriptedAnswer[] = [];
  /**
   * When set, chooses the script of a key without one of its own from its
   * first attempt (its body, say), instead of {@link defaultScript}.
   */
  scriptOf?: (first: ReceivedAttempt) => readonly ScriptedAnswer[];
  private readonly scripts = new Map<string, ScriptedAnswer[]>();
  private readonly arrivals: Array<{
    key: string;
    count: number;
    resolve: () => void;
  }> = [];
  private server?: Server;
  url = '';

  /**
   * @param headerName the request header of the key.
   * @param replayHeaderName the response header that marks a replay, as a
   * module with `replayHeaderName` renames it.
   */
  constructor(
    private readonly headerName = 'idempotency-key',
    private readonly replayHeaderName = 'idempotent-replayed',
  ) {}

  /** Answers the next attempts of `key` with `answers`, in order. */
  script(key: string, answers: readonly ScriptedAnswer[]): void {
    this.scripts.set(key, [...answers]);
  }

  /** The attempts of `key` received so far. */
  attempts(key: string): ReceivedAttempt[] {
    return this.received.get(key) ?? [];
  }

  /** Every attempt received, whatever its key. */
  get total(): number {
    return [...this.received.values()].reduce((n, list) => n + list.length, 0);
  }

  /** Resolves once `count` attempts of `key` were received. */
  arrived(key: string, count = 1): Promise<void> {
    if (this.attempts(key).length >= count) {
      return Promise.resolve();
    }
    return new Promise((resolve) =>
      this.arrivals.push({ key, count, resolve }),
    );
  }

  async start(): Promise<this> {
    this.server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        const header = request.headers[this.headerName];
        const key = typeof header === 'string' ? header : undefined;
        const attempt: ReceivedAttempt = {
          key,
          method: request.method ?? '',
          contentType: request.headers['content-type'],
          body: Buffer.concat(chunks),
          at: performance.now(),
          headers: { ...request.headers },
        };
        this.record(key ?? '', attempt);
        this.answer(key ?? '', attempt, response);
      });
    });
    // Idle connections stay open: a client never sends on one the server
    // has just closed (an attempt the server would not count).
    this.server.keepAliveTimeout = 0;
    await new Promise<void>((resolve) =>
      this.server!.listen(0, '127.0.0.1', resolve),
    );
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>(
      (resolve) => this.server?.close(() => resolve()) ?? resolve(),
    );
  }

  private record(key: string, attempt: ReceivedAttempt): void {
    const list = this.received.get(key) ?? [];
    list.push(attempt);
    this.received.set(key, list);
    for (const arrival of this.arrivals.filter(
      (a) => a.key === key && list.length >= a.count,
    )) {
      this.arrivals.splice(this.arrivals.indexOf(arrival), 1);
      arrival.resolve();
    }
  }

  private answer(
    key: string,
    attempt: ReceivedAttempt,
    response: ServerResponse,
  ): void {
    if (!this.scripts.has(key)) {
      this.scripts.set(key, [
        ...(this.scriptOf?.(attempt) ?? this.defaultScript),
      ]);
    }
    const next = this.scripts.get(key)!.shift();
    if (next === 'drop') {
      response.socket?.destroy();
    } else if (next === 'hang') {
      return;
    } else if (next === 'effect-drop' || next === 'effect-hang') {
      this.takeEffect(key);
      if (next === 'effect-drop') {
        response.socket?.destroy();
      }
    } else if (next === 'stream') {
      this.takeEffect(key);
      response.writeHead(201, { 'content-type': 'text/plain' });
      response.write('first chunk');
    } else if (next) {
      response
        .writeHead(next.status, {
          'content-type': 'application/problem+json',
          ...(next.retryAfter === undefined
            ? {}
            : { 'retry-after': next.retryAfter }),
          ...(next.replayed ? { [this.replayHeaderName]: 'true' } : {}),
        })
        .end(JSON.stringify({ status: next.status, key }));
    } else {
      const replayed = this.effects.has(key);
      const body = replayed ? this.effects.get(key)! : this.takeEffect(key);
      response
        .writeHead(201, {
          'content-type': 'application/json',
          ...(replayed ? { [this.replayHeaderName]: 'true' } : {}),
        })
        .end(body);
    }
  }

  /** Takes effect for `key` unless it already did; returns its stored answer. */
  private takeEffect(key: string): string {
    if (!this.effects.has(key)) {
      this.effects.set(
        key,
        JSON.stringify({ effect: `effect-${this.effects.size + 1}` }),
      );
    }
    return this.effects.get(key)!;
  }
}
