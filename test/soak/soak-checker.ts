import type pg from 'pg';
import {
  derivedKeyOfRecord,
  GENERATION_SQL,
  type DerivingRecord,
} from '../utils/derived-keys.js';
import type { GatewayCall, GatewayCharge } from './recording-gateway.js';
import type { Exchange, PaymentBody } from './soak-client.js';
import { winningBody, type PaymentPlan } from './soak-payments.js';
import { readStepLog, type LoggedStep } from './step-log.js';

interface PaymentRow {
  readonly id: string;
  readonly merchant_id: string;
  readonly amount: number;
  readonly currency: string;
  readonly charge_id: string | null;
}

interface LedgerRow {
  readonly payment_id: string;
  readonly account: string;
  readonly direction: string;
  readonly amount: number;
}

/** A record, with what the key its request derives is made of. */
interface RecordRow extends DerivingRecord {
  readonly status: string;
  readonly response_body: Buffer | null;
}

/** What the soak left: every answer, the database's rows, the gateway's log. */
export interface SoakEvidence {
  readonly plans: readonly PaymentPlan[];
  readonly exchanges: readonly Exchange[];
  readonly payments: readonly PaymentRow[];
  readonly ledger: readonly LedgerRow[];
  readonly records: readonly RecordRow[];
  /** Keys of the steps left in `idempotency_steps`. */
  readonly steps: readonly string[];
  /** Every step save that committed (see `step-log.ts`). */
  readonly stepLog: readonly LoggedStep[];
  /** Epoch ms the run started: exchanges are timed from it. */
  readonly startedAt: number;
  readonly calls: readonly GatewayCall[];
  readonly charges: readonly GatewayCharge[];
  /**
   * When the last request of every key was sent (ms since the run started),
   * once the faults were over, and how long each had to get its 2xx.
   */
  readonly final: { readonly at: number; readonly boundMs: number };
}

/** Reads the tables the checker needs from the app's database. */
export async function readTables(
  db: pg.Pool,
): Promise<
  Pick<SoakEvidence, 'payments' | 'ledger' | 'records' | 'steps' | 'stepLog'>
> {
  const [payments, ledger, records, steps, stepLog] = await Promise.all([
    db.query<PaymentRow>(
      'SELECT id, merchant_id, amount, currency, charge_id FROM payments',
    ),
    db.query<LedgerRow>(
      'SELECT payment_id, account, direction, amount FROM ledger_entries',
    ),
    db.query<RecordRow>(
      `SELECT scope, key, fingerprint, ${GENERATION_SQL} AS generation,
              status, response_body
         FROM idempotency_records`,
    ),
    db.query<{ key: string }>('SELECT key FROM idempotency_steps'),
    readStepLog(db),
  ]);
  return {
    payments: payments.rows,
    ledger: ledger.rows,
    records: records.rows,
    steps: steps.rows.map((row) => row.key),
    stepLog,
  };
}

const is2xx = (status: number | undefined) =>
  status !== undefined && status >= 200 && status < 300;

/**
 * The statuses a request of each role may get; anything else is a
 * violation. A duplicate sent after its key's 2xx finds the key completed:
 * it is replayed, never refused as in progress.
 */
const EXPECTED: Record<Exchange['role'], readonly number[]> = {
  // And 422 once its rival completed (checked below).
  payment: [201, 409, 503],
  rival: [201, 409, 422, 502, 503],
  replay: [201, 503],
  final: [201, 503],
  conflict: [422, 503],
};

/** The module's problem type for each refusal the soak may get. */
const PROBLEMS: Record<number, string> = {
  409: 'urn:idempotency:request-in-progress',
  422: 'urn:idempotency:key-reused',
  503: 'urn:idempotency:unavailable',
};

/**
 * What the sample answers when the gateway refused its charge (400, the key
 * reused with another amount): the module's problem for a refused call. A
 * key derived for one body is never sent with another, so no charge should
 * be refused.
 */
const GATEWAY_REFUSED = {
  type: 'urn:idempotency:downstream-refused',
  title: 'Downstream service refused the request',
  status: 502,
  detail: 'A service this request depends on answered 400.',
};

/** An exchange as one line. */
export function describeExchange(exchange: Exchange): string {
  const answer =
    exchange.status === undefined
      ? exchange.error
      : `${exchange.status}${exchange.replayed ? ' replayed' : ''} ${exchange.body?.toString().slice(0, 160) ?? ''}`;
  const to = [`#${exchange.instance}`, exchange.library].filter(Boolean);
  return `${exchange.key} ${exchange.role} (${exchange.sent.amount} ${exchange.sent.currency}) → ${to.join(' ')} at ${exchange.sentAt}ms (${exchange.tookMs}ms): ${answer}`;
}

const sameBody = (a: PaymentBody, b: PaymentBody) =>
  a.amount === b.amount &&
  a.currency === b.currency &&
  a.merchantId === b.merchantId;

/**
 * Whether the request's handler ran: a 2xx that is not a replay, or the
 * sample's 502 for a charge the gateway refused.
 */
const handlerRan = (x: Exchange) =>
  (is2xx(x.status) && !x.replayed) || x.status === 502;

/**
 * The first committed step of `key` that binds it to a body other than
 * `body` (its charge was made for another amount or currency, or by no
 * call of the gateway), logged before `epochMs`.
 */
function boundElsewhere(
  steps: readonly LoggedStep[],
  charges: ReadonlyMap<string, GatewayCharge>,
  body: PaymentBody,
  epochMs: number,
): LoggedStep | undefined {
  return steps.find((step) => {
    const charge = charges.get(step.chargeId);
    return (
      step.at < epochMs &&
      (!charge ||
        charge.amount !== body.amount ||
        charge.currency !== body.currency)
    );
  });
}

function groupBy<T>(items: readonly T[], by: (item: T) => string) {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const group = groups.get(by(item));
    if (group) {
      group.push(item);
    } else {
      groups.set(by(item), [item]);
    }
  }
  return groups;
}

/** The payment a 2xx body describes. */
interface PaymentBodyJson {
  type?: unknown;
  id?: unknown;
  amount?: unknown;
  currency?: unknown;
  merchantId?: unknown;
  chargeId?: unknown;
  ledgerEntries?: unknown;
}

function parse(body: Buffer | undefined): PaymentBodyJson | undefined {
  try {
    return JSON.parse(body?.toString() ?? '') as PaymentBodyJson;
  } catch {
    return undefined;
  }
}

/**
 * Checks what the soak left against what must hold, and returns every
 * violation found, one line each (none: the run kept every promise):
 *
 * - no 5xx other than the module's 503 and, to a rival only, the sample's
 *   502 for a charge the gateway refused; no status a request of its role
 *   cannot get (another body under a used key gets 422, never a 2xx; a
 *   duplicate after the 2xx is never refused; a payment gets 422 only once
 *   its rival completed), every 409, 422 and 503 the module's problem;
 * - every key got a 2xx, all of its 2xx bodies byte for byte the same, at
 *   most one of them executed (not replayed), each describing the payment
 *   of the body that completed (the payment's, or its rival's: never both);
 * - that payment is the key's only one, in the database with the id of the
 *   body, booked on the gateway's charge for the key's derived key (made
 *   of the scope, key, fingerprint and generation of its record: the
 *   request that completed), made for that body's amount and currency,
 *   with two ledger rows (the customer's debit, the merchant's credit);
 * - its record is completed and stores that payment; no record completed
 *   without a payment, none still in progress, no step left;
 * - the binding: a key's committed steps all carry one fingerprint, and
 *   once one committed, no request of another body runs its handler (no
 *   2xx executed, no 502 from its own gateway call);
 * - the gateway: every call under a key's derived key carries the body
 *   that completed, every other call the body of a payment or a rival (no
 *   other body reached it), none refused (a derived key never carries two
 *   bodies), every refusal answered to a rival as the sample's 502, no
 *   charge booked by two payments, none never booked, none under a key
 *   that no record derives;
 * - no key stuck: the last request of each key, sent once the faults were
 *   over, got its 2xx within the bound.
 */
export function checkSoak(evidence: SoakEvidence): string[] {
  const violations: string[] = [];
  const flag = (line: string) => violations.push(line);
  const planned = new Map(evidence.plans.map((plan) => [plan.key, plan]));
  const exchangesOf = groupBy(evidence.exchanges, (x) => x.key);
  const paymentsOf = groupBy(evidence.payments, (row) => row.merchant_id);
  const ledgerOf = groupBy(evidence.ledger, (row) => row.payment_id);
  const recordsOf = groupBy(evidence.records, (row) => row.key);
  // The key each record's request derives for its charge, and back.
  const derivedOf = new Map(
    evidence.records.map((row) => [row, derivedKeyOfRecord(row)]),
  );
  const keyOfDerived = new Map(
    [...derivedOf].map(([row, derived]) => [derived, row.key]),
  );
  const callsOf = groupBy(evidence.calls, (call) => call.key);
  const chargeById = new Map(evidence.charges.map((c) => [c.id, c]));
  const stepsLeft = new Set(evidence.steps);
  const stepLogOf = groupBy(evidence.stepLog, (step) => step.key);

  for (const exchange of evidence.exchanges) {
    if (exchange.status === undefined) {
      continue;
    }
    const expected =
      exchange.role === 'payment' && planned.get(exchange.key)?.rival
        ? [...EXPECTED.payment, 422]
        : EXPECTED[exchange.role];
    if (exchange.status === 502 && exchange.role === 'rival') {
      const json = parse(exchange.body) as Record<string, unknown> | undefined;
      if (
        json === undefined ||
        Object.entries(GATEWAY_REFUSED).some(
          ([name, value]) => json[name] !== value,
        )
      ) {
        flag(
          `a 502 that is not the sample's answer to a refused charge: ${describeExchange(exchange)}`,
        );
      }
    } else if (exchange.status >= 500 && exchange.status !== 503) {
      flag(`a ${exchange.status}: ${describeExchange(exchange)}`);
    } else if (!expected.includes(exchange.status)) {
      flag(
        `unexpected ${exchange.status} to a ${exchange.role} request: ${describeExchange(exchange)}`,
      );
    } else if (
      PROBLEMS[exchange.status] &&
      parse(exchange.body)?.type !== PROBLEMS[exchange.status]
    ) {
      flag(
        `a ${exchange.status} that is not the module's ${PROBLEMS[exchange.status]}: ${describeExchange(exchange)}`,
      );
    }
  }

  for (const plan of evidence.plans) {
    const { key } = plan;
    const exchanges = exchangesOf.get(key) ?? [];
    const records = recordsOf.get(key) ?? [];
    const completed = records.filter((r) => r.status === 'completed');
    // The key the request that completed derived for its charge.
    const derived =
      completed.length === 1 ? derivedOf.get(completed[0]) : undefined;
    // The body that completed: the payment's, or its rival's.
    const body = winningBody(plan, exchanges);
    const rows = paymentsOf.get(body.merchantId) ?? [];
    const payment = rows.length === 1 ? rows[0] : undefined;
    if (rows.length > 1) {
      flag(
        `${key}: ${rows.length} payments (${rows.map((row) => row.id).join(', ')})`,
      );
    }

    const oks = exchanges.filter(
      (x) => x.role !== 'conflict' && is2xx(x.status),
    );
    const payments = exchanges.filter(
      (x) => x.role === 'payment' || x.role === 'rival',
    );
    if (!payments.some((x) => is2xx(x.status))) {
      flag(
        `${key}: its client got no 2xx before it gave up, last answers: ${payments
          .slice(-3)
          .map(describeExchange)
          .join(' | ')}`,
      );
    }
    const foreignOk = oks.find((x) => !sameBody(x.sent, body));
    if (foreignOk) {
      flag(
        `${key}: both its payment and its rival got a 2xx: ${describeExchange(foreignOk)}`,
      );
    }
    if (plan.rival && body !== plan.rival) {
      const refused = exchanges.find(
        (x) => x.role === 'payment' && x.status === 422,
      );
      if (refused) {
        flag(
          `${key}: its payment got 422, and its rival never completed: ${describeExchange(refused)}`,
        );
      }
    }
    if (oks.length > 0) {
      const [first] = oks;
      const differing = oks.filter((x) => !x.body!.equals(first.body!));
      if (differing.length > 0) {
        flag(
          `${key}: ${differing.length} 2xx bodies differ from the first (${describeExchange(first)}), e.g. ${describeExchange(differing[0])}`,
        );
      }
      const executed = oks.filter((x) => !x.replayed);
      if (executed.length > 1) {
        flag(`${key}: ${executed.length} 2xx answers not replayed`);
      }
      const unreplayed = oks.filter(
        (x) => x.role !== 'payment' && x.role !== 'rival' && !x.replayed,
      );
      if (unreplayed.length > 0) {
        flag(
          `${key}: a duplicate after its 2xx was not a replay: ${describeExchange(unreplayed[0])}`,
        );
      }
      const json = parse(first.body);
      const entries = Array.isArray(json?.ledgerEntries)
        ? json.ledgerEntries.length
        : undefined;
      if (
        json?.amount !== body.amount ||
        json.currency !== body.currency ||
        json.merchantId !== body.merchantId ||
        typeof json.id !== 'string' ||
        entries !== 2
      ) {
        flag(
          `${key}: its 2xx is not its request's payment (${JSON.stringify(body)}): ${describeExchange(first)}`,
        );
      }
      if (!payment) {
        flag(
          `${key}: answered 2xx with payment ${String(json?.id)}, but the database has ${rows.length} payments for it`,
        );
      } else if (
        payment.id !== json?.id ||
        payment.charge_id !== json.chargeId
      ) {
        flag(
          `${key}: answered 2xx with payment ${String(json?.id)} (charge ${String(json?.chargeId)}), the database has ${payment.id} (charge ${payment.charge_id})`,
        );
      }
    }

    if (payment) {
      if (
        payment.amount !== body.amount ||
        payment.currency !== body.currency
      ) {
        flag(
          `${key}: payment ${payment.id} is for ${payment.amount} ${payment.currency}, its request for ${body.amount} ${body.currency}`,
        );
      }
      const ledger = (ledgerOf.get(payment.id) ?? [])
        .map((row) => `${row.direction} ${row.account} ${row.amount}`)
        .sort();
      const expected = [
        `credit merchant:${body.merchantId} ${body.amount}`,
        `debit customer ${body.amount}`,
      ];
      if (JSON.stringify(ledger) !== JSON.stringify(expected)) {
        flag(
          `${key}: payment ${payment.id} has ledger rows [${ledger.join('; ')}], not [${expected.join('; ')}]`,
        );
      }
      const charge = chargeById.get(payment.charge_id ?? '');
      if (
        !charge ||
        derived === undefined ||
        charge.key !== derived ||
        charge.amount !== body.amount ||
        charge.currency !== body.currency
      ) {
        flag(
          `${key}: payment ${payment.id} is booked on charge ${payment.charge_id}, ${charge ? `made under ${charge.key} for ${charge.amount} ${charge.currency}` : 'which the gateway never made'}; its derived key is ${derived ?? 'unknown (no completed record)'}`,
        );
      }
    }

    const calls = derived === undefined ? [] : (callsOf.get(derived) ?? []);
    const foreign = calls.filter(
      (call) => call.amount !== body.amount || call.currency !== body.currency,
    );
    if (foreign.length > 0) {
      flag(
        `${key}: the gateway got ${foreign.length} charge calls under its derived key ${derived} for another body (${foreign[0].amount} ${foreign[0].currency})`,
      );
    }
    for (const x of exchanges.filter(
      (x) => x.role === 'rival' && x.status === 502,
    )) {
      // The rival's own calls are under the key it derived, which no record
      // keeps once the payment completed: any refused call of its body.
      if (
        !evidence.calls.some(
          (call) =>
            call.refused &&
            call.amount === x.sent.amount &&
            call.currency === x.sent.currency,
        )
      ) {
        flag(
          `${key}: a 502 to its rival, and the gateway refused none of its calls: ${describeExchange(x)}`,
        );
      }
    }

    // The binding: once a step of one body committed, no other body runs.
    const logged = stepLogOf.get(key) ?? [];
    const fingerprints = new Set(logged.map((step) => step.fingerprint));
    if (fingerprints.size > 1) {
      flag(
        `${key}: steps committed for ${fingerprints.size} requests (charges ${logged.map((step) => step.chargeId).join(', ')})`,
      );
    }
    for (const x of exchanges.filter(handlerRan)) {
      const bound = boundElsewhere(
        logged,
        chargeById,
        x.sent,
        evidence.startedAt + x.sentAt,
      );
      if (bound) {
        flag(
          `${key}: its handler ran for a body it was not bound to, a step of charge ${bound.chargeId} having committed at ${Math.round(bound.at - evidence.startedAt)}ms: ${describeExchange(x)}`,
        );
      }
    }

    if (plan.conflict) {
      const conflicts = exchanges.filter((x) => x.role === 'conflict');
      if (oks.length > 0 && !conflicts.some((x) => x.status === 422)) {
        flag(
          `${key}: another body under it never got its 422: ${conflicts.map(describeExchange).join(' | ') || 'not sent'}`,
        );
      }
    }

    if (payment) {
      const stored = parse(completed[0]?.response_body ?? undefined);
      if (completed.length !== 1 || stored?.id !== payment.id) {
        flag(
          `${key}: payment ${payment.id} without its completed record (records: ${records.map((r) => `${r.status} ${String(parse(r.response_body ?? undefined)?.id)}`).join(', ') || 'none'})`,
        );
      }
    } else if (completed.length > 0) {
      flag(
        `${key}: record completed (payment ${String(parse(completed[0].response_body ?? undefined)?.id)}) without its payment`,
      );
    }
    const inProgress = records.filter((r) => r.status === 'in_progress');
    if (inProgress.length > 0) {
      flag(`${key}: still in progress after the run`);
    }
    if (completed.length > 0 && stepsLeft.has(key)) {
      flag(`${key}: steps left behind its completed record`);
    }

    const finals = exchanges.filter((x) => x.role === 'final');
    const lastOk = finals.find((x) => is2xx(x.status));
    if (
      !lastOk ||
      lastOk.sentAt + lastOk.tookMs > evidence.final.at + evidence.final.boundMs
    ) {
      flag(
        `${key}: stuck: its last request got no 2xx within ${evidence.final.boundMs}ms of the end of the faults: ${finals
          .slice(-3)
          .map(describeExchange)
          .join(' | ')}`,
      );
    }
  }

  for (const [merchant, rows] of paymentsOf) {
    if (!planned.has(merchant.replace(/^m_/, ''))) {
      flag(`payments nobody asked for: ${merchant} ${rows.length}`);
    }
  }
  const bookings = groupBy(
    evidence.payments.filter((row) => row.charge_id !== null),
    (row) => row.charge_id!,
  );
  // The payments and rivals of a body (by its amount and currency).
  const sentBy = (call: { amount: number; currency: string }) =>
    evidence.plans.flatMap((plan) =>
      [plan.body, plan.rival]
        .filter(
          (sent) =>
            sent?.amount === call.amount && sent.currency === call.currency,
        )
        .map((sent) => ({
          key: plan.key,
          role: sent === plan.body ? 'payment' : 'rival',
        })),
    );
  const describeSenders = (call: { amount: number; currency: string }) =>
    sentBy(call)
      .map(({ key, role }) => `${key}'s ${role}`)
      .join(' or ') || 'nobody';
  for (const call of evidence.calls) {
    if (call.refused) {
      flag(
        `a charge call refused: its derived key ${call.key} carried another body before (${call.amount} ${call.currency}, ${describeSenders(call)})`,
      );
    }
    if (!keyOfDerived.has(call.key) && sentBy(call).length === 0) {
      flag(
        `a charge call for a body no payment or rival has: ${call.amount} ${call.currency} under ${call.key}`,
      );
    }
  }
  for (const charge of evidence.charges) {
    const booked = bookings.get(charge.id) ?? [];
    const owner = keyOfDerived.get(charge.key);
    // The key it belongs to, as far as one can tell, to trace it.
    const about = owner ?? sentBy(charge)[0]?.key;
    const prefix = about === undefined ? '' : `${about}: `;
    if (booked.length > 1) {
      flag(
        `${prefix}charge ${charge.id} (${charge.key}) booked by ${booked.length} payments`,
      );
    }
    if (booked.length === 0) {
      flag(
        `${prefix}charge ${charge.id} (${charge.key}, ${charge.amount} ${charge.currency}: ${owner === undefined ? describeSenders(charge) : `${owner}'s derived key`}) made but never booked`,
      );
    }
    if (owner === undefined || !planned.has(owner)) {
      flag(
        `${prefix}charge ${charge.id} under a key that no planned key's record derives: ${charge.key}`,
      );
    }
  }
  return violations;
}

/**
 * What the rivals met, for the summary: how many were sent and how they
 * ended, and how many of them after a step of their payment committed (the
 * key bound), e.g. `20 sent (201×4, 422×13, 502×3), 6 of them after a step
 * of their payment committed (422×6)`.
 */
export function describeRivals(evidence: SoakEvidence): string {
  const chargeById = new Map(evidence.charges.map((c) => [c.id, c]));
  const stepLogOf = groupBy(evidence.stepLog, (step) => step.key);
  const ends: string[] = [];
  const boundEnds: string[] = [];
  for (const plan of evidence.plans) {
    const rivals = evidence.exchanges.filter(
      (x) => x.key === plan.key && x.role === 'rival',
    );
    if (!plan.rival || rivals.length === 0) {
      continue;
    }
    const end = String(rivals.at(-1)!.status ?? rivals.at(-1)!.error);
    ends.push(end);
    if (
      boundElsewhere(
        stepLogOf.get(plan.key) ?? [],
        chargeById,
        plan.rival,
        evidence.startedAt + rivals[0].sentAt,
      )
    ) {
      boundEnds.push(end);
    }
  }
  const count = (list: string[]) =>
    [...groupBy(list, (end) => end)]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([end, all]) => `${end}×${all.length}`)
      .join(', ');
  return `${ends.length} sent (${count(ends)}), ${boundEnds.length} of them after a step of their payment committed (${count(boundEnds)})`;
}
