import type { SeededRandom } from './seeded-random.js';
import {
  delay,
  type Exchange,
  type PaymentBody,
  type SoakClient,
} from './soak-client.js';

/** One logical payment of the soak and what its client does with it. */
export interface PaymentPlan {
  readonly key: string;
  /** The client that sends it (each sends its payments one after another). */
  readonly client: number;
  readonly body: PaymentBody;
  /** When its client sends it at the earliest, in ms since the run started. */
  readonly startAtMs: number;
  /** Sent as this many copies at once (a double submit), to different instances. */
  readonly copies: number;
  /** Duplicates sent after its first 2xx, each after a pause of this many ms. */
  readonly replayGapsMs: readonly number[];
  /** Another body under its key, sent after its first 2xx: must get 422. */
  readonly conflict?: PaymentBody;
  /**
   * Another amount under its key, sent right after the payment's first
   * failed answer (409, 503, a lost connection), before the payment is sent
   * again; only for a payment sent as one copy. It gets 422 when the key is
   * bound to the payment (a step of it committed, or its claim is held or
   * completed); when the failed attempt left nothing behind, it may claim
   * the key and complete with its own charge (then the payment gets 422),
   * or get 502 for a charge the gateway refused (the failed attempt was
   * charged before its step could commit).
   */
  readonly rival?: PaymentBody;
}

/** Share of the payments sent as one copy that have a rival. */
const RIVALS = 0.85;

export interface PaymentLoad {
  readonly clients: number;
  readonly perClient: number;
  /** The payments' starts spread over this many ms. */
  readonly windowMs: number;
}

/** Every payment of the run, drawn from `random` before anything is sent. */
export function planPayments(
  random: SeededRandom,
  { clients, perClient, windowMs }: PaymentLoad,
): PaymentPlan[] {
  const slotMs = Math.floor(windowMs / perClient);
  const plans: PaymentPlan[] = [];
  for (let client = 0; client < clients; client += 1) {
    for (let slot = 0; slot < perClient; slot += 1) {
      const key = `pay-${client}-${slot}`;
      const body: PaymentBody = {
        amount: random.int(100, 99_999),
        currency: random.pick(['EUR', 'USD', 'GBP']),
        merchantId: `m_${key}`,
      };
      const conflict: PaymentBody | undefined = random.chance(0.3)
        ? random.chance(0.5)
          ? { ...body, amount: body.amount + random.int(1, 500) }
          : { ...body, currency: body.currency === 'EUR' ? 'USD' : 'EUR' }
        : undefined;
      const copies = random.chance(0.2) ? 2 : 1;
      // From a stream of its own: the draws above stay those of the seed.
      const rivalry = random.fork(`${key}/rival`);
      const rival: PaymentBody | undefined =
        copies === 1 && rivalry.chance(RIVALS)
          ? { ...body, amount: body.amount + rivalry.int(1_000, 9_000) }
          : undefined;
      plans.push({
        key,
        client,
        body,
        startAtMs: slot * slotMs + random.int(0, Math.floor(slotMs * 0.8)),
        copies,
        replayGapsMs: Array.from({ length: random.int(0, 2) }, () =>
          random.int(0, 800),
        ),
        ...(conflict && { conflict }),
        ...(rival && { rival }),
      });
    }
  }
  return plans;
}

const is2xx = (status: number | undefined) =>
  status !== undefined && status >= 200 && status < 300;

/**
 * The body that completed under the plan's key, as `exchanges` tell: its
 * rival if the rival got a 2xx, else the payment's own.
 */
export function winningBody(
  plan: PaymentPlan,
  exchanges: readonly Exchange[],
): PaymentBody {
  const rivalWon =
    plan.rival !== undefined &&
    exchanges.some(
      (x) => x.key === plan.key && x.role === 'rival' && is2xx(x.status),
    );
  return rivalWon ? plan.rival! : plan.body;
}

/**
 * Runs one client's payments in order, each at its start time at the
 * earliest: its copies until each gets a 2xx (a payment with a rival sends
 * it after its first failed answer, until it ends), then duplicates of the
 * body that completed, then its other body. Each request draws its
 * instances and back-offs from a stream of its own.
 */
export async function runPayments(
  plans: readonly PaymentPlan[],
  client: SoakClient,
  random: SeededRandom,
  startedAt: number,
  instances: number,
): Promise<void> {
  for (const plan of plans) {
    await delay(Math.max(0, startedAt + plan.startAtMs - Date.now()));
    const first = random.fork(plan.key).int(0, instances - 1);
    const { rival } = plan;
    let rivalAnswer: Exchange | undefined;
    const answers = await Promise.all(
      Array.from({ length: plan.copies }, (_, copy) =>
        client.send(
          plan.key,
          plan.body,
          'payment',
          random.fork(`${plan.key}/copy-${copy}`),
          {
            instance: (first + copy) % instances,
            ...(rival && {
              afterFailure: async () => {
                rivalAnswer = await client.send(
                  plan.key,
                  rival,
                  'rival',
                  random.fork(`${plan.key}/rival`),
                );
              },
            }),
          },
        ),
      ),
    );
    const winner = answers.some((answer) => is2xx(answer?.status))
      ? plan.body
      : rival && is2xx(rivalAnswer?.status)
        ? rival
        : undefined;
    if (!winner) {
      continue;
    }
    for (const [i, gapMs] of plan.replayGapsMs.entries()) {
      await delay(gapMs);
      await client.send(
        plan.key,
        winner,
        'replay',
        random.fork(`${plan.key}/replay-${i}`),
      );
    }
    if (plan.conflict) {
      await client.send(
        plan.key,
        plan.conflict,
        'conflict',
        random.fork(`${plan.key}/conflict`),
      );
    }
  }
}
