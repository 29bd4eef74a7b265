import pg from 'pg';

/** A session of the test that LISTENs on a channel and keeps what arrives. */
export interface Listener {
  /** Payloads received so far, in order. */
  readonly payloads: readonly string[];
  /**
   * Resolves once `count` payloads matching `predicate` arrived (counting
   * those that arrived before the call).
   */
  next(predicate: (payload: string) => boolean, count?: number): Promise<void>;
  /**
   * Sends `NOTIFY channel, marker` from another session and waits for it to
   * come back: every notification committed before it has arrived by then
   * (PostgreSQL delivers them in commit order). Returns the payloads that
   * arrived since the previous drain (or the start) and before the marker.
   */
  drain(): Promise<string[]>;
  close(): Promise<void>;
}

/** LISTENs on `channel` in the database at `url`. */
export async function listen(url: string, channel: string): Promise<Listener> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  const payloads: string[] = [];
  const waiters: Array<{
    predicate: (payload: string) => boolean;
    count: number;
    resolve: () => void;
  }> = [];
  const matching = (predicate: (payload: string) => boolean) =>
    payloads.filter(predicate).length;
  client.on('notification', (message) => {
    if (message.channel !== channel) {
      return;
    }
    const payload = message.payload ?? '';
    payloads.push(payload);
    for (const waiter of waiters.splice(0)) {
      if (matching(waiter.predicate) >= waiter.count) {
        waiter.resolve();
      } else {
        waiters.push(waiter);
      }
    }
  });
  await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
  const isMarker = (payload: string) => payload.startsWith('test-marker:');
  let markers = 0;
  let drained = 0;
  const next = (predicate: (payload: string) => boolean, count = 1) => {
    if (matching(predicate) >= count) {
      return Promise.resolve();
    }
    return new Promise<void>((resolve) =>
      waiters.push({ predicate, count, resolve }),
    );
  };
  return {
    payloads,
    next,
    async drain() {
      const marker = `test-marker:${(markers += 1)}`;
      const sender = new pg.Client({ connectionString: url });
      await sender.connect();
      try {
        await sender.query('SELECT pg_notify($1, $2)', [channel, marker]);
      } finally {
        await sender.end();
      }
      await next((payload) => payload === marker);
      const end = payloads.indexOf(marker);
      const arrived = payloads
        .slice(drained, end)
        .filter((payload) => !isMarker(payload));
      drained = end + 1;
      return arrived;
    },
    async close() {
      await client.end();
    },
  };
}
