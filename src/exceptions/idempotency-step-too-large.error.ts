/**
 * Thrown by a store's `saveStep` when a step's result can never be kept
 * there, whatever the retry: it is larger than the store holds (DynamoDB's
 * item of 400 KB, PostgreSQL's `jsonb` value of 256 MB). The module then
 * records that the step ran without a result (a small value of its own in
 * place of the result) and answers this request, and every retry of it,
 * with {@link IdempotencyStepResultTooLargeException} (500), never running
 * the step again. Any other error of `saveStep` is taken as the store out
 * of reach for now: 503, and the retry runs the step again.
 *
 * A store of your own throws it, before writing anything, for a result it
 * can never hold; never for a refusal that may pass (a full memory, a
 * throttled table).
 *
 * @example
 * if (Buffer.byteLength(json) > LIMIT) {
 *   throw new IdempotencyStepTooLargeError(step, Buffer.byteLength(json), LIMIT);
 * }
 */
export class IdempotencyStepTooLargeError extends Error {
  /**
   * @param step the step's name.
   * @param bytes the size of the result as the store would have kept it
   * (sealed, with the `encryption` option).
   * @param limitBytes the most the store keeps for it (where the key's
   * other steps share its room, as in a DynamoDB item, they may leave less).
   * @param detail what the store says of its limit, appended to the message.
   */
  constructor(
    readonly step: string,
    readonly bytes: number,
    readonly limitBytes: number,
    detail?: string,
  ) {
    super(
      `The result of step ${JSON.stringify(step)} (${bytes} bytes as stored) is too large for the store, which keeps at most ${limitBytes} bytes for it${detail ? `: ${detail}` : ''}`,
    );
    this.name = 'IdempotencyStepTooLargeError';
  }
}
