import {
  IdempotentClient,
  RetriesExhaustedError,
  type IdempotentResult,
} from '../../src/client/index.js';
import { SeededRandom, seedFrom } from '../soak/seeded-random.js';
import { StandInDownstream, type ScriptedAnswer } from './stand-in.js';

/*
 * Many operations at once, each answered by a script drawn from a seed:
 * transient answers in any order (dropped connections before and after the
 * effect, no answer before and after it, 409, 429, 5xx), sometimes ended by
 * an answer to stop at, sometimes longer than the attempts allowed. The
 * outcome of each operation follows from its script alone, and is checked
 * exactly. The seed is printed; `CLIENT_SEED=<seed>` replays a run. The
 * attempt's timeout is long enough that only a silent answer reaches it,
 * even when the first requests of the process load fetch and the machine
 * is busy (at 1 s, an answer of the stand-in reached the client too late
 * under a loaded CI run, and the attempt was sent again); silent answers
 * are drawn rarely, so that the run stays short.
 */

const OPERATIONS = 40;
const ATTEMPTS = 8;

/** Attempts that get no answer cost this long each: drawn less often. */
const ATTEMPT_TIMEOUT_MS = 5000;
/** How often a transient answer is a silent one. */
const SILENT_CHANCE = 0.03;
const SILENT: readonly ScriptedAnswer[] = ['hang', 'effect-hang'];
const TRANSIENT: readonly ScriptedAnswer[] = [
  'drop',
  'effect-drop',
  { status: 409, retryAfter: '0' },
  { status: 429 },
  { status: 503, retryAfter: '0' },
  { status: 500 },
  { status: 502 },
  { status: 504 },
];
const FINAL: readonly ScriptedAnswer[] = [
  { status: 400 },
  { status: 422 },
  { status: 501 },
  { status: 503, replayed: true },
  { status: 409, replayed: true },
];

/** What an operation must end with, given its script. */
interface Expected {
  readonly outcome: 'result' | 'exhausted';
  readonly status: number | undefined;
  readonly replayed: boolean;
  readonly attempts: number;
  /** Whether its key took effect on the stand-in. */
  readonly effect: boolean;
}

function expectedOf(script: readonly ScriptedAnswer[]): Expected {
  const seen = script.slice(0, ATTEMPTS);
  const effect = seen.some(
    (answer) => answer === 'effect-drop' || answer === 'effect-hang',
  );
  if (script.length >= ATTEMPTS) {
    const last = seen[ATTEMPTS - 1];
    return {
      outcome: 'exhausted',
      status: typeof last === 'object' ? last.status : undefined,
      replayed: false,
      attempts: ATTEMPTS,
      effect,
    };
  }
  const last = script.at(-1);
  if (typeof last === 'object' && FINAL.includes(last)) {
    return {
      outcome: 'result',
      status: last.status,
      replayed: last.replayed ?? false,
      attempts: script.length,
      effect,
    };
  }
  // The script used up, the key takes effect or replays its effect.
  return {
    outcome: 'result',
    status: 201,
    replayed: effect,
    attempts: script.length + 1,
    effect: true,
  };
}

describe('operations under a seeded mix of faults', () => {
  const seed = seedFrom('CLIENT_SEED');
  let standIn: StandInDownstream;

  beforeAll(async () => {
    standIn = await new StandInDownstream().start();
  });
  afterAll(() => standIn.stop());

  it(`each ends as its script says, with one key and at most one effect (seed ${seed})`, async () => {
    console.log(
      `client randomized: seed ${seed} (replay with CLIENT_SEED=${seed})`,
    );
    const random = new SeededRandom(seed);
    const draw = random.fork('scripts');
    const transient = () =>
      draw.chance(SILENT_CHANCE) ? draw.pick(SILENT) : draw.pick(TRANSIENT);
    const scripts = Array.from({ length: OPERATIONS }, () => {
      if (draw.chance(0.1)) {
        return Array.from({ length: ATTEMPTS + 2 }, transient);
      }
      const script = Array.from(
        { length: draw.int(0, ATTEMPTS - 2) },
        transient,
      );
      return draw.chance(0.25) ? [...script, draw.pick(FINAL)] : script;
    });
    standIn.scriptOf = (first) =>
      scripts[
        (JSON.parse(first.body.toString()) as { operation: number }).operation
      ];
    const jitter = random.fork('jitter');
    const client = new IdempotentClient({
      attempts: ATTEMPTS,
      baseDelayMs: 2,
      maxDelayMs: 20,
      attemptTimeoutMs: ATTEMPT_TIMEOUT_MS,
      // Silent attempts in a row must not reach the deadline (tested
      // elsewhere): only the attempts end an operation here.
      deadlineMs: 10 * ATTEMPTS * ATTEMPT_TIMEOUT_MS,
      random: () => jitter.next(),
    });

    const outcomes = await Promise.all(
      scripts.map((_, operation) =>
        client
          .send(`${standIn.url}/operations`, {
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ operation }),
          })
          .catch((error: unknown) => error),
      ),
    );

    const seen = outcomes.map((outcome) => {
      if (outcome instanceof RetriesExhaustedError) {
        return {
          key: outcome.key,
          outcome: 'exhausted',
          status: outcome.status,
          replayed: false,
          attempts: outcome.attempts,
        };
      }
      const result = outcome as IdempotentResult;
      return {
        key: result.key,
        outcome: 'result',
        status: result.response.status,
        replayed: result.replayed,
        attempts: result.attempts,
      };
    });
    const expected = scripts.map(expectedOf);
    try {
      expect(seen.map(({ key: _key, ...rest }) => rest)).toEqual(
        expected.map(({ effect: _effect, ...rest }) => rest),
      );
      seen.forEach(({ key, attempts }, operation) => {
        // Every attempt the stand-in received for the key is one of this
        // operation's, with its body.
        expect(
          standIn
            .attempts(key)
            .map((attempt) => [
              attempt.key,
              attempt.method,
              attempt.body.toString(),
            ]),
        ).toEqual(
          Array.from({ length: attempts }, () => [
            key,
            'POST',
            JSON.stringify({ operation }),
          ]),
        );
      });
      expect(new Set(seen.map(({ key }) => key)).size).toBe(OPERATIONS);
      expect(standIn.total).toBe(
        seen.reduce((sum, { attempts }) => sum + attempts, 0),
      );
      expect([...standIn.effects.keys()].sort()).toEqual(
        seen
          .filter((_, operation) => expected[operation].effect)
          .map(({ key }) => key)
          .sort(),
      );
    } catch (error) {
      throw new Error(
        `client randomized, seed ${seed} (replay with CLIENT_SEED=${seed}): ${(error as Error).message}`,
        { cause: error },
      );
    }
    const tally = (what: (e: Expected) => boolean) =>
      expected.filter(what).length;
    console.log(
      `client randomized (seed ${seed}): ${OPERATIONS} operations, ${standIn.total} attempts; ` +
        `${tally((e) => e.status === 201 && !e.replayed)} × 201, ` +
        `${tally((e) => e.status === 201 && e.replayed)} × 201 replayed, ` +
        `${tally((e) => e.outcome === 'result' && e.status !== 201)} stopped at a final answer, ` +
        `${tally((e) => e.outcome === 'exhausted')} out of attempts; ${standIn.effects.size} effects`,
    );
  });
});
