import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from '../exceptions/idempotency-http.exception.js';

/** Why a delivery was refused before anything was claimed. */
export type WebhookRefusal =
  'unverified' | 'expired' | 'malformed' | 'misconfigured';

const PROBLEMS: Record<
  WebhookRefusal,
  { slug: string; title: string; status: number; detail: string }
> = {
  unverified: {
    slug: 'webhook-unverified',
    title: 'Webhook signature not verified',
    status: HttpStatus.UNAUTHORIZED,
    detail:
      'The delivery carries no signature made with a secret of this receiver over its body.',
  },
  expired: {
    slug: 'webhook-expired',
    title: 'Webhook timestamp outside the tolerance',
    status: HttpStatus.UNAUTHORIZED,
    detail:
      'The delivery was signed too long ago (or ahead of time): it is refused as a replay.',
  },
  malformed: {
    slug: 'webhook-malformed',
    title: 'Webhook event id missing',
    status: HttpStatus.BAD_REQUEST,
    detail: 'The verified delivery names no event id to deduplicate it by.',
  },
  misconfigured: {
    slug: 'webhook-misconfigured',
    title: 'Webhook receiver misconfigured',
    status: HttpStatus.INTERNAL_SERVER_ERROR,
    detail:
      'The receiver cannot verify deliveries; its application logged why. Nothing was processed: deliver again later.',
  },
};

/**
 * The answer to a webhook delivery refused before anything was claimed
 * (problem+json; nothing is stored, so the real delivery runs whenever it
 * comes): `401` for a signature that does not verify (`webhook-unverified`)
 * or a timestamp outside the tolerance (`webhook-expired`), `400` for a
 * verified delivery without an event id (`webhook-malformed`), `500` for a
 * receiver that cannot verify at all (`webhook-misconfigured`: no raw body,
 * no secret; the application logs how to fix it).
 */
export class IdempotencyWebhookRefusedException extends IdempotencyHttpException {
  /** @param refusal why the delivery is refused */
  constructor(readonly refusal: WebhookRefusal) {
    const { slug, ...problem } = PROBLEMS[refusal];
    super({ type: problemType(slug), ...problem });
  }
}
