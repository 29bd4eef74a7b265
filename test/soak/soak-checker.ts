import type pg from 'pg';
import type { GatewayCall, GatewayCharge } from './recording-gateway.js';
import type { Exchange } from './soak-client.js';
import type { PaymentPlan } from './soak-payments.js';

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

interface RecordRow {
  readonly key: string;
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
): Promise<Pick<SoakEvidence, 'payments' | 'ledger' | 'records' | 'steps'>> {
  const [payments, ledger, records, steps] = await Promise.all([
    db.query<PaymentRow>(
      'SELECT id, merchant_id, amount, currency, charge_id FROM payments',
    ),
    db.query<LedgerRow>(
      'SELECT payment_id, account, direction, amount FROM ledger_entries',
    ),
    db.query<RecordRow>(
      'SELECT key, status, response_body FROM idempotency_records',
    ),
    db.query<{ key: string }>('SELECT key FROM idempotency_steps'),
  ]);
  return {
    payments: payments.rows,
    ledger: ledger.rows,
    records: records.rows,
    steps: steps.rows.map((row) => row.key),
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
  payment: [201, 409, 503],
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

/** An exchange as one line. */
export function describeExchange(exchange: Exchange): string {
  const answer =
    exchange.status === undefined
      ? exchange.error
      : `${exchange.status}${exchange.replayed ? ' replayed' : ''} ${exchange.body?.toString().slice(0, 160) ?? ''}`;
  return `${exchange.key} ${exchange.role} → #${exchange.instance} at ${exchange.sentAt}ms (${exchange.tookMs}ms): ${answer}`;
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
 * - no 5xx other than the module's 503, no status a request of its role
 *   cannot get (another body under a used key gets 422, never a 2xx; a
 *   duplicate after the 2xx is never refused), every 409, 422 and 503 the
 *   module's problem;
 * - every key got a 2xx, all of its 2xx bodies byte for byte the same, at
 *   most one of them executed (not replayed), each describing its own
 *   request's payment;
 * - that payment is the key's only one, in the database with the id of the
 *   body, booked on the gateway's charge for the key's derived key
 *   (`<key>:charge`), made for the request's amount and currency, with two
 *   ledger rows (the customer's debit, the merchant's credit);
 * - its record is completed and stores that payment; no record completed
 *   without a payment, none still in progress, no step left;
 * - the gateway: every call for a key carries the request's amount (no other
 *   body reached it), no charge booked by two payments, none never booked;
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
  const callsOf = groupBy(evidence.calls, (call) => call.key);
  const chargeById = new Map(evidence.charges.map((c) => [c.id, c]));
  const stepsLeft = new Set(evidence.steps);

  for (const exchange of evidence.exchanges) {
    if (exchange.status === undefined) {
      continue;
    }
    if (exchange.status >= 500 && exchange.status !== 503) {
      flag(`a ${exchange.status}: ${describeExchange(exchange)}`);
    } else if (!EXPECTED[exchange.role].includes(exchange.status)) {
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
    const { key, body } = plan;
    const exchanges = exchangesOf.get(key) ?? [];
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
    const payments = exchanges.filter((x) => x.role === 'payment');
    if (!payments.some((x) => is2xx(x.status))) {
      flag(
        `${key}: its client got no 2xx before it gave up, last answers: ${payments
          .slice(-3)
          .map(describeExchange)
          .join(' | ')}`,
      );
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
      const unreplayed = oks.filter((x) => x.role !== 'payment' && !x.replayed);
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
        charge.key !== `${key}:charge` ||
        charge.amount !== body.amount ||
        charge.currency !== body.currency
      ) {
        flag(
          `${key}: payment ${payment.id} is booked on charge ${payment.charge_id}, ${charge ? `made under ${charge.key} for ${charge.amount} ${charge.currency}` : 'which the gateway never made'}`,
        );
      }
    }

    const foreign = (callsOf.get(`${key}:charge`) ?? []).filter(
      (call) => call.amount !== body.amount || call.currency !== body.currency,
    );
    if (foreign.length > 0) {
      flag(
        `${key}: the gateway got ${foreign.length} charge calls for another body (${foreign[0].amount} ${foreign[0].currency})`,
      );
    }

    if (plan.conflict) {
      const conflicts = exchanges.filter((x) => x.role === 'conflict');
      if (oks.length > 0 && !conflicts.some((x) => x.status === 422)) {
        flag(
          `${key}: another body under it never got its 422: ${conflicts.map(describeExchange).join(' | ') || 'not sent'}`,
        );
      }
    }

    const records = recordsOf.get(key) ?? [];
    const completed = records.filter((r) => r.status === 'completed');
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
  for (const charge of evidence.charges) {
    const booked = bookings.get(charge.id) ?? [];
    if (booked.length > 1) {
      flag(
        `charge ${charge.id} (${charge.key}) booked by ${booked.length} payments`,
      );
    }
    if (booked.length === 0) {
      flag(`charge ${charge.id} (${charge.key}) made but never booked`);
    }
    if (!planned.has(charge.key.replace(/:charge$/, ''))) {
      flag(`charge ${charge.id} under a key nobody used: ${charge.key}`);
    }
  }
  return violations;
}
