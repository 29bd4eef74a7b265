import {
  Inject,
  Injectable,
  Logger,
  Optional,
  type CanActivate,
  type ExecutionContext,
} from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import type { IncomingMessage } from 'node:http';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from '../idempotency.tokens.js';
import { messageOf } from '../core/error-message.js';
import { IdempotencyUnavailableException } from '../exceptions/idempotency-unavailable.exception.js';
import type { IdempotencyHttpException } from '../exceptions/idempotency-http.exception.js';
import type { ResolvedIdempotencyOptions } from '../idempotency.options.js';
import type {
  WebhookProvider,
  WebhookRequest,
  WebhookSecrets,
} from './webhook-options.interface.js';
import {
  IdempotencyWebhookRefusedException,
  type WebhookRefusal,
} from './webhook-refused.exception.js';
import { recordDelivery } from './webhook-deliveries.js';

/** @internal Metadata key of a receiver's configuration. */
export const WEBHOOK_METADATA = 'idempotency:webhook';

/** @internal What `@IdempotentWebhook()` tells its guard. */
export interface WebhookReceiver {
  readonly provider: WebhookProvider;
  readonly secret: WebhookSecrets;
  readonly toleranceMs: number;
  /** The receiver's own `retryAfter`, over the module's. */
  readonly retryAfter?: number;
}

/** `Retry-After` of a delivery whose secrets could not be read, without the module's options. */
const DEFAULT_RETRY_AFTER = 1;

/** A request as the platforms give it, with the bytes `rawBody: true` keeps. */
type PlatformRequest = IncomingMessage & {
  rawBody?: unknown;
  raw?: IncomingMessage & { rawBody?: unknown };
};

/**
 * Whether the platform reads the request's body (JSON or a form, on both
 * Express and Fastify), and so keeps its raw bytes when the application
 * was created with `rawBody: true`: a body of such a request without them
 * tells the option is missing. One without a body (no length, no chunks)
 * has none to keep.
 */
function parsedByPlatform(request: IncomingMessage): boolean {
  const { headers } = request;
  const length = Number(headers['content-length'] ?? 0);
  if (!(length > 0) && headers['transfer-encoding'] === undefined) {
    return false;
  }
  const type = (headers['content-type'] ?? '')
    .split(';')[0]
    .trim()
    .toLowerCase();
  return (
    type === 'application/json' || type === 'application/x-www-form-urlencoded'
  );
}

/**
 * The event of a delivery: its body as JSON, or, for a form delivery
 * (GitHub's `application/x-www-form-urlencoded`), its `payload` field as
 * JSON; `undefined` when it is neither.
 */
function parseEvent(rawBody: Buffer, contentType: string | undefined): unknown {
  const text = rawBody.toString('utf8');
  try {
    if (contentType?.startsWith('application/x-www-form-urlencoded')) {
      const payload = new URLSearchParams(text).get('payload');
      return payload === null ? undefined : (JSON.parse(payload) as unknown);
    }
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/**
 * @internal Verifies a webhook delivery before anything else of the module
 * sees it: a guard runs before every interceptor, so a delivery that fails
 * here is never claimed, stored or handed to the handler. A verified one is
 * recorded for the route's key, scope and fingerprint and for
 * `@WebhookDelivery()`.
 */
@Injectable()
export class IdempotentWebhookGuard implements CanActivate {
  private readonly logger = new Logger('IdempotentWebhook');
  /** What was logged once (per receiver and kind), not for every delivery. */
  private readonly warned = new Set<string>();

  constructor(
    private readonly reflector: Reflector,
    private readonly adapterHost: HttpAdapterHost,
    @Optional()
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options?: ResolvedIdempotencyOptions,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const receiver = this.reflector.getAllAndOverride<
      WebhookReceiver | undefined
    >(WEBHOOK_METADATA, [context.getHandler(), context.getClass()]);
    if (!receiver || context.getType() !== 'http') {
      return true;
    }
    const name = `${context.getClass().name}.${context.getHandler().name}`;
    const request = context.switchToHttp().getRequest<PlatformRequest>();
    const rawBody = request.rawBody ?? request.raw?.rawBody;
    if (!Buffer.isBuffer(rawBody) && !parsedByPlatform(request)) {
      // No body, or one of a content type no parser reads: nothing to
      // verify, so unverified (an attacker's request must not pass for a
      // misconfiguration, nor fill the log). Said once per receiver, for a
      // provider whose content type needs a parser.
      this.warnOnce(
        name,
        `The webhook receiver ${name} refused a delivery without raw body (content type ${JSON.stringify(request.headers['content-type'] ?? 'none')}) as unverified. If your provider sends that content type, register a parser for it after creating the application with rawBody: true: app.useBodyParser('text') or 'raw'.`,
      );
      throw this.refuse(context, 'unverified');
    }
    if (!Buffer.isBuffer(rawBody)) {
      this.logger.error(
        `The webhook receiver ${name} got no raw body, so it cannot verify deliveries (each is answered 500 and nothing is processed). Create the application with the raw body kept: NestFactory.create(AppModule, { rawBody: true }) (on Fastify, NestFactory.create(AppModule, new FastifyAdapter(), { rawBody: true })). A delivery whose content type has no parser (Express parses JSON and forms only) needs one registered after that: app.useBodyParser('text') or 'raw'.`,
      );
      throw this.refuse(context, 'misconfigured');
    }
    let given: string[];
    try {
      given = await this.secrets(receiver.secret, context);
    } catch (error) {
      // The secrets' source (a vault, a configuration service) out of
      // reach: nothing verified, so nothing runs; the provider delivers
      // again.
      this.logger.error(
        `The webhook receiver ${name} could not read its secrets (${messageOf(error)}): the delivery is answered 503 and processed when the provider delivers it again.`,
      );
      throw this.unavailable(context, receiver);
    }
    const { provider } = receiver;
    const secrets = provider.usesSecret
      ? given.filter((secret) => {
          try {
            return provider.usesSecret!(secret);
          } catch {
            // A provider's check that fails takes nothing on trust.
            return false;
          }
        })
      : given;
    if (given.length === 0 && typeof receiver.secret === 'function') {
      // A function with no secret for this delivery (a route per tenant,
      // asked for a tenant it does not know): the request is no one's
      // delivery, refused as unverified, and said once, so that such
      // requests cannot fill the log. A function whose secrets the
      // provider cannot sign with is a misconfiguration, as below.
      this.warnOnce(
        `${name} no secret`,
        `The webhook receiver ${name} refused a delivery as unverified: its secret function returned no secret for it.`,
      );
      throw this.refuse(context, 'unverified');
    }
    if (secrets.length === 0) {
      this.logger.error(
        given.length === 0
          ? `The webhook receiver ${name} has no secret: give @IdempotentWebhook() a non-empty "secret" (a string, several, or a function returning them).`
          : `The webhook receiver ${name} has no secret that ${provider.name} can sign with (${given.length} given, none of its form: a Standard Webhooks secret is whsec_ and the base64 of its key).`,
      );
      throw this.refuse(context, 'misconfigured');
    }
    const headers = request.headers;
    const delivery: WebhookRequest = {
      rawBody,
      header: (field) => {
        const value = headers[field.toLowerCase()];
        return typeof value === 'string' ? value : undefined;
      },
    };
    let verified: boolean;
    try {
      verified = await provider.verify(delivery, secrets);
    } catch (error) {
      // A check that fails (on a header it did not expect) takes nothing
      // on trust: the request may be anyone's.
      this.warnOnce(
        `${name} verify`,
        `The webhook receiver ${name} refused a delivery as unverified: its provider's verify() threw (${messageOf(error)}).`,
      );
      verified = false;
    }
    if (!verified) {
      throw this.refuse(context, 'unverified');
    }
    const event = parseEvent(rawBody, delivery.header('content-type'));
    let identity: ReturnType<WebhookProvider['identify']>;
    try {
      identity = provider.identify(delivery, event);
    } catch (error) {
      // A verified delivery that the provider cannot read an event id of.
      this.warnOnce(
        `${name} identify`,
        `The webhook receiver ${name} refused a verified delivery as malformed: its provider's identify() threw (${messageOf(error)}).`,
      );
      throw this.refuse(context, 'malformed');
    }
    // A timestamp that is no number (NaN) is outside any tolerance.
    if (
      identity.timestamp !== undefined &&
      !(
        Math.abs(Date.now() - identity.timestamp * 1000) <= receiver.toleranceMs
      )
    ) {
      throw this.refuse(context, 'expired');
    }
    if (typeof identity.id !== 'string' || identity.id.length === 0) {
      throw this.refuse(context, 'malformed');
    }
    recordDelivery(request, {
      verified: {
        provider: provider.name,
        id: identity.id,
        event,
        rawBody,
        timestamp: identity.timestamp,
        account: identity.account,
      },
      compared: identity.compared ?? '',
    });
    return true;
  }

  /** The receiver's secrets, without empty ones. */
  private async secrets(
    secret: WebhookSecrets,
    context: ExecutionContext,
  ): Promise<string[]> {
    const value = typeof secret === 'function' ? await secret(context) : secret;
    const list: readonly unknown[] = Array.isArray(value) ? value : [value];
    return list.filter(
      (entry): entry is string => typeof entry === 'string' && entry.length > 0,
    );
  }

  /** Logs `message` the first time `what` happens: a sender cannot fill the log. */
  private warnOnce(what: string, message: string): void {
    if (!this.warned.has(what)) {
      this.warned.add(what);
      this.logger.warn(message);
    }
  }

  /**
   * The 503 of a delivery that could not be verified for now, with its
   * problem+json and `Retry-After` headers set on the response.
   */
  private unavailable(
    context: ExecutionContext,
    receiver: WebhookReceiver,
  ): IdempotencyUnavailableException {
    return this.answer(
      context,
      new IdempotencyUnavailableException(
        receiver.retryAfter ?? this.options?.retryAfter ?? DEFAULT_RETRY_AFTER,
      ),
    );
  }

  /** The refusal, with its problem+json headers set on the response. */
  private refuse(
    context: ExecutionContext,
    refusal: WebhookRefusal,
  ): IdempotencyWebhookRefusedException {
    return this.answer(
      context,
      new IdempotencyWebhookRefusedException(refusal),
    );
  }

  /**
   * `error`, its type under the module's `problemTypeBaseUrl`, with its
   * headers and problem+json's content type set on the response: the guard
   * throws it before any interceptor of the module runs.
   */
  private answer<E extends IdempotencyHttpException>(
    context: ExecutionContext,
    error: E,
  ): E {
    const response: unknown = context.switchToHttp().getResponse();
    const { httpAdapter } = this.adapterHost;
    httpAdapter.setHeader(response, 'Content-Type', 'application/problem+json');
    for (const [field, value] of Object.entries(error.headers)) {
      httpAdapter.setHeader(response, field, value);
    }
    return error.withTypeBase(this.options?.problemTypeBaseUrl);
  }
}
