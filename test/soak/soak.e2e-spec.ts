import pg from 'pg';
import { startEmbeddedPostgres } from '../setup/embedded-postgres.js';
import { RecordingGateway } from './recording-gateway.js';
import { SeededRandom, soakSeed } from './seeded-random.js';
import {
  checkSoak,
  describeExchange,
  describeRivals,
  readTables,
} from './soak-checker.js';
import { SoakClient, type Exchange } from './soak-client.js';
import {
  describeFault,
  injectFaults,
  planFaults,
  type Fault,
  type FaultRecord,
} from './soak-faults.js';
import { SoakInstances } from './soak-instances.js';
import {
  migrate,
  soakFleet,
  SOAK_LIBRARIES,
  type SoakLibrary,
} from './soak-libraries.js';
import { planPayments, runPayments, winningBody } from './soak-payments.js';
import { installStepLog } from './step-log.js';

type EmbeddedServer = Awaited<ReturnType<typeof startEmbeddedPostgres>>;

/**
 * The data library of each instance: one instance per library, or those
 * `SOAK_LIBRARIES` names (see soak-libraries.ts).
 */
const FLEET = soakFleet();
const INSTANCES = FLEET.length;
/** Short, so that a pause outlasts it in a few seconds. */
const LEASE_MS = 2_000;
/**
 * 40 clients of 6 payments each, their starts spread over 29 s: as long as
 * the faults, each instance busy enough for them to find its handlers.
 */
const LOAD = { clients: 40, perClient: 6, windowMs: 29_000 };
/** A request that takes longer is given up and sent again (same key and body). */
const REQUEST_TIMEOUT_MS = 2_500;
const RETRY_AFTER_CAP_MS = 250;
/** How long the clients still have for their 2xx once the faults are over. */
const SETTLE_MS = 20_000;
/** How long each key's last request has for its 2xx: the lease and a margin. */
const FINAL_BOUND_MS = LEASE_MS + 5_000;

const seed = soakSeed();
const replay = `replay with SOAK_SEED=${seed}`;

/** `error` with the seed in its message, to replay the run. */
function withSeed(error: unknown): Error {
  const message = error instanceof Error ? error.message : String(error);
  return new Error(`soak seed ${seed} (${replay}): ${message}`, {
    cause: error,
  });
}

/** `items`, counted by `what`: `201×310, 409×12, ECONNRESET×3`. */
function count<T>(items: readonly T[], what: (item: T) => string): string {
  const counts = new Map<string, number>();
  for (const item of items) {
    counts.set(what(item), (counts.get(what(item)) ?? 0) + 1);
  }
  return [...counts]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, n]) => `${name}×${n}`)
    .join(', ');
}

/** The statuses of `exchanges`, counted: `201×310, 409×12, ECONNRESET×3`. */
function tally(exchanges: readonly Exchange[]): string {
  return count(exchanges, (x) => String(x.status ?? x.error));
}

/**
 * What the instances logged of the module's failed attempts, counted:
 * `lease-lost×1, failed×9 (4 transactions lost)`.
 */
function moduleEvents(output: string): string {
  const counts = new Map<string, number>();
  for (const [, event] of output.matchAll(
    /event=(failed|lease-lost|timeout)\b/g,
  )) {
    counts.set(event, (counts.get(event) ?? 0) + 1);
  }
  const lost = output.match(/transaction is no longer open/g)?.length ?? 0;
  return `${[...counts].map(([event, n]) => `${event}×${n}`).join(', ') || 'none'} (${lost} transactions lost)`;
}

/**
 * The instances and libraries the requests of the key a violation names
 * went to: ` [sent to #0 typeorm, #3 kysely]`.
 */
function sentTo(violation: string, exchanges: readonly Exchange[]): string {
  const key = /^(pay-\d+-\d+):/.exec(violation)?.[1];
  const to = new Set(
    exchanges
      .filter((x) => x.key === key)
      .map((x) => `#${x.instance} ${x.library}`),
  );
  return to.size > 0 ? ` [sent to ${[...to].sort().join(', ')}]` : '';
}

/**
 * What each data library of the fleet met, one line each: its requests,
 * what its instances logged of failed attempts, the faults that hit it.
 */
function perLibrary(
  exchanges: readonly Exchange[],
  faults: readonly FaultRecord[],
  instances: SoakInstances,
): string {
  return SOAK_LIBRARIES.filter((library) => FLEET.includes(library))
    .map((library: SoakLibrary) => {
      const own = exchanges.filter((x) => x.library === library);
      // Whether each fault of the library found what it looked for (a
      // handler in its transaction): a fault that did not says `no …`,
      // after its second try too.
      const found = new Map<Fault, boolean>();
      for (const { fault, detail } of faults) {
        if ('library' in fault && fault.library === library) {
          found.set(
            fault,
            found.get(fault) === true || !detail.startsWith('no '),
          );
        }
      }
      const hits = [...found].map(
        ([fault, hit]) => `${fault.kind}${hit ? '' : ' (found none)'}`,
      );
      return (
        `  ${library} (#${instances.of(library).join(', #')}): ${own.length} requests (${tally(own)}); ` +
        `attempts that failed: ${moduleEvents(instances.outputs(Number.POSITIVE_INFINITY, library))}; ` +
        `faults: ${count(hits, (kind) => kind)}, db-restart`
      );
    })
    .join('\n');
}

describe('a seeded soak: instances of the sample app on every data library under kills, pauses past the lease, terminated backends and a database restart', () => {
  let server: EmbeddedServer | undefined;
  let db: pg.Pool | undefined;
  let gateway: RecordingGateway | undefined;
  let instances: SoakInstances | undefined;
  const random = new SeededRandom(seed);

  beforeAll(async () => {
    console.log(
      `soak seed ${seed} (${replay}); instances: ${FLEET.map((library, i) => `#${i} ${library}`).join(', ')}`,
    );
    try {
      // A server of its own, whatever DATABASE_URL says: the soak restarts it.
      server = await startEmbeddedPostgres();
      const admin = new pg.Client({ connectionString: server.url });
      await admin.connect();
      await admin.query('CREATE DATABASE soak');
      await admin.end();
      const url = new URL(server.url);
      url.pathname = '/soak';
      db = new pg.Pool({
        connectionString: url.href,
        max: 4,
        application_name: 'soak-test',
      });
      // Its connections die with the server; it opens new ones after.
      db.on('error', () => undefined);
      const delays = random.fork('gateway');
      gateway = await new RecordingGateway(() => delays.int(20, 800)).start();
      if (FLEET[0] !== 'typeorm') {
        // No instance runs them: a deployment step does.
        await migrate(url.href);
      }
      instances = new SoakInstances(FLEET, {
        DATABASE_URL: url.href,
        GATEWAY_URL: gateway.url,
        SAMPLE_LEASE: `${LEASE_MS}ms`,
        SAMPLE_RETRY_AFTER: '1',
      });
      await instances.start();
      await installStepLog(db);
    } catch (error) {
      throw withSeed(error);
    }
  }, 60_000);

  afterAll(async () => {
    await instances?.stop();
    await gateway?.stop();
    await db?.end();
    await server?.stop();
  });

  it('loses no payment, makes none twice, replays each byte for byte, answers no 500 and leaves no key stuck', async () => {
    let violations: string[];
    try {
      violations = await soak();
    } catch (error) {
      throw String((error as { message?: unknown }).message).startsWith(
        'soak seed',
      )
        ? error
        : withSeed(error);
    }
    expect(violations).toEqual([]);
  }, 150_000);

  /**
   * Runs the clients and the faults, then every key once more, and checks
   * what they left.
   * @returns no violations (it throws them, with the seed and a trace).
   */
  async function soak(): Promise<string[]> {
    const plans = planPayments(random.fork('payments'), LOAD);
    const faultPlan = planFaults(random.fork('faults'), FLEET, LEASE_MS);
    const startedAt = Date.now();
    let deadline = Number.POSITIVE_INFINITY;
    const client = new SoakClient({
      urls: () => instances!.urls(),
      startedAt,
      timeoutMs: REQUEST_TIMEOUT_MS,
      retryAfterCapMs: RETRY_AFTER_CAP_MS,
      deadline: () => deadline,
      libraryOf: (index) => FLEET[index],
    });
    const clients = Promise.all(
      Array.from({ length: LOAD.clients }, (_, c) =>
        runPayments(
          plans.filter((plan) => plan.client === c),
          client,
          random.fork(`client-${c}`),
          startedAt,
          INSTANCES,
        ),
      ),
    );
    let faults: FaultRecord[];
    try {
      faults = await injectFaults(faultPlan, {
        instances: instances!,
        db: db!,
        server: server!,
        random: random.fork('victims'),
        startedAt,
      });
    } finally {
      deadline = Date.now() + SETTLE_MS;
      await clients;
    }

    // Every key once more (the body that completed under it), now that
    // nothing fails any more: each gets its 2xx within the lease and a
    // margin, or it is stuck.
    const final = { at: Date.now() - startedAt, boundMs: FINAL_BOUND_MS };
    deadline = Date.now() + FINAL_BOUND_MS;
    await Promise.all(
      plans.map((plan) =>
        client.send(
          plan.key,
          winningBody(plan, client.exchanges),
          'final',
          random.fork(`${plan.key}/final`),
        ),
      ),
    );

    const tables = await readTables(db!);
    const evidence = {
      plans,
      exchanges: client.exchanges,
      ...tables,
      startedAt,
      calls: gateway!.calls,
      charges: [...gateway!.charges.values()],
      final,
    };
    // An instance that exited on its own is a violation too.
    const violations = [...checkSoak(evidence), ...instances!.crashes];
    const faultLog = faults
      .map(
        (f) =>
          `  ${f.at}ms +${f.tookMs}ms ${describeFault(f.fault)}${f.again ? ' (again)' : ''}: ${f.detail}`,
      )
      .join('\n');
    const summary =
      `soak seed ${seed}: ${Date.now() - startedAt}ms, ${plans.length} payments, ` +
      `${client.exchanges.length} requests (${tally(client.exchanges)}); ` +
      `${tables.payments.length} payments, ${tables.ledger.length} ledger rows, ` +
      `${gateway!.charges.size} charges from ${gateway!.calls.length} gateway calls ` +
      `(${gateway!.calls.filter((call) => call.refused).length} refused); ` +
      `rivals: ${describeRivals(evidence)}; ` +
      `attempts that failed: ${moduleEvents(instances!.outputs(Number.POSITIVE_INFINITY))}; ` +
      `per library:\n${perLibrary(client.exchanges, faults, instances!)}\nfaults:\n${faultLog}`;
    if (violations.length > 0) {
      const keys = new Set(
        violations.flatMap((line) => /^(pay-\d+-\d+):/.exec(line)?.[1] ?? []),
      );
      const trace = client.exchanges
        .filter((x) => keys.has(x.key))
        .slice(0, 60)
        .map((x) => `  ${describeExchange(x)}`)
        .join('\n');
      // Errors, and what the module logged of those keys.
      const logged = instances!
        .outputs(Number.POSITIVE_INFINITY)
        .split('\n')
        .filter(
          (line) =>
            /ERROR|^--- instance/.test(line) ||
            [...keys].some((key) => line.includes(`"${key}"`)),
        )
        .slice(-60)
        .join('\n');
      throw new Error(
        `soak seed ${seed} (${replay}): ${violations.length} violations:\n` +
          violations
            .slice(0, 40)
            .map((line) => `${line}${sentTo(line, client.exchanges)}`)
            .join('\n') +
          `\n\n${summary}\n\nexchanges of those keys:\n${trace}\n\nwhat the instances logged of them:\n${logged}`,
      );
    }
    console.log(summary);
    return violations;
  }
});
