import { Inject, Injectable } from '@nestjs/common';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from '../idempotency.tokens.js';
import type { ResolvedIdempotencyOptions } from '../idempotency.options.js';
import type { StoredResponse } from '../interfaces/idempotency-store.interface.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { IdempotencyEncryptionOptions } from '../interfaces/idempotency-privacy.interface.js';
import { IdempotencyKeyRing } from './idempotency-key-ring.js';

/**
 * What operators do with the stored records under the `encryption` option:
 * read a record as the module would (`open`), and reseal records with the
 * current key after a rotation (`reencrypt`, `reencryptStep`), given the
 * records as a store holds them (scope, key and stored value).
 */
@Injectable()
export class IdempotencyPrivacy {
  constructor(
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: Pick<ResolvedIdempotencyOptions, 'sealing'>,
  ) {}

  /**
   * The service on a key ring of its own, outside a module: for a script or
   * the command line that reseals or reads records.
   * @throws IdempotencyConfigurationError for an invalid key ring.
   */
  static withKeys(
    encryption: IdempotencyEncryptionOptions,
  ): IdempotencyPrivacy {
    return new IdempotencyPrivacy({
      sealing: new IdempotencyKeyRing(encryption),
    });
  }

  /** Whether stored responses and step results are encrypted (`encryption`). */
  get encrypted(): boolean {
    return this.options.sealing !== undefined;
  }

  /**
   * A stored response (status, headers, body) as the store holds it,
   * opened: what a duplicate would get.
   * @throws UnreadableRecordError when it cannot be opened.
   */
  open(scope: string, key: string, stored: StoredResponse): StoredResponse {
    return this.ring().openResponse(scope, key, stored);
  }

  /**
   * A step's stored result, opened: what `step()` returns to a retry.
   * @throws UnreadableRecordError when it cannot be opened.
   */
  openStep(scope: string, key: string, step: string, result: unknown): unknown {
    return this.ring().openStep(scope, key, step, result);
  }

  /**
   * For key rotation: the stored response of the record (`scope`, `key`)
   * sealed again with the current key, or `undefined` when it already is
   * (nothing to write). It opens with any key of the ring, the current one
   * included (one altered cannot be opened); a response stored before
   * `encryption` was turned on is sealed as it is, and so is one whose body
   * begins as a sealed value does (`IDS1`) without being a well-formed one,
   * with `readPlaintext` only (without it, it cannot be told from a sealed
   * one damaged, and is refused as the module's duplicates refuse it).
   * @throws UnreadableRecordError when it cannot be opened.
   */
  reencrypt(
    scope: string,
    key: string,
    stored: StoredResponse,
  ): StoredResponse | undefined {
    const ring = this.ring();
    const id = ring.keyIdOf(stored.body);
    const plain = ring.isPlaintext(stored.body)
      ? stored
      : ring.openResponse(scope, key, stored);
    // Opened with the current key too: one altered or moved onto another
    // record cannot be opened, which its caller must be told of.
    return id === ring.current
      ? undefined
      : ring.sealResponse(scope, key, plain);
  }

  /**
   * For key rotation: a step's stored result sealed again with the current
   * key, or `undefined` when it already is. As {@link reencrypt}.
   * @throws UnreadableRecordError when it cannot be opened.
   */
  reencryptStep(
    scope: string,
    key: string,
    step: string,
    result: unknown,
  ): unknown {
    const ring = this.ring();
    const id = ring.stepKeyIdOf(result);
    const plain = ring.isPlaintextStep(result)
      ? result
      : ring.openStep(scope, key, step, result);
    // Sealed again in the form it was stored in: bytes only where the
    // store kept bytes.
    return id === ring.current
      ? undefined
      : ring.sealStep(scope, key, step, plain, Buffer.isBuffer(result));
  }

  private ring(): IdempotencyKeyRing {
    const { sealing } = this.options;
    if (!sealing) {
      throw new IdempotencyConfigurationError(
        'Stored records are not encrypted: the module has no `encryption` option.',
        'Give IdempotencyModule `encryption: { keys, current }`.',
      );
    }
    return sealing;
  }
}
