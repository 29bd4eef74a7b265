/**
 * Thrown at bootstrap when the module or a decorated route is misconfigured.
 * The message says what is wrong and how to fix it.
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
