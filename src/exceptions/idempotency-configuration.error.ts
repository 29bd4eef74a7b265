/**
 * Thrown at bootstrap when the module or a decorated route is misconfigured,
 * and while a handler runs when its code misuses the module (a step without
 * a key, a step's name not every store can keep or called twice in one
 * execution): a programming error, which the transports answer as the
 * handler's own error (a `500` over HTTP). The message says what is wrong
 * and how to fix it.
 */
export class IdempotencyConfigurationError extends Error {
  constructor(problem: string, ...solutions: string[]) {
    super(
      solutions.length > 0
        ? `${problem}\nPotential solutions:\n${solutions.map((s) => `- ${s}`).join('\n')}`
        : problem,
    );
    this.name = 'IdempotencyConfigurationError';
  }
}
