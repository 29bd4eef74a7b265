import { hash } from 'node:crypto';
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import type {
  RecordStatus,
  StoredRecord,
} from '../../interfaces/idempotency-store.interface.js';

/** An item as DynamoDB sends and takes it. */
export type Item = Record<string, AttributeValue>;

/** DynamoDB's limit on the size of one item: 400 KB. */
export const DYNAMODB_ITEM_LIMIT_BYTES = 400 * 1024;

/** Room kept in an item for the attributes that its size checks leave out. */
export const RECORD_OVERHEAD_BYTES = 2048;

/**
 * The partition key of a (scope, key) record: the SHA-256 digest of the
 * scope's length, the scope and the key, as UTF-16 code units (so that two
 * different strings, lone surrogates included, never share a record).
 * Unambiguous for any characters (no separator to escape or forge), and of a
 * fixed length whatever the key's (DynamoDB limits a partition key to 2048
 * bytes); the scope and the key are kept as attributes of the item.
 */
export function partitionKey(scope: string, key: string): string {
  return hash(
    'sha256',
    Buffer.concat([
      Buffer.from(`${scope.length}:`),
      Buffer.from(scope, 'utf16le'),
      Buffer.from(key, 'utf16le'),
    ]),
    'base64url',
  );
}

/** A number attribute. */
export const num = (value: number): AttributeValue => ({ N: String(value) });
/** A string attribute. */
export const str = (value: string): AttributeValue => ({ S: value });

/** The primary key of the item of a (scope, key) record. */
export function itemKey(lease: { scope: string; key: string }): Item {
  return { pk: str(partitionKey(lease.scope, lease.key)) };
}

/** A number attribute of an item, or undefined. */
export function numberOf(
  value: AttributeValue | undefined,
): number | undefined {
  return value && 'N' in value && value.N !== undefined
    ? Number(value.N)
    : undefined;
}

/** A string attribute of an item, or undefined. */
export function stringOf(
  value: AttributeValue | undefined,
): string | undefined {
  return value && 'S' in value ? value.S : undefined;
}

/** A recovery point as stored in an item's `steps` map. */
export interface StoredStep {
  /**
   * The result (attribute `r`): its JSON, or its bytes for a result saved
   * in bytes (sealed by the `encryption` option).
   */
  readonly result: string | Buffer;
  /** When it expires, epoch ms (attribute `e`). */
  readonly expiresAt: number;
  /**
   * Fingerprint of the request that saved it (attribute `f`); undefined for
   * a step saved by a version of the store before steps carried it.
   */
  readonly fingerprint: string | undefined;
}

/** The recovery points of an item: step name → stored result and expiry. */
export function stepsOf(item: Item): Map<string, StoredStep> {
  const steps = new Map<string, StoredStep>();
  const map = item.steps && 'M' in item.steps ? item.steps.M : undefined;
  for (const [name, value] of Object.entries(map ?? {})) {
    const step = 'M' in value ? value.M : undefined;
    const result =
      step?.r && 'B' in step.r && step.r.B !== undefined
        ? Buffer.from(step.r.B)
        : stringOf(step?.r);
    const expiresAt = numberOf(step?.e);
    if (result !== undefined && expiresAt !== undefined) {
      steps.set(name, { result, expiresAt, fingerprint: stringOf(step?.f) });
    }
  }
  return steps;
}

/**
 * @internal A step's result as it was saved: its bytes (a sealed result,
 * kept binary), else its JSON read back.
 */
export function resultOf(saved: Pick<StoredStep, 'result'>): unknown {
  return typeof saved.result === 'string'
    ? (JSON.parse(saved.result) as unknown)
    : saved.result;
}

/** The finished record of an item. */
export function recordOf(item: Item): StoredRecord {
  const headers = stringOf(item.response_headers);
  const body =
    item.response_body && 'B' in item.response_body
      ? item.response_body.B
      : undefined;
  return {
    status: stringOf(item.status) as RecordStatus,
    fingerprint: stringOf(item.fingerprint) ?? '',
    response: {
      status: numberOf(item.response_status) ?? 0,
      headers: headers
        ? (JSON.parse(headers) as Record<string, string | string[]>)
        : {},
      body: body ? Buffer.from(body) : Buffer.alloc(0),
    },
  };
}

/**
 * An upper bound of the size DynamoDB counts for attribute values: UTF-8
 * bytes of strings, bytes of binaries, at most 21 bytes of a number, plus
 * the attribute names.
 */
export function sizeOf(item: Item): number {
  let size = 0;
  for (const [name, value] of Object.entries(item)) {
    size += Buffer.byteLength(name) + valueSize(value);
  }
  return size;
}

function valueSize(value: AttributeValue): number {
  if ('S' in value && value.S !== undefined) {
    return Buffer.byteLength(value.S);
  }
  if ('B' in value && value.B !== undefined) {
    return value.B.byteLength;
  }
  if ('M' in value && value.M !== undefined) {
    return 3 + sizeOf(value.M) + Object.keys(value.M).length;
  }
  return 21;
}
