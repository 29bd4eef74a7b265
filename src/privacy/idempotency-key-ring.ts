import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { StoredResponse } from '../interfaces/idempotency-store.interface.js';
import type { IdempotencyEncryptionOptions } from '../interfaces/idempotency-privacy.interface.js';
import type { RecordSealing } from '../core/record-sealing.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';

/** What a sealed value starts with: the format's name and version. */
const MAGIC = Buffer.from('IDS1');
const IV_BYTES = 12;
const TAG_BYTES = 16;
/**
 * A step's result sealed as text (for a store of JSON values): this prefix,
 * then the sealed value in base64.
 */
const STEP_PREFIX = 'idempotency-sealed:';
const KEY_ID = /^[A-Za-z0-9._-]{1,64}$/;

/**
 * @throws IdempotencyConfigurationError saying what `option` is, by its
 * shape only: an option of keys may hold one (even where it should not, as
 * a key given in place of the ring), and an error message is logged.
 */
function invalidOption(
  option: string,
  value: unknown,
  solution: string,
): never {
  throw new IdempotencyConfigurationError(
    `Invalid "${option}": ${shapeOf(value)}.`,
    solution,
  );
}

/**
 * A key's id as an error names it: as it is when it is short and of the
 * characters of an id, else by its length (a key given in its place, 44
 * characters of base64, is never printed).
 */
function idName(id: string): string {
  return id.length <= 32 && KEY_ID.test(id)
    ? JSON.stringify(id)
    : `(an id of ${id.length} characters)`;
}

/**
 * What `value` is, without its content: `a string of 44 characters`,
 * `an array of 2 items`, `an object with keys: an object of 1 entry,
 * current: a string of 2 characters`.
 */
function shapeOf(value: unknown, depth = 0): string {
  if (typeof value === 'string') {
    return `a string of ${value.length} characters`;
  }
  if (Buffer.isBuffer(value)) {
    return `${value.length} bytes`;
  }
  if (Array.isArray(value)) {
    return `an array of ${value.length} items`;
  }
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value);
    return depth > 0
      ? `an object of ${entries.length} entries`
      : `an object with ${entries.map(([name, entry]) => `${idName(name)}: ${shapeOf(entry, depth + 1)}`).join(', ') || 'no entries'}`;
  }
  return value === null ? 'null' : typeof value;
}

/**
 * Whether `value` begins as a sealed value does (`IDS1`): one that does not
 * was stored before encryption was on. One that does may still not be a
 * sealed value (see {@link sealedKeyId}).
 */
function beginsSealed(value: Buffer): boolean {
  return (
    value.length >= MAGIC.length &&
    value.subarray(0, MAGIC.length).equals(MAGIC)
  );
}

/**
 * The id of the key a stored value was sealed with, or `undefined` for a
 * value that is not a well-formed sealed value: `IDS1`, the key id's length
 * and an id of 1 to 64 characters of `[A-Za-z0-9._-]` (what follows, the
 * nonce, the tag and the ciphertext, is checked by opening it). A value
 * stored before encryption was on whose bytes
 * merely begin with `IDS1` (a text body `IDS1-batch-1`) is not one; one of
 * that whole shape cannot be told from a sealed value, and is read as one.
 */
export function sealedKeyId(sealed: Buffer | undefined): string | undefined {
  if (!sealed || !beginsSealed(sealed) || sealed.length === MAGIC.length) {
    return undefined;
  }
  const start = MAGIC.length + 1;
  const length = sealed[MAGIC.length];
  const id = sealed.subarray(start, start + length).toString('latin1');
  // The header whole (a truncated sealed value is still one: opening it
  // fails, it is never read as plaintext).
  return KEY_ID.test(id) && sealed.length >= start + length ? id : undefined;
}

/** A value that the key ring cannot open, and why. */
export class UnreadableRecordError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'UnreadableRecordError';
  }
}

/**
 * The key ring of the `encryption` option: seals with the current key
 * (AES-256-GCM, a random 96-bit nonce each time), opens with whichever key
 * of the ring a value names. Each value is bound (as associated data) to
 * the record it belongs to: its scope and key, and for a step its name.
 *
 * A sealed value: `IDS1`, the key id's length (one byte) and the key id,
 * the nonce, the tag, then the ciphertext.
 */
export class IdempotencyKeyRing implements RecordSealing {
  private readonly keys = new Map<string, Buffer>();
  readonly current: string;
  /** Whether values stored before encryption was on are read as they are. */
  private readonly readPlaintext: boolean;

  constructor(options: IdempotencyEncryptionOptions) {
    if (
      typeof options !== 'object' ||
      options === null ||
      typeof options.keys !== 'object' ||
      options.keys === null
    ) {
      invalidOption(
        'encryption',
        options,
        'Give { keys: { [id]: 32-byte key }, current: id }.',
      );
    }
    for (const [id, value] of Object.entries(options.keys)) {
      const key =
        typeof value === 'string' ? Buffer.from(value, 'base64') : value;
      if (!KEY_ID.test(id) || !Buffer.isBuffer(key) || key.length !== 32) {
        invalidOption(
          `encryption.keys.${idName(id)}`,
          Buffer.isBuffer(key) ? key : value,
          'Give each key 32 random bytes (a Buffer, or base64: `openssl rand -base64 32`), under an id of 1 to 64 characters of [A-Za-z0-9._-].',
        );
      }
      this.keys.set(id, key);
    }
    if (!this.keys.has(options.current)) {
      throw new IdempotencyConfigurationError(
        `Invalid "encryption.current": ${typeof options.current === 'string' ? idName(options.current) : shapeOf(options.current)} is not one of the ids of "encryption.keys" (${[...this.keys.keys()].map(idName).join(', ') || 'none'}).`,
        'Give the id of one of `encryption.keys`.',
      );
    }
    this.current = options.current;
    this.readPlaintext = options.readPlaintext === true;
  }

  /** Seals `plaintext` with the current key, bound to `context`. */
  seal(plaintext: Buffer, context: string): Buffer {
    const id = Buffer.from(this.current);
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv(
      'aes-256-gcm',
      this.keys.get(this.current) as Buffer,
      iv,
    );
    cipher.setAAD(Buffer.from(context));
    const ciphertext = Buffer.concat([
      cipher.update(plaintext),
      cipher.final(),
    ]);
    return Buffer.concat([
      MAGIC,
      Buffer.of(id.length),
      id,
      iv,
      cipher.getAuthTag(),
      ciphertext,
    ]);
  }

  /**
   * The id of the key `sealed` names, or `undefined` for a value that is not
   * a well-formed sealed value ({@link sealedKeyId}).
   */
  keyIdOf(sealed: Buffer): string | undefined {
    return sealedKeyId(sealed);
  }

  /**
   * Whether a stored response's body was stored before encryption was on:
   * it does not begin as a sealed value does (`IDS1`). One that begins so
   * without being a well-formed sealed value is neither this nor sealed:
   * it is read as it is only with `readPlaintext`.
   */
  isPlaintext(body: Buffer): boolean {
    return !beginsSealed(body);
  }

  /** As {@link isPlaintext}, for a step's stored result (in either form). */
  isPlaintextStep(result: unknown): boolean {
    return !Buffer.isBuffer(result) && !hasStepPrefix(result);
  }

  /**
   * Opens `sealed`, bound to `context`.
   * @throws UnreadableRecordError for a value not sealed (or not a
   * well-formed sealed value), sealed with a key not in the ring, altered,
   * or bound to another record.
   */
  open(sealed: Buffer, context: string): Buffer {
    const id = this.keyIdOf(sealed);
    if (id === undefined) {
      throw new UnreadableRecordError(notSealed(beginsSealed(sealed)));
    }
    const key = this.keys.get(id);
    if (!key) {
      throw new UnreadableRecordError(
        `it was sealed with key "${id}", not in the key ring`,
      );
    }
    const start = MAGIC.length + 1 + Buffer.byteLength(id);
    const iv = sealed.subarray(start, start + IV_BYTES);
    const tag = sealed.subarray(start + IV_BYTES, start + IV_BYTES + TAG_BYTES);
    if (tag.length !== TAG_BYTES) {
      throw new UnreadableRecordError('it is truncated');
    }
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, iv);
      decipher.setAAD(Buffer.from(context));
      decipher.setAuthTag(tag);
      return Buffer.concat([
        decipher.update(sealed.subarray(start + IV_BYTES + TAG_BYTES)),
        decipher.final(),
      ]);
    } catch {
      throw new UnreadableRecordError(
        `key "${id}" does not authenticate it: altered, or moved from another record`,
      );
    }
  }

  sealResponse(
    scope: string,
    key: string,
    response: StoredResponse,
  ): StoredResponse {
    const headers = Buffer.from(JSON.stringify(response.headers));
    const length = Buffer.alloc(4);
    length.writeUInt32BE(headers.length);
    return {
      status: response.status,
      headers: {},
      body: this.seal(
        Buffer.concat([length, headers, response.body]),
        responseContext(scope, key),
      ),
    };
  }

  openResponse(
    scope: string,
    key: string,
    response: StoredResponse,
  ): StoredResponse {
    // Not a well-formed sealed value: stored before encryption was on, even
    // if it begins with `IDS1`. A well-formed one is always opened (never
    // replayed as its ciphertext, whether its key left the ring or not).
    if (this.readPlaintext && this.keyIdOf(response.body) === undefined) {
      return response;
    }
    const plain = this.open(response.body, responseContext(scope, key));
    const length = plain.readUInt32BE(0);
    return {
      status: response.status,
      headers: JSON.parse(
        plain.subarray(4, 4 + length).toString(),
      ) as StoredResponse['headers'],
      body: plain.subarray(4 + length),
    };
  }

  /**
   * A step's result sealed: in bytes for a store that keeps them
   * (`binary`), as responses are; else as text, this prefix and the
   * sealed bytes in base64 (a third larger), for a store of JSON values.
   */
  sealStep(
    scope: string,
    key: string,
    step: string,
    result: unknown,
    binary = false,
  ): unknown {
    const json = Buffer.from(JSON.stringify(result ?? null));
    const sealed = this.seal(json, stepContext(scope, key, step));
    return binary ? sealed : STEP_PREFIX + sealed.toString('base64');
  }

  /** A step's result sealed by {@link sealStep}, in either form, opened. */
  openStep(scope: string, key: string, step: string, result: unknown): unknown {
    const sealed = sealedStepBytes(result);
    if (sealed === undefined) {
      if (this.readPlaintext && !Buffer.isBuffer(result)) {
        return result;
      }
      throw new UnreadableRecordError(notSealed(!this.isPlaintextStep(result)));
    }
    return JSON.parse(
      this.open(sealed, stepContext(scope, key, step)).toString(),
    ) as unknown;
  }

  /** The key id a step's sealed result names, or `undefined` for one not sealed. */
  stepKeyIdOf(result: unknown): string | undefined {
    const sealed = sealedStepBytes(result);
    return sealed && this.keyIdOf(sealed);
  }
}

/** Whether a step's stored result is text that begins as one sealed as text does. */
function hasStepPrefix(result: unknown): result is string {
  return typeof result === 'string' && result.startsWith(STEP_PREFIX);
}

/**
 * The sealed bytes of a step's stored result: the result itself when it is
 * bytes, the base64 after the prefix of one sealed as text, when they are a
 * well-formed sealed value ({@link sealedKeyId}); else `undefined` (a result
 * not sealed, such as a string result `idempotency-sealed:batch-1` stored
 * before encryption was on).
 */
function sealedStepBytes(result: unknown): Buffer | undefined {
  if (Buffer.isBuffer(result)) {
    return sealedKeyId(result) === undefined ? undefined : result;
  }
  if (!hasStepPrefix(result)) {
    return undefined;
  }
  const text = result.slice(STEP_PREFIX.length);
  const sealed = Buffer.from(text, 'base64');
  // Base64 as sealStep writes it: Buffer.from skips what is not base64.
  return sealed.toString('base64') === text && sealedKeyId(sealed) !== undefined
    ? sealed
    : undefined;
}

/** Why a value that is not a well-formed sealed value cannot be opened. */
function notSealed(beginsAsSealed: boolean): string {
  return beginsAsSealed
    ? 'it is not sealed: it begins as a sealed value does, but is not a well-formed one (a value stored before encryption was on is read as it is only with readPlaintext)'
    : 'it is not sealed';
}

/**
 * @internal A step's sealed result as text, whichever form it was stored
 * in: for a report that shows it sealed (bytes would be shown as a list of
 * numbers).
 */
export function sealedStepText(result: unknown): unknown {
  return Buffer.isBuffer(result)
    ? STEP_PREFIX + result.toString('base64')
    : result;
}

/**
 * @internal Whether a step's stored result is sealed (by any key): a
 * well-formed sealed value, not merely text that begins as one does.
 */
export function isSealedStep(result: unknown): boolean {
  return sealedStepBytes(result) !== undefined;
}

function responseContext(scope: string, key: string): string {
  return JSON.stringify(['response', scope, key]);
}

function stepContext(scope: string, key: string, step: string): string {
  return JSON.stringify(['step', scope, key, step]);
}
