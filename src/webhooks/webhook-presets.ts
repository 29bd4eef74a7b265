import type {
  WebhookPresetName,
  WebhookProvider,
  WebhookRequest,
} from './webhook-options.interface.js';
import {
  epochSeconds,
  headerFields,
  hmacSha256Matches,
} from './webhook-signatures.js';

/** A string field of a JSON object, or `undefined`. */
function field(event: unknown, name: string): string | undefined {
  const value =
    typeof event === 'object' && event !== null
      ? (event as Record<string, unknown>)[name]
      : undefined;
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

/**
 * Stripe: `Stripe-Signature: t=<seconds>,v1=<hex>[,v1=<hex>...]`, the
 * HMAC-SHA256 of `<t>.<body>` under the endpoint's `whsec_...` secret (its
 * whole text). The key is the event's `id`; a Connect event's `account` is
 * part of the scope. Compared: the event's `type` (`pending_webhooks` and
 * the like change between deliveries of one event).
 */
const stripe: WebhookProvider = {
  name: 'stripe',
  // `whsec_` alone (an empty environment variable after it) is a key
  // anyone knows.
  usesSecret: (secret) => secret !== 'whsec_',
  verify(request, secrets) {
    const fields = headerFields(request.header('stripe-signature'));
    const t = fields.get('t')?.[0];
    if (t === undefined || epochSeconds(t) === undefined) {
      return false;
    }
    const content = Buffer.concat([Buffer.from(`${t}.`), request.rawBody]);
    const signatures = fields.get('v1') ?? [];
    return secrets.some((secret) =>
      signatures.some((signature) =>
        hmacSha256Matches(secret, content, signature, 'hex'),
      ),
    );
  },
  identify(request, event) {
    const fields = headerFields(request.header('stripe-signature'));
    return {
      id: field(event, 'id'),
      timestamp: epochSeconds(fields.get('t')?.[0]),
      account: field(event, 'account'),
      compared: field(event, 'type') ?? '',
    };
  },
};

/**
 * GitHub: `X-Hub-Signature-256: sha256=<hex>`, the HMAC-SHA256 of the body
 * under the webhook's secret. The key is `X-GitHub-Delivery` (kept by a
 * redelivery); compared: `X-GitHub-Event`. GitHub signs no timestamp.
 */
const github: WebhookProvider = {
  name: 'github',
  verify(request, secrets) {
    const header = request.header('x-hub-signature-256');
    if (!header?.startsWith('sha256=')) {
      return false;
    }
    const signature = header.slice('sha256='.length);
    return secrets.some((secret) =>
      hmacSha256Matches(secret, request.rawBody, signature, 'hex'),
    );
  },
  identify(request) {
    return {
      id: request.header('x-github-delivery'),
      compared: request.header('x-github-event') ?? '',
    };
  },
};

/**
 * The base64 of a Standard Webhooks secret: after `whsec_`, if it has it,
 * without the white space around it (a secret read from a file ends with a
 * newline).
 */
function standardBase64(secret: string): string {
  const trimmed = secret.trim();
  return trimmed.startsWith('whsec_')
    ? trimmed.slice('whsec_'.length)
    : trimmed;
}

/** The signing key of a Standard Webhooks secret: `whsec_` and base64. */
function standardKey(secret: string): Buffer {
  return Buffer.from(standardBase64(secret), 'base64');
}

/**
 * The `webhook-id`, `webhook-timestamp` and `webhook-signature` headers of a
 * Standard Webhooks delivery, or, when it has no `webhook-signature`, the
 * `svix-id`, `svix-timestamp` and `svix-signature` of one that Svix sends
 * under its own names (its default; the `webhook-` ones are its
 * white-label option): the same scheme, as Svix's own library reads them.
 * All three come from one set, for `verify()` and `identify()` alike.
 */
function standardHeaders(request: WebhookRequest): {
  readonly id: string | undefined;
  readonly timestamp: string | undefined;
  readonly signature: string | undefined;
} {
  const prefix =
    request.header('webhook-signature') === undefined &&
    request.header('svix-signature') !== undefined
      ? 'svix-'
      : 'webhook-';
  return {
    id: request.header(`${prefix}id`),
    timestamp: request.header(`${prefix}timestamp`),
    signature: request.header(`${prefix}signature`),
  };
}

/**
 * Standard Webhooks (Svix and the providers that follow the specification):
 * `webhook-signature: v1,<base64> [v1,<base64>...]`, the HMAC-SHA256 of
 * `<webhook-id>.<webhook-timestamp>.<body>` under the base64 secret after
 * `whsec_` (or the same under Svix's `svix-` names, see
 * {@link standardHeaders}). The key is `webhook-id`; compared: the
 * payload's `type`.
 */
const standardWebhooks: WebhookProvider = {
  name: 'standard-webhooks',
  // Decoded leniently, `whsec_` alone or text that is not base64 would be a
  // key of no bytes (or of some stray ones): a signature anyone can make.
  usesSecret(secret) {
    const base64 = standardBase64(secret).replace(/=+$/, '');
    const key = Buffer.from(base64, 'base64');
    // Base64 (padded or not) of at least one byte, nothing skipped.
    return (
      key.length > 0 && key.toString('base64').replace(/=+$/, '') === base64
    );
  },
  verify(request: WebhookRequest, secrets) {
    const { id, timestamp, signature } = standardHeaders(request);
    if (id === undefined || epochSeconds(timestamp) === undefined) {
      return false;
    }
    const content = Buffer.concat([
      Buffer.from(`${id}.${timestamp}.`),
      request.rawBody,
    ]);
    const signatures = (signature ?? '')
      .split(' ')
      .filter((entry) => entry.startsWith('v1,'))
      .map((entry) => entry.slice('v1,'.length));
    return secrets.some((secret) => {
      const key = standardKey(secret);
      return signatures.some((signature) =>
        hmacSha256Matches(key, content, signature, 'base64'),
      );
    });
  },
  identify(request, event) {
    const { id, timestamp } = standardHeaders(request);
    return {
      id,
      timestamp: epochSeconds(timestamp),
      compared: field(event, 'type') ?? '',
    };
  },
};

/** @internal The presets, by name. */
export const WEBHOOK_PRESETS: Readonly<
  Record<WebhookPresetName, WebhookProvider>
> = {
  stripe,
  github,
  'standard-webhooks': standardWebhooks,
};
