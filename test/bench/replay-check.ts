import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { SampleProcess } from '../utils/sample-process.js';
import { BODY } from './scenario.js';

/** The same key with this body is another request: 422 expected. */
const OTHER_BODY = JSON.stringify({
  amount: 990,
  currency: 'EUR',
  merchantId: 'm_42',
});

/** What one check of a route's replay saw. */
export interface ReplayCheck {
  readonly store: string;
  readonly library: string;
  readonly path: string;
  /** Statuses of the request, of its duplicate, and of the key with another body. */
  readonly statuses: readonly [number, number, number];
  /** The duplicate said `Idempotent-Replayed: true`. */
  readonly replayedHeader: boolean;
  /** The duplicate's body is the first response's, byte for byte. */
  readonly sameBody: boolean;
  /** Payments written with the first response's charge (1: the handler ran once). */
  readonly payments: number;
  readonly ok: boolean;
}

/**
 * Sends a request, the same again, then the same key with another body,
 * and counts the payments written for that charge in the app's database
 * (`database`, a URL); `store` and `library` name what answered.
 */
export async function checkReplay(
  app: SampleProcess,
  database: string,
  store: string,
  library: string,
  path: string,
): Promise<ReplayCheck> {
  const key = `check-${randomUUID()}`;
  const post = async (body: string) => {
    const response = await fetch(`${app.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body,
    });
    return { response, text: await response.text() };
  };
  const one = await post(BODY);
  const two = await post(BODY);
  const other = await post(OTHER_BODY);
  const db = new pg.Client({ connectionString: database });
  await db.connect();
  let payments: number;
  try {
    const { chargeId } = JSON.parse(one.text) as { chargeId: string };
    const { rows } = await db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM payments WHERE charge_id = $1',
      [chargeId],
    );
    payments = rows[0].n;
  } finally {
    await db.end();
  }
  const statuses = [
    one.response.status,
    two.response.status,
    other.response.status,
  ] as const;
  const replayedHeader =
    two.response.headers.get('idempotent-replayed') === 'true';
  const sameBody = two.text === one.text;
  return {
    store,
    library,
    path,
    statuses,
    replayedHeader,
    sameBody,
    payments,
    ok:
      statuses[0] === 201 &&
      statuses[1] === 201 &&
      statuses[2] === 422 &&
      replayedHeader &&
      sameBody &&
      payments === 1,
  };
}

export function printCheck(check: ReplayCheck): void {
  const [one, two, other] = check.statuses;
  console.log(
    `replay check, ${check.library} on ${check.store} (POST ${check.path}): ${one}, then ${two}` +
      `${check.replayedHeader ? ' with Idempotent-Replayed: true' : ' WITHOUT Idempotent-Replayed'}, ` +
      `${check.sameBody ? 'the same body' : 'ANOTHER body'}, ${check.payments} payment written; ` +
      `the key with another body: ${other} (${check.ok ? 'ok' : 'NOT as expected'})`,
  );
}
