/** The body of the module's 503: nothing took effect, retry with the same key. */
export const UNAVAILABLE = {
  type: 'urn:idempotency:unavailable',
  title: 'Request not completed',
  status: 503,
  detail:
    'The request could not be completed. Retry it with the same idempotency key: it takes effect exactly once.',
};

/** The body of the module's 409 for `key`: the same request is still running. */
export function inProgress(key: string) {
  return {
    type: 'urn:idempotency:request-in-progress',
    title: 'Request in progress',
    status: 409,
    detail:
      'A request with this idempotency key is still being processed. Retry later to get its response.',
    key,
  };
}

/** An HTTP answer as the assertions compare it. */
export interface Answer {
  readonly status: number;
  readonly contentType: string | null;
  readonly retryAfter: string | null;
  /** Whether it carries `Idempotent-Replayed: true`. */
  readonly replayed: boolean;
  /** The body parsed as JSON, or its text when it is not JSON. */
  readonly body: unknown;
}

/** Reads a `fetch` response into an {@link Answer}. */
export async function answer(
  response: Response | Promise<Response>,
): Promise<Answer> {
  const r = await response;
  const text = await r.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text) as unknown;
  } catch {
    // Not JSON: compared as text.
  }
  return {
    status: r.status,
    contentType: r.headers.get('content-type'),
    retryAfter: r.headers.get('retry-after'),
    replayed: r.headers.get('idempotent-replayed') === 'true',
    body,
  };
}

/** The module's 503 as {@link answer} reads it, with `Retry-After: 1`. */
export const UNAVAILABLE_ANSWER: Answer = {
  status: 503,
  contentType: expect.stringMatching(/^application\/problem\+json/),
  retryAfter: '1',
  replayed: false,
  body: UNAVAILABLE,
};
