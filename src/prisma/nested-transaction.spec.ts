import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { withNestedTransactions } from './nested-transaction.js';

/**
 * A query as Prisma makes it, which records the transaction it was run in;
 * the real ones run in prisma.e2e-spec.ts.
 */
function query(ran: unknown[]) {
  return {
    [Symbol.toStringTag]: 'PrismaPromise',
    requestTransaction(transaction: unknown) {
      ran.push(transaction);
      return Promise.resolve(ran.length);
    },
  };
}

/**
 * A handle of an interactive transaction whose nested `$transaction(fn)`
 * hands `fn` a handle made by `nestedHandle`.
 */
function handle(nestedHandle: () => object) {
  return {
    $transaction: (fn: (tx: object) => Promise<unknown>) => fn(nestedHandle()),
  };
}

const noLevel = () => Promise.resolve();

describe('withNestedTransactions', () => {
  it("runs a batch's queries in order in the nested handle's transaction", async () => {
    const transaction = { kind: 'itx', id: 'tx-1' };
    const ran: unknown[] = [];
    const tx = withNestedTransactions(
      handle(() => ({
        _createPrismaPromise: (make: (given: unknown) => Promise<unknown>) =>
          make(transaction),
      })),
      noLevel,
    );
    await expect(
      tx.$transaction([query(ran), query(ran)] as never),
    ).resolves.toEqual([1, 2]);
    expect(ran).toEqual([transaction, transaction]);
  });

  it('refuses a batch, before any of its queries runs, on a Prisma whose handles keep their transaction elsewhere', async () => {
    const ran: unknown[] = [];
    const tx = withNestedTransactions(
      handle(() => ({})),
      noLevel,
    );
    const batch = tx.$transaction([query(ran)] as never);
    await expect(batch).rejects.toThrow(IdempotencyConfigurationError);
    await expect(batch).rejects.toThrow(
      /tx\.\$transaction\(async \(tx\) => \[await tx\.payment\.create/,
    );
    expect(ran).toEqual([]);
  });

  it('refuses, as Prisma does, a batch of anything but queries, before it begins', async () => {
    let began = false;
    const tx = withNestedTransactions(
      handle(() => {
        began = true;
        return {};
      }),
      noLevel,
    );
    await expect(
      tx.$transaction([Promise.resolve(1)] as never),
    ).rejects.toThrow(/need to be Prisma Client promises/);
    expect(began).toBe(false);
  });
});
