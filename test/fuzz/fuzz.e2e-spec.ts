/**
 * Invariant I8: bad input is a clear 4xx.
 *
 * Property-based, end to end: thousands of generated requests with random,
 * malformed and hostile idempotency keys, bodies and methods, sent as raw
 * bytes over TCP to a real application on a real PostgreSQL. For every
 * request:
 *
 * - the answer is a 2xx, 400, 404/405 (only for a method or path no decorated
 *   route has: both platforms answer 404, OPTIONS and HEAD included), 409 or
 *   422, never a 5xx; bytes that are not valid HTTP (control characters in a
 *   header value, whitespace before the colon, line folding, a method llhttp
 *   does not know) may instead get the HTTP server's own 400 (Node's bare
 *   one, or Fastify's `clientError` answer) or a closed connection: both are
 *   counted;
 * - which one is exactly what the README promises: 400 `missing-key` or
 *   `invalid-key` for a missing, malformed, too long or repeated key (the
 *   platform's 400 first when its body parser refuses the body), a first
 *   execution for a new valid key, a byte-for-byte replay for a duplicate,
 *   422 for the same key with another method, route or body, and 409 only
 *   for a duplicate sent while its original is executing (among concurrent
 *   requests for a new key, each loser is judged against the one that
 *   claimed the key: 409 for the same request, 422 for another, exactly);
 * - a body nested thousands of levels deep (valid JSON under the parsers'
 *   100 KB limit) is executed or refused with a 400, never a 5xx;
 * - the handler runs exactly for the first executions, and the store holds
 *   exactly one record (and the handler's one order row) per key that had one.
 *
 * Requests run in scenarios of 20 to 40, each in an idempotency scope of its
 * own (so that fast-check can replay and shrink a failing scenario), in waves
 * of up to 12 concurrent requests. Duplicates of an earlier key go to a later
 * wave, or, when generated as a race, to the same wave.
 *
 * FUZZ_SEED and FUZZ_RUNS (number of scenarios, 100 by default: about 2,800
 * requests, at least 2,000) override the defaults; FUZZ_PATH replays the path
 * of a counterexample that fast-check printed (with its seed).
 */
import fc from 'fast-check';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  PLATFORMS,
  startTestApp,
  type Platform,
  type TestApp,
} from '../utils/test-app.js';
import { FuzzTestModule, HandlerRuns, fuzzScope } from './fuzz.module.js';
import { exchange } from './raw-http.js';
import {
  planWaves,
  requestBytes,
  resolveScenario,
  scenarioArb,
  type PlannedRequest,
  type RequestSpec,
} from './requests.js';
import { FuzzStats } from './stats.js';
import {
  Violation,
  checkSuccess,
  classify,
  describeExchange,
  requestFingerprint,
  staticExpectation,
  type Exchange,
  type Winner,
} from './verdict.js';

const SEED = Number(process.env.FUZZ_SEED ?? 20_261_122);
const RUNS = Number(process.env.FUZZ_RUNS ?? 100);
const PATH = process.env.FUZZ_PATH;
/** Concurrent requests per wave. */
const WIDTH = 12;
/** Time allowed to run and shrink, ms (a run takes about 10 s per 100). */
const TIME_LIMIT = Math.max(120_000, RUNS * 1_000);

/** Checks the answers of one wave, and records the keys it executed. */
function judgeWave(
  exchanges: readonly Exchange[],
  winners: Map<string, Winner>,
  platform: Platform,
): void {
  const byKey = new Map<string, Exchange[]>();
  for (const item of exchanges) {
    if (item.outcome.startsWith('unexpected-')) {
      throw new Violation(`unexpected answer ${item.outcome}`, item);
    }
    const allowed = staticExpectation(item.request, platform);
    if (allowed) {
      if (!allowed.includes(item.outcome)) {
        throw new Violation(
          `expected ${allowed.join(' or ')}, got ${item.outcome}`,
          item,
        );
      }
      continue;
    }
    if (item.request.body.kind === 'deep' && item.response.status === 400) {
      // A body nested thousands of levels deep may be refused, by the
      // platform or by the module, with a 400 of any kind (never a 5xx).
      continue;
    }
    const { key } = item.request.reading as { key: string };
    byKey.set(key, [...(byKey.get(key) ?? []), item]);
  }
  for (const [key, group] of byKey) {
    const others = () =>
      `\n  all requests of the wave with this key:\n${group.map(describeExchange).join('\n')}`;
    const prior = winners.get(key);
    const fresh = group.filter((item) => item.outcome === 'fresh');
    if (prior ? fresh.length > 0 : fresh.length !== 1) {
      throw new Violation(
        `key ${JSON.stringify(key)} was executed ${fresh.length} time(s) in this wave${prior ? `, after ${prior.id} already had been` : ''}${others()}`,
        fresh[0] ?? group[0],
      );
    }
    const winner: Winner = prior ?? {
      request: fresh[0].request,
      id: fresh[0].id,
      fingerprint: requestFingerprint(fresh[0].request, platform),
      response: fresh[0].response,
    };
    for (const item of group) {
      if (item.outcome === 'fresh') {
        checkSuccess(item, undefined);
        continue;
      }
      const same =
        requestFingerprint(item.request, platform) === winner.fingerprint;
      // README, "What a client sees": a duplicate of the same request gets
      // the replay, or 409 while it executes; another request gets 422.
      const allowed = !same
        ? ['key-reused']
        : prior
          ? ['replay']
          : ['replay', 'in-progress'];
      // Among requests racing for a new key, a loser reads the fingerprint
      // of the claim that won: 409 and 422 are never swapped.
      if (!allowed.includes(item.outcome)) {
        throw new Violation(
          `expected ${allowed.join(' or ')} for a ${same ? 'duplicate' : 'different request'} of ${winner.id}, got ${item.outcome}${others()}`,
          item,
        );
      }
      checkSuccess(item, winner);
    }
    winners.set(key, winner);
  }
}

describe.each(PLATFORMS)('I8: bad input is a clear 4xx (%s)', (platform) => {
  let target: TestApp;
  let runs: HandlerRuns;
  let port: number;

  beforeAll(async () => {
    target = await startTestApp({
      platform,
      imports: [FuzzTestModule],
      idempotency: {
        scope: (context) => fuzzScope(context.switchToHttp().getRequest()),
      },
    });
    runs = target.app.get(HandlerRuns);
    port = Number(new URL(target.url).port);
  });
  afterAll(() => target?.close());

  it(
    'answers every generated request with the documented 2xx, 400, 404, 409 or 422; runs and stores only the valid ones',
    async () => {
      const stats = new FuzzStats();
      let executions = 0;

      /** Sends one scenario, wave by wave, and checks it. */
      const scenario = async (specs: readonly RequestSpec[]) => {
        executions += 1;
        const scope = `${platform}-${SEED}-${executions}`;
        const requests = resolveScenario(specs);
        const winners = new Map<string, Winner>();
        const fresh = new Map<string, Exchange>();
        const sent = new Map<string, Exchange>();
        for (const wave of planWaves(requests, WIDTH)) {
          const exchanges = await Promise.all(
            wave.map(async (request: PlannedRequest): Promise<Exchange> => {
              const id = `${scope}/${request.index}`;
              const bytes = requestBytes(request, {
                host: `127.0.0.1:${port}`,
                scope,
                id,
              });
              const response = await exchange(port, bytes);
              return {
                request,
                id,
                bytes,
                response,
                outcome: classify(response),
              };
            }),
          );
          for (const item of exchanges) {
            stats.record(item);
            sent.set(item.id, item);
            if (item.outcome === 'fresh') {
              fresh.set(item.id, item);
            }
          }
          judgeWave(exchanges, winners, platform);
        }
        stats.scenario(winners.size);

        // The handler ran for the first executions, and for nothing else.
        const ran = runs.ids.filter((id) => id.startsWith(`${scope}/`));
        for (const id of ran) {
          if (!fresh.has(id)) {
            throw new Violation(
              'the handler ran for a request that did not get a first execution',
              sent.get(id) as Exchange,
            );
          }
        }
        if (ran.length !== fresh.size) {
          throw new Error(
            `${fresh.size} first executions but ${ran.length} handler runs in ${scope}`,
          );
        }

        // Exactly one record, and one order row, per executed key.
        const records = await target.db.query<{
          key: string;
          method: string;
          path: string;
          status: string;
          response_status: number;
        }>(
          `SELECT key, method, path, status, response_status
           FROM ${IDEMPOTENCY_TABLE_NAME} WHERE scope = $1`,
          [scope],
        );
        const expected = [...winners.entries()].map(([key, winner]) => ({
          key,
          method: winner.request.method,
          path: winner.request.template,
          status: 'completed',
          response_status: winner.response.status,
        }));
        const byKey = (a: { key: string }, b: { key: string }) =>
          a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
        expect([...records].sort(byKey)).toEqual(expected.sort(byKey));
        const orders = await target.db.query<{ reference: string }>(
          'SELECT reference FROM orders WHERE source = $1',
          [scope],
        );
        expect(orders.map((o) => o.reference).sort()).toEqual(
          [...winners.values()].map((w) => w.id).sort(),
        );
      };

      const started = Date.now();
      try {
        await fc.assert(fc.asyncProperty(scenarioArb, scenario), {
          seed: SEED,
          numRuns: RUNS,
          path: PATH,
          endOnFailure: PATH !== undefined,
          // Shrinking a failure that depends on timing may not converge.
          interruptAfterTimeLimit: TIME_LIMIT,
          markInterruptAsFailure: true,
        });
      } finally {
        console.log(
          stats.report({
            platform,
            seed: SEED,
            runs: RUNS,
            executions,
            seconds: (Date.now() - started) / 1000,
          }),
        );
      }

      // Across the whole run: handler runs, order rows and records.
      const [{ records, orders }] = await target.db.query<{
        records: number;
        orders: number;
      }>(
        `SELECT (SELECT count(*)::int FROM ${IDEMPOTENCY_TABLE_NAME}) AS records,
              (SELECT count(*)::int FROM orders) AS orders`,
      );
      expect(runs.ids.length).toBe(stats.outcomes.get('fresh') ?? 0);
      expect(orders).toBe(runs.ids.length);
      expect(records).toBe(stats.keysExecuted);
      expect(stats.requests).toBeGreaterThanOrEqual(RUNS * 20);
    },
    TIME_LIMIT + 60_000,
  );
});
