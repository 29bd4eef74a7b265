import { Logger } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import type { PostgresSession } from '../../interfaces/postgres-adapter.interface.js';
import { messageOf } from '../../core/error-message.js';

/** Channel of the NOTIFY a completion sends to the waiters of its key. */
export const COMPLETION_CHANNEL = 'idempotency_records';
/** `application_name` of the presence session, to find it in `pg_stat_activity`. */
export const PRESENCE_APPLICATION_NAME = 'idempotency-presence';
/** Longest wait between two attempts to reconnect. */
const MAX_BACKOFF_MS = 5_000;

/**
 * @internal The instance's presence: one dedicated session (not a pooled
 * connection) that holds a session advisory lock on the instance's random id,
 * so that another instance can tell at once that this one is gone and take
 * its keys over, and that LISTENs for the completions that wake waiters.
 *
 * A fast path only: a session can drop while its instance lives, so the lease
 * and the fenced completion stay what correctness rests on. The session is
 * re-established by itself when it drops.
 */
export class PostgresPresence {
  /** The instance's id, written as `owner_instance` while the lock is held. */
  readonly instance = randomUUID();
  private readonly logger = new Logger('Idempotency');
  private client: PostgresSession | undefined;
  private held = false;
  private stopped = false;
  private backoffMs = 100;
  private retry: NodeJS.Timeout | undefined;
  private readonly listeners = new Set<(payload?: string) => void>();

  constructor(
    /** Makes a new session, not yet open. */
    private readonly newSession: () => PostgresSession,
  ) {}

  /** The instance's id while its presence lock is held, else `null`. */
  get heldInstance(): string | null {
    return this.held ? this.instance : null;
  }

  /** Whether notifications can reach this instance now. */
  get listening(): boolean {
    return this.held;
  }

  /**
   * Calls `listener` with the payload of every completion notified, and
   * without one when the session drops or comes back (notifications may
   * have been missed meanwhile).
   */
  onNotification(listener: (payload?: string) => void): void {
    this.listeners.add(listener);
  }

  /** Opens the session; a failure is logged and retried, never thrown. */
  async start(): Promise<void> {
    this.stopped = false;
    await this.connect();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
    this.held = false;
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    if (this.stopped) {
      return;
    }
    const client = this.newSession();
    const lost = (error?: Error) => {
      if (this.client !== client) {
        return;
      }
      this.client = undefined;
      this.held = false;
      this.reset();
      if (!this.stopped) {
        this.logger.warn(
          `Presence session lost${error ? ` (${error.message})` : ''}: keys of this instance are protected by their leases until it is back`,
        );
        this.schedule();
      }
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', (message) => {
      if (message.payload !== undefined) {
        for (const listener of this.listeners) {
          listener(message.payload);
        }
      }
    });
    this.client = client;
    try {
      await client.connect();
      // Idle between notifications by design: a server's (or a role's)
      // idle session timeout would end it, and with it the instance's
      // presence, again and again.
      await client.query({
        text: `SELECT set_config(name, '0', false) FROM pg_settings
                WHERE name IN ('idle_session_timeout', 'idle_in_transaction_session_timeout')`,
      });
      const { rows } = await client.query<{ locked: boolean }>({
        text: `SELECT pg_try_advisory_lock(hashtextextended('idempotency:' || $1, 0)) AS locked`,
        values: [this.instance],
      });
      if (!rows[0]?.locked) {
        throw new Error('the presence lock of this instance is held elsewhere');
      }
      await client.query({ text: `LISTEN ${COMPLETION_CHANNEL}` });
      if (this.client !== client || this.stopped) {
        await client.end().catch(() => undefined);
        return;
      }
      this.held = true;
      this.backoffMs = 100;
      this.reset();
    } catch (error) {
      if (this.client === client) {
        this.client = undefined;
        this.held = false;
        this.logger.warn(
          `Presence session could not start (${messageOf(error)}): retrying`,
        );
        this.schedule();
      }
      await client.end().catch(() => undefined);
    }
  }

  private reset(): void {
    for (const listener of this.listeners) {
      listener();
    }
  }

  private schedule(): void {
    if (this.stopped || this.retry) {
      return;
    }
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.connect();
    }, this.backoffMs).unref();
    this.backoffMs = Math.min(this.backoffMs * 2, MAX_BACKOFF_MS);
  }
}
