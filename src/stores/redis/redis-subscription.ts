import { Logger } from '@nestjs/common';
import type { RedisClient } from './redis-client.js';
import { messageOf } from '../../core/error-message.js';

/**
 * @internal Called with the key another instance completed, or without
 * arguments when any key may have changed (notifications were missed).
 */
export type CompletionListener = (scope?: string, key?: string) => void;

/**
 * @internal The Redis store's subscription to the completions that other
 * instances publish on its channel (`RedisKeys.channel`, each message the
 * JSON of a key's scope and key), on a connection of its own duplicated
 * from the store's client when the first listener comes. A failure is
 * logged, never thrown: waiters poll as well.
 */
export class RedisSubscription {
  private readonly logger = new Logger('Idempotency');
  private readonly listeners: CompletionListener[] = [];
  /** The subscription's connection, once a listener opened it. */
  private subscriber: RedisClient | undefined;
  private subscribed = false;
  private closed = false;

  /**
   * @param client the store's client, duplicated for the subscription.
   * @param channel the channel of the store's completions.
   */
  constructor(
    private readonly client: RedisClient,
    private readonly channel: string,
  ) {}

  /** Whether completions on other instances reach this one now. */
  get watching(): boolean {
    return this.subscribed;
  }

  /** The subscription's connection, if open. */
  get connection(): RedisClient | undefined {
    return this.subscriber;
  }

  /**
   * Adds `listener`, and subscribes (once) if the subscription is not
   * closed. After a reconnection, calls every listener without arguments:
   * messages were missed.
   */
  watch(listener: CompletionListener): void {
    this.listeners.push(listener);
    if (this.subscriber || this.closed) {
      return;
    }
    const subscriber = this.client.duplicate();
    this.subscriber = subscriber;
    subscriber.on('message', (channel: string, message: string) =>
      this.received(channel, message),
    );
    const lost = () => {
      this.subscribed = false;
    };
    subscriber.on('close', lost);
    subscriber.on('reconnecting', lost);
    subscriber.on('error', (error: Error) =>
      this.logger.warn(
        `The Redis subscription of completions failed (waiters poll): ${error.message}`,
      ),
    );
    subscriber.on('ready', () => void this.subscribe(subscriber));
    void this.subscribe(subscriber);
  }

  /** Closes the subscription's connection; no listener is called again. */
  async close(): Promise<void> {
    this.closed = true;
    this.subscribed = false;
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    await subscriber?.quit().catch(() => subscriber.disconnect());
  }

  /** Hands a key that another instance completed to every listener. */
  private received(channel: string, message: string): void {
    if (channel !== this.channel) {
      return;
    }
    let identity: unknown;
    try {
      identity = JSON.parse(message);
    } catch {
      return;
    }
    if (
      Array.isArray(identity) &&
      typeof identity[0] === 'string' &&
      typeof identity[1] === 'string'
    ) {
      for (const listener of this.listeners) {
        listener(identity[0], identity[1]);
      }
    }
  }

  private async subscribe(subscriber: RedisClient): Promise<void> {
    try {
      await subscriber.subscribe(this.channel);
    } catch (error) {
      this.logger.warn(
        `Subscribing to the completions failed (waiters poll): ${messageOf(error)}`,
      );
      return;
    }
    if (this.subscriber !== subscriber || this.subscribed) {
      return;
    }
    this.subscribed = true;
    // Anything may have completed while the subscription was down.
    for (const listener of this.listeners) {
      listener();
    }
  }
}
