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
  /** The result, as JSON (attribute `r`). */
  readonly result: string;
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
    const result = stringOf(step?.r);
    const expiresAt = numberOf(step?.e);
    if (result !== undefined && expiresAt !== undefined) {
      steps.set(name, { result, expiresAt, fingerprint: stringOf(step?.f) });
    }
  }
  return steps;
}

/**
 * Whether a stored step is the request's (fingerprint) and alive at `now`.
 * A step without a fingerprint was saved by a version of the store before
 * steps carried one (and keys were bound to them): it stays readable by any
 * request of its key, as it was then, until it expires or the key completes.
 */
export function stepReadable(
  step: StoredStep,
  fingerprint: string,
  now: number,
): boolean {
  return (
    step.expiresAt > now &&
    (step.fingerprint === undefined || step.fingerprint === fingerprint)
  );
}

/**
 * Whether the key of an item is bound at `now` to a request other than the
 * one of `fingerprint`: a step of the request that claimed it (the item's
 * `fingerprint`) committed and has not expired (`bound_until`, the latest
 * expiry of its steps), whatever became of the claim that saved it
 * (released, lease run out). Completion clears the binding with the steps.
 */
export function boundElsewhere(
  item: Item,
  fingerprint: string,
  now: number,
): boolean {
  const boundUntil = numberOf(item.bound_until);
  return (
    boundUntil !== undefined &&
    boundUntil > now &&
    stringOf(item.fingerprint) !== fingerprint
  );
}

/**
 * The condition of a key not {@link boundElsewhere} to another request than
 * `:fingerprint`, as a condition expression (`:now` as in
 * {@link CLAIMABLE_CONDITION}).
 */
export const UNBOUND_CONDITION =
  '(attribute_not_exists(bound_until) OR bound_until <= :now OR fingerprint = :fingerprint)';

/** Whether a record item is in progress (claimed, or released). */
export const inProgress = (item: Item): boolean =>
  stringOf(item.status) === 'in_progress';

/**
 * Whether an item is free to claim at `now`, from its own timestamps (never
 * from DynamoDB's TTL, which deletes expired items up to days late): a
 * finished record whose time to live ran out, or a claim whose lease did.
 */
export function claimable(item: Item, now: number): boolean {
  const deadline = inProgress(item)
    ? numberOf(item.lease_expires_at)
    : numberOf(item.expires_at);
  return deadline === undefined || deadline <= now;
}

/**
 * Whether the collector may delete a record item at `now`: a finished record
 * past its time to live, or a claim past both its lease and its time to live
 * and bound to its request no more (see {@link boundElsewhere}).
 */
export function collectable(item: Item, now: number): boolean {
  const expiresAt = numberOf(item.expires_at) ?? 0;
  const boundUntil = numberOf(item.bound_until) ?? 0;
  return expiresAt < now && boundUntil <= now && claimable(item, now);
}

/** The condition of {@link claimable}, as a condition expression. */
export const CLAIMABLE_CONDITION =
  '(attribute_not_exists(pk) OR (#status <> :inProgress AND expires_at <= :now)' +
  ' OR (#status = :inProgress AND (attribute_not_exists(lease_expires_at) OR lease_expires_at <= :now)))';

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
