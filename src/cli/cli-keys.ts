import { readFile } from 'node:fs/promises';
import type { IdempotencyEncryptionOptions } from '../interfaces/idempotency-privacy.interface.js';
import { IdempotencyPrivacy } from '../privacy/idempotency-privacy.service.js';
import { CliUsageError } from './cli-usage-error.js';
import { messageOf } from '../core/error-message.js';

/** The environment variable that may hold the key ring, as JSON. */
export const KEYS_VARIABLE = 'IDEMPOTENCY_KEYS';

/**
 * @internal The key ring of the command line, never from its arguments
 * (which other users of the machine can read in the process list): the
 * JSON file `file` names (`--keys`), else the JSON of `IDEMPOTENCY_KEYS`;
 * `{ "keys": { "<id>": "<base64 of 32 bytes>" }, "current": "<id>" }`, as
 * the module's `encryption` option. `undefined` when neither is given (or
 * the variable is empty).
 * @throws CliUsageError saying what is wrong, without a key's value.
 */
export async function cliPrivacy(
  file: string | undefined,
  env: NodeJS.ProcessEnv,
): Promise<IdempotencyPrivacy | undefined> {
  const [text, source] =
    file === undefined
      ? [env[KEYS_VARIABLE], KEYS_VARIABLE]
      : [await readRing(file), file];
  if (text === undefined || text === '') {
    if (file !== undefined) {
      // Named, it is meant: never read as no ring (sealed responses shown
      // as unreadable, reencrypt asking for the ring it was given).
      throw new CliUsageError(
        `The key ring file ${file} is empty: give { "keys": { "<id>": "<base64>" }, "current": "<id>" }.`,
      );
    }
    return undefined;
  }
  let ring: IdempotencyEncryptionOptions;
  try {
    ring = JSON.parse(text) as IdempotencyEncryptionOptions;
  } catch {
    // The parser's message may quote the text, keys included.
    throw new CliUsageError(
      `The key ring in ${source} is not JSON: give { "keys": { "<id>": "<base64>" }, "current": "<id>" }.`,
    );
  }
  try {
    return IdempotencyPrivacy.withKeys(ring);
  } catch (error) {
    // Its message says the shape expected, never a key's value.
    throw new CliUsageError(
      `The key ring in ${source} is refused: ${messageOf(error)}`,
    );
  }
}

/** The text of the key ring file `file`. */
async function readRing(file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (error) {
    throw new CliUsageError(
      `The key ring file ${file} cannot be read (${(error as NodeJS.ErrnoException).code ?? messageOf(error)}).`,
    );
  }
}
