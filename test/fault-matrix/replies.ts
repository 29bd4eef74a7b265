/** Answers a client takes at most to get past 503 and 409. */
export const MAX_TRIES = 10;
/** What `POST /payments` charges; `/payments/limited` refuses `OVER_LIMIT`. */
export const AMOUNT = 1250;
export const OVER_LIMIT = 5000;
/** What the binding probe asks for under a cell's key: another body. */
export const OTHER_AMOUNT = AMOUNT + 1;

/** An answer as the matrix compares it: its bytes, as sent. */
export interface Reply {
  readonly status: number;
  readonly contentType: string | null;
  readonly replayed: boolean;
  readonly text: string;
}

export async function read(response: Promise<Response>): Promise<Reply> {
  const r = await response;
  return {
    status: r.status,
    contentType: r.headers.get('content-type'),
    replayed: r.headers.get('idempotent-replayed') === 'true',
    text: await r.text(),
  };
}

/**
 * `201`, `201 replayed` for a replay; a 503 other than the module's own
 * problem (the handler's) is `503 handler`.
 */
export const label = (reply: Reply) =>
  reply.status === 503 &&
  !reply.contentType?.startsWith('application/problem+json')
    ? '503 handler'
    : `${reply.status}${reply.replayed ? ' replayed' : ''}`;

/** Whether an answer is not a 2xx: the request did not (yet) succeed. */
export const failed = (reply: Reply) =>
  reply.status < 200 || reply.status >= 300;

/** The module's 422 for `key`: it is bound to another request. */
export const keyReused = (key: string) => ({
  type: 'urn:idempotency:key-reused',
  title: 'Idempotency key reused',
  status: 422,
  detail:
    'This idempotency key was already used for a different request. Use a new key for a new request.',
  key,
});

/**
 * When the binding probe goes after an answer whose lease had run out
 * (a 409's claim lapsed, the retry not yet sent).
 */
export const LEASE_OVER = 'lease over';

/**
 * What the binding probe's answer must be, for `key`, sent `after` an
 * answer (its label) or {@link LEASE_OVER}.
 */
export const refusal = (key: string, after: string) => ({
  after,
  status: 422,
  contentType: expect.stringMatching(/^application\/problem\+json/) as unknown,
  replayed: false,
  body: keyReused(key),
});

/** The binding probe's answer, as {@link refusal} compares it. */
export const asRefusal = (probe: Reply, after: string) => ({
  after,
  status: probe.status,
  contentType: probe.contentType as unknown,
  replayed: probe.replayed,
  body: JSON.parse(probe.text) as unknown,
});
