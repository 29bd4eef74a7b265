import { DataSource } from 'typeorm';
import { idempotencyMigrations } from '../../migrations/index.js';
import { CreatePayments1764000000100 } from '../../sample-app/migrations/1764000000100-create-payments.js';
import { AddChargeId1764000000101 } from '../../sample-app/migrations/1764000000101-add-charge-id.js';
import { LIBRARY_NAMES } from '../data-libraries/payments-library.js';
import { TUNED_SAMPLE, type SampleEntry } from '../utils/sample-process.js';

/** The data libraries an instance of the soak writes with, TypeORM first. */
export const SOAK_LIBRARIES = ['typeorm', ...LIBRARY_NAMES] as const;

/** A data library of the soak. */
export type SoakLibrary = (typeof SOAK_LIBRARIES)[number];

/** Instances of a fleet of one library. */
const INSTANCES_OF_ONE = 3;

/**
 * The data library of each instance of the soak's fleet, from `names`
 * (`SOAK_LIBRARIES`, a comma-separated list): by default one instance per
 * library, so that every library meets the faults in every run (a fleet
 * moving from one library to another meets the same); the libraries
 * named, one instance each and at least {@link INSTANCES_OF_ONE} in all
 * (three instances of one library when one is named). TypeORM comes
 * first: its instance runs the migrations at start-up.
 */
export function soakFleet(names = process.env.SOAK_LIBRARIES): SoakLibrary[] {
  const asked = (names ?? '')
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
  const unknown = asked.filter(
    (name) => !(SOAK_LIBRARIES as readonly string[]).includes(name),
  );
  if (unknown.length > 0) {
    throw new Error(
      `SOAK_LIBRARIES=${names}: ${unknown.join(', ')} unknown; expected a comma-separated list of ${SOAK_LIBRARIES.join(', ')}`,
    );
  }
  const libraries = SOAK_LIBRARIES.filter(
    (library) => asked.length === 0 || asked.includes(library),
  );
  if (libraries.length >= INSTANCES_OF_ONE || asked.length === 0) {
    return libraries;
  }
  return Array.from(
    { length: INSTANCES_OF_ONE },
    (_, i) => libraries[i % libraries.length],
  );
}

/**
 * How an instance of `library` runs: TypeORM's is the compiled sample app
 * under tuned-sample.js; the others are the sample's payments API written
 * with the library (test/soak/app/, compiled by `npm run build:sample`).
 */
export function libraryEntry(library: SoakLibrary): {
  entry: SampleEntry;
  env: Record<string, string>;
} {
  return library === 'typeorm'
    ? { entry: TUNED_SAMPLE, env: {} }
    : {
        entry: { entry: 'data-libraries/test/soak/app/main.js' },
        env: { SOAK_LIBRARY: library },
      };
}

/**
 * The handler's last statement with each library, as `pg_stat_activity`
 * shows it (a `LIKE` pattern): the read-back of the payment with its
 * ledger rows, after which the completion comes. Prisma reads the ledger
 * rows in a statement of their own, its last.
 */
export const LAST_STATEMENT: Record<SoakLibrary, string> = {
  typeorm: 'SELECT "Payment"."id"%',
  pg: 'SELECT p.id, p.amount, %',
  drizzle: 'select "payments"."id", "payments"."amount"%',
  kysely: 'select "p"."id", "p"."amount"%',
  prisma: 'SELECT "public"."ledger_entries"."id"%',
};

/**
 * Runs the sample's migrations and the module's on `url`, as a deployment
 * does before it starts applications that do not run them (the libraries
 * but TypeORM).
 */
export async function migrate(url: string): Promise<void> {
  const dataSource = new DataSource({
    type: 'postgres',
    url,
    migrations: [
      ...idempotencyMigrations,
      CreatePayments1764000000100,
      AddChargeId1764000000101,
    ],
  });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations();
  } finally {
    await dataSource.destroy();
  }
}
