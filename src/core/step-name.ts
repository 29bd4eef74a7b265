import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';

/**
 * @internal Most bytes of UTF-8 that a step's name takes together with its
 * scope and key: what every store keeps of a step's identity. PostgreSQL's
 * steps table has them as its primary key, whose index row holds 2,704
 * bytes with its headers; a longer one fails every save (SQLSTATE 54000)
 * after the step's effect ran.
 */
export const MAX_STEP_IDENTITY_BYTES = 2560;

/**
 * A NUL (U+0000), which PostgreSQL's `text` cannot hold (every read of the
 * step fails, as an outage would), or a lone surrogate, which UTF-8 cannot
 * encode (a store keeps another name, or refuses it).
 */
const UNSTORABLE_CHARACTER = /\0|\p{Cs}/u;

/**
 * @internal Refuses, before the step runs anything, a name of a step that
 * not every store can keep: too long together with its scope and key, or
 * with a character that is not text in every store.
 * @throws IdempotencyConfigurationError (a programming error: the handler
 * names its steps).
 */
export function checkStepName(scope: string, key: string, name: string): void {
  const bytes =
    Buffer.byteLength(scope) + Buffer.byteLength(key) + Buffer.byteLength(name);
  if (bytes > MAX_STEP_IDENTITY_BYTES) {
    throw stepNameError(
      `The name of step ${preview(name)} takes ${bytes} bytes (UTF-8) with the request's scope and key, over the ${MAX_STEP_IDENTITY_BYTES} that every idempotency store keeps of a step.`,
    );
  }
  if (UNSTORABLE_CHARACTER.test(name)) {
    throw stepNameError(
      `The name of step ${preview(name)} has a NUL character (U+0000) or a lone surrogate (not well-formed UTF-16), which not every idempotency store keeps as text.`,
    );
  }
}

/**
 * @internal The error of a step name used a second time in one execution:
 * at once, both calls would run the effect; one after the other, the
 * second would be given the first one's result, its own effect never run.
 */
export function duplicateStepError(
  name: string,
): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    `Step ${preview(name)} is called a second time in one execution of the handler. This is a programming error: a name stands for one effect, whose result a retry reads back. The second call did not run.`,
    "Give every step of a handler a name of its own ('charge', 'refund'), and call each once per execution.",
    'To try an effect again within one execution, do it inside the step: step(name, () => withRetries(call)).',
  );
}

function stepNameError(problem: string): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    `${problem} This is a programming error: the step did not run.`,
    "Name steps with short fixed strings ('charge', 'email-receipt'), not with data of the request.",
  );
}

/** A name as a message shows it: as JSON, its first 64 characters. */
function preview(name: string): string {
  return name.length > 64
    ? `${JSON.stringify(name.slice(0, 64))}…`
    : JSON.stringify(name);
}
