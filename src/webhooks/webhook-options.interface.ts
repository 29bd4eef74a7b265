import type { ExecutionContext } from '@nestjs/common';
import type { IdempotentOptions } from '../interfaces/idempotency-options.interface.js';

/**
 * A delivery as a provider's verifier reads it: its headers (names
 * lower-cased) and the exact bytes of its body, before anything parsed them.
 */
export interface WebhookRequest {
  /** The header `name` (case-insensitive), or `undefined`; a repeated one is `undefined`. */
  header(name: string): string | undefined;
  /** The body's bytes as received. */
  readonly rawBody: Buffer;
}

/**
 * The secrets a receiver accepts: one, several at once (while a secret is
 * rotated, the old and the new), or a function that returns them per
 * delivery (read from a configuration service or a vault). A delivery
 * whose function throws is answered `503` (`unavailable`, with
 * `Retry-After`), nothing run or stored: the provider delivers it again.
 * One for which it returns no secret (`[]` or `''`: a route per tenant,
 * asked for a tenant it does not know) is refused as unverified (`401`);
 * a fixed secret that is empty is a misconfiguration (`500`).
 */
export type WebhookSecrets =
  | string
  | readonly string[]
  | ((
      context: ExecutionContext,
    ) => string | readonly string[] | Promise<string | readonly string[]>);

/**
 * What a provider's delivery proves and says, once verified: the parts of
 * the delivery the module keys, scopes and compares it by.
 */
export interface WebhookIdentity {
  /** The provider's id of the event (or delivery): the idempotency key. */
  readonly id: string | undefined;
  /**
   * When the provider signed the delivery (epoch seconds), checked against
   * the tolerance; `undefined` for a provider that signs no timestamp.
   */
  readonly timestamp?: number;
  /** The provider account the event belongs to (Stripe Connect), part of the scope. */
  readonly account?: string;
  /**
   * What two deliveries with the same id must share to be the same event
   * (their fingerprint): the event's type, say. A delivery with the same id
   * and another value gets `422`.
   */
  readonly compared?: string;
}

/**
 * A webhook provider: how to verify a delivery and what it says. The presets
 * (`'stripe'`, `'github'`, `'standard-webhooks'`) are such objects; give
 * your own for any other provider.
 *
 * @example
 * // Signed: `<delivery id>.<timestamp>.<body>`. What identify() reads
 * // must be signed, or a captured delivery runs again under another id.
 * const acme: WebhookProvider = {
 *   name: 'acme',
 *   verify: (request, secrets) => {
 *     const id = request.header('x-acme-delivery');
 *     const timestamp = request.header('x-acme-timestamp');
 *     const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`), request.rawBody]);
 *     return secrets.some((secret) =>
 *       hmacSha256Matches(secret, signed, request.header('x-acme-signature'), 'hex'),
 *     );
 *   },
 *   identify: (request, event) => ({
 *     id: request.header('x-acme-delivery'),
 *     timestamp: Number(request.header('x-acme-timestamp')),
 *     compared: (event as { type?: string }).type,
 *   }),
 * };
 */
export interface WebhookProvider {
  /** Its name, in the scope of its records (`webhook:<name>:...`) and in errors. */
  readonly name: string;
  /**
   * Whether the delivery is signed by one of `secrets`. Compare signatures in
   * constant time (`crypto.timingSafeEqual`, or {@link hmacSha256Matches}).
   * Called before anything else reads the delivery. One that throws
   * refuses it as unverified (`401`).
   */
  verify(
    request: WebhookRequest,
    secrets: readonly string[],
  ): boolean | Promise<boolean>;
  /**
   * Whether `secret` is one this provider can sign with (a Standard Webhooks
   * secret must be base64 of a key of at least one byte after `whsec_`).
   * One that is not is left out, as an empty one is; a receiver left with
   * none answers `500 webhook-misconfigured`. @default every non-empty string
   */
  usesSecret?(secret: string): boolean;
  /**
   * The verified delivery's id, timestamp, account and compared part.
   * `event` is the body parsed as JSON (`undefined` when it is not JSON).
   * One that throws refuses the delivery as malformed (`400`).
   */
  identify(request: WebhookRequest, event: unknown): WebhookIdentity;
  /**
   * How long a duplicate delivery waits for the first one still running
   * before it gets `409` (which the provider retries): below the provider's
   * own delivery timeout. @default '8s'
   */
  readonly waitTimeout?: string;
}

/** The presets of the providers the module knows. */
export type WebhookPresetName = 'stripe' | 'github' | 'standard-webhooks';

/**
 * Options of `@IdempotentWebhook()`. The event id is the key and the
 * receiver (and the provider account) the scope: there is no `key`,
 * `required` or `keyValidation` to set.
 */
export interface IdempotentWebhookOptions extends Pick<
  IdempotentOptions,
  | 'ttl'
  | 'transactionTimeout'
  | 'retryAfter'
  | 'maxResponseSize'
  | 'replayHeaders'
  | 'isolationLevel'
> {
  /**
   * The signing secret(s): Stripe's and Standard Webhooks' `whsec_...`,
   * GitHub's webhook secret. Several are accepted at once, for a rotation.
   * A delivery signed by none of them gets `401`.
   */
  secret: WebhookSecrets;
  /**
   * Which errors of the handler are stored and replayed to the provider's
   * next deliveries of the event, as for `@Idempotent()`. The module's
   * `storeErrors` does not apply to receivers: a provider retries a
   * delivery that failed (a `4xx` included), and an error stored would
   * answer every retry until `ttl`, the event never handled.
   * @default false, whatever the module's default
   */
  storeErrors?: IdempotentOptions['storeErrors'];
  /**
   * How far a delivery's signed timestamp may be from now, either way,
   * before it is refused (`401`) as a replay. Unused for GitHub, which
   * signs no timestamp.
   * @default '5m'
   */
  tolerance?: string | number;
  /**
   * What a redelivery does while the first delivery of the same event still
   * runs: `'wait'` for it (at most `waitTimeout`) and answer with its stored
   * response, or `'reject'` with `409` at once. Either way, a redelivery
   * still running at the end gets `409` with `Retry-After`, which every
   * provider takes for a failure to retry.
   * @default 'wait'
   */
  concurrency?: IdempotentOptions['concurrency'];
  /**
   * How long a redelivery waits in `'wait'` mode: below the provider's
   * delivery timeout.
   * @default '8s' (GitHub gives up on a delivery after 10 s)
   */
  waitTimeout?: IdempotentOptions['waitTimeout'];
  /**
   * The scope of the receiver's records, instead of
   * `webhook:<provider>:<Controller>.<method>` followed by the route's path
   * parameters, `:<name>=<value>` each by name (a route per tenant,
   * `tenants/:tenant/acme`, keeps each tenant's events apart, whose ids a
   * provider may repeat across accounts; SHA-256 of them past 256 bytes);
   * `:<account>` is added to either for a Stripe Connect event. Two
   * routes that must share their events (an old and a new path of one
   * endpoint) give the same scope.
   * Give one to each of two receivers whose classes and methods have the
   * same names (in two modules): the application refuses to start
   * otherwise, as their default scopes would be one.
   * @default one scope per receiver method, path parameters and provider
   * account
   */
  scope?: IdempotentOptions['scope'];
}

/**
 * A verified delivery, as `@WebhookDelivery()` gives it to the handler.
 *
 * @typeParam TEvent the type of the parsed event (Stripe's `Stripe.Event`, a
 * GitHub payload, ...)
 */
export interface VerifiedWebhook<TEvent = unknown> {
  /** The provider's name (`'stripe'`, `'github'`, ...). */
  readonly provider: string;
  /** The event (or delivery) id, the idempotency key. */
  readonly id: string;
  /** The body parsed as JSON (a GitHub form delivery: its `payload` field). */
  readonly event: TEvent;
  /** The body's bytes, as signed. */
  readonly rawBody: Buffer;
  /** The signed timestamp (epoch seconds), where the provider signs one. */
  readonly timestamp?: number;
  /** The provider account (Stripe Connect's `account`), where the event names one. */
  readonly account?: string;
}
