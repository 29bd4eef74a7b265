import { randomUUID } from 'node:crypto';
import type {
  ClaimOutcome,
  ClaimRequest,
  Renewal,
} from '../../interfaces/idempotency-store.interface.js';
import {
  CLAIMABLE_CONDITION,
  GENERATION_LIVE_CONDITION,
  IN_PROGRESS,
  OWNED_CONDITION,
  OWNED_NAMES,
  UNBOUND_CONDITION,
  UNMARKED_CONDITION,
  boundElsewhere,
  claimable,
  generationLive,
  inProgress,
  isWaiting,
  markedBound,
  ownedBy,
} from './dynamodb-conditions.js';
import {
  type Item,
  itemKey,
  num,
  numberOf,
  recordOf,
  str,
  stringOf,
} from './dynamodb-item.js';
import { DynamoDbLease } from './dynamodb-lease.js';
import type { DynamoDbRecords } from './dynamodb-records.js';
import { isConditionFailure, loadDynamoDbSdk } from './dynamodb-sdk.js';

/** A claim that keeps losing races with releases gives up after this. */
const CLAIM_ATTEMPTS = 5;

/**
 * @internal Claims a key with one conditional UpdateItem: a free key, a
 * finished record past its expiry, or a claim past its lease (keeping its
 * steps), unless the key is bound to another request (see
 * {@link boundElsewhere}). A refused claim reads the item that holds the
 * key in the same round trip (`ReturnValuesOnConditionCheckFailure`), and
 * tries again when that item was released or expired meanwhile.
 *
 * The key's generation (attribute `generation`) is kept by a claim that
 * finds one still live (see {@link generationLive}), and started (a random
 * UUID) where the item has none: `if_not_exists` in the claim's own write,
 * returned with `UPDATED_NEW`. A claim past its expiry still carries its
 * own, which `if_not_exists` would keep: the write's condition refuses that
 * item, and the next attempt writes a new generation over it.
 *
 * The mark of a key bound to its request (attribute `bound`, see
 * {@link markedBound}) goes with the generation: kept by the same
 * `if_not_exists` (a takeover, a claim after a release, both of the same
 * request, which the condition alone lets through), written false where
 * the item has none, and reset with a new generation. The claim's handle
 * ({@link DynamoDbLease}) remembers it.
 */
export async function claimKey(
  records: DynamoDbRecords,
  request: ClaimRequest,
): Promise<ClaimOutcome> {
  const sdk = await loadDynamoDbSdk();
  let replaceGeneration = false;
  for (let attempt = 1; ; attempt += 1) {
    const now = Date.now();
    let existing: Item | undefined;
    try {
      const { Attributes: written } = await records.client.send(
        new sdk.UpdateItemCommand({
          TableName: records.tableName,
          Key: itemKey(request),
          UpdateExpression:
            'SET #scope = :scope, #key = :key, fingerprint = :fingerprint,' +
            ' #method = :method, #path = :path, #status = :inProgress,' +
            ' #owner = :owner, lease_expires_at = :lease, claimed_at = :now,' +
            ' expires_at = :expires, waiting = :false,' +
            ' steps = if_not_exists(steps, :noSteps),' +
            (replaceGeneration
              ? ' generation = :generation, bound = :false'
              : ' generation = if_not_exists(generation, :generation),' +
                ' bound = if_not_exists(bound, :false)') +
            ' REMOVE response_status, response_headers, response_body, #ttl',
          ConditionExpression:
            `${CLAIMABLE_CONDITION} AND ${UNBOUND_CONDITION} AND ` +
            (replaceGeneration
              ? `NOT ${GENERATION_LIVE_CONDITION}`
              : `((attribute_not_exists(generation) AND ${UNMARKED_CONDITION}) OR ${GENERATION_LIVE_CONDITION})`),
          ExpressionAttributeNames: {
            ...OWNED_NAMES,
            '#scope': 'scope',
            '#key': 'key',
            '#method': 'method',
            '#path': 'path',
            '#ttl': 'ttl',
          },
          ExpressionAttributeValues: {
            ':scope': str(request.scope),
            ':key': str(request.key),
            ':fingerprint': str(request.fingerprint),
            ':method': str(request.method),
            ':path': str(request.path),
            ':inProgress': IN_PROGRESS,
            ':owner': str(request.owner),
            ':lease': num(now + request.leaseMs),
            ':expires': num(now + Math.max(request.ttlMs, request.leaseMs)),
            ':false': { BOOL: false },
            ':noSteps': { M: {} },
            ':generation': str(randomUUID()),
            ':now': num(now),
          },
          ReturnValues: 'UPDATED_NEW',
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      return claimed(request, written);
    } catch (error) {
      if (!isConditionFailure(error)) {
        throw error;
      }
      existing = error.Item as Item | undefined;
    }
    // A server that does not return the item with the refusal: read it.
    existing ??= await records.read(request);
    if (existing && ownedBy(existing, request.owner)) {
      // This attempt's own claim: the SDK sent the request again after a
      // connection reset lost the reply of the write that took the key.
      // The owner token is one attempt's, never shared.
      return claimed(request, existing);
    }
    const later = Date.now();
    if (
      (!existing ||
        (claimable(existing, later) &&
          !boundElsewhere(existing, request.fingerprint, later))) &&
      attempt < CLAIM_ATTEMPTS
    ) {
      // Released or expired between the two requests, or free with an
      // expired generation: claim again.
      replaceGeneration =
        existing !== undefined &&
        (existing.generation !== undefined || markedBound(existing)) &&
        !generationLive(existing, later);
      continue;
    }
    return refusal(records, request, existing);
  }
}

/**
 * The outcome of a granted claim, from the generation and the mark of a
 * bound key that its write left.
 */
function claimed(request: ClaimRequest, item: Item | undefined): ClaimOutcome {
  const generation = item ? stringOf(item.generation) : undefined;
  if (item === undefined || generation === undefined) {
    // Every claim writes one: an item without it was not this claim's.
    throw new Error('The DynamoDB claim returned no generation of its key');
  }
  return {
    state: 'claimed',
    generation,
    lease: new DynamoDbLease(request, markedBound(item)),
  };
}

/**
 * The outcome of a refused claim, from the item that holds the key. A
 * duplicate that waits marks the claim `waiting` with a second, conditional
 * write.
 */
async function refusal(
  records: DynamoDbRecords,
  request: ClaimRequest,
  item: Item | undefined,
): Promise<ClaimOutcome> {
  if (item && !inProgress(item)) {
    return { state: 'finished', record: recordOf(item) };
  }
  const fingerprint = item ? stringOf(item.fingerprint) : undefined;
  const owner = item ? stringOf(item.owner) : undefined;
  if (
    request.wait &&
    owner !== undefined &&
    fingerprint === request.fingerprint &&
    !(item && isWaiting(item))
  ) {
    // The owner is to tell its completion to the duplicate that waits.
    const sdk = await loadDynamoDbSdk();
    await records.client
      .send(
        new sdk.UpdateItemCommand({
          TableName: records.tableName,
          Key: itemKey(request),
          UpdateExpression: 'SET waiting = :true',
          ConditionExpression: OWNED_CONDITION,
          ExpressionAttributeNames: OWNED_NAMES,
          ExpressionAttributeValues: {
            ':true': { BOOL: true },
            ':owner': str(owner),
            ':inProgress': IN_PROGRESS,
          },
        }),
      )
      .catch((error: unknown) => {
        // Finished or taken over meanwhile: nobody to tell.
        if (!isConditionFailure(error)) {
          throw error;
        }
      });
  }
  const leaseExpiresAt = item ? numberOf(item.lease_expires_at) : undefined;
  return {
    state: 'in_progress',
    fingerprint,
    leaseMs: Math.max(0, (leaseExpiresAt ?? 0) - Date.now()),
  };
}

/**
 * @internal Renews leases with one conditional UpdateItem per lease, sent
 * together; returns the owners that still hold their claim.
 */
export async function renewLeases(
  records: DynamoDbRecords,
  leases: readonly Renewal[],
): Promise<ReadonlySet<string>> {
  const sdk = await loadDynamoDbSdk();
  const held = await Promise.all(
    leases.map(async (lease) => {
      const written = await records.fenced(
        new sdk.UpdateItemCommand({
          TableName: records.tableName,
          Key: itemKey(lease),
          UpdateExpression: 'SET lease_expires_at = :lease',
          ConditionExpression: OWNED_CONDITION,
          ExpressionAttributeNames: OWNED_NAMES,
          ExpressionAttributeValues: {
            ':lease': num(Date.now() + lease.durationMs),
            ':owner': str(lease.owner),
            ':inProgress': IN_PROGRESS,
          },
        }),
      );
      return written ? lease.owner : undefined;
    }),
  );
  return new Set(held.filter((owner) => owner !== undefined));
}
