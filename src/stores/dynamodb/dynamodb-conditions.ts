import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import {
  type Item,
  type StoredStep,
  numberOf,
  str,
  stringOf,
} from './dynamodb-item.js';

/*
 * The states of a record item, each both as a predicate on an item read
 * and as the condition expression that fences a write on it: the two are
 * kept side by side so that they never disagree.
 */

/** The `status` of a claim in progress, as the attribute value `:inProgress`. */
export const IN_PROGRESS: AttributeValue = str('in_progress');

/** Whether a record item is in progress (claimed, or released). */
export const inProgress = (item: Item): boolean =>
  stringOf(item.status) === 'in_progress';

/** The attribute names that {@link OWNED_CONDITION} uses. */
export const OWNED_NAMES: Readonly<Record<string, string>> = {
  '#status': 'status',
  '#owner': 'owner',
};

/**
 * The condition of a claim in progress held by `:owner` (`:inProgress`:
 * {@link IN_PROGRESS}; names {@link OWNED_NAMES}): the fence of every write
 * of an attempt.
 */
export const OWNED_CONDITION = '#owner = :owner AND #status = :inProgress';

/**
 * Whether an item is a claim in progress of `owner` (and of the request of
 * `fingerprint`, when given).
 */
export function ownedBy(
  item: Item,
  owner: string,
  fingerprint?: string,
): boolean {
  return (
    inProgress(item) &&
    stringOf(item.owner) === owner &&
    (fingerprint === undefined || stringOf(item.fingerprint) === fingerprint)
  );
}

/** Whether an item is a record that the attempt `owner` finished. */
export function finishedBy(item: Item, owner: string): boolean {
  return !inProgress(item) && stringOf(item.owner) === owner;
}

/** Whether a duplicate waits for the claim of an item. */
export function isWaiting(item: Item): boolean {
  return Boolean(item.waiting && 'BOOL' in item.waiting && item.waiting.BOOL);
}

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
 * The condition of {@link claimable}, as a condition expression (`:now`,
 * `:inProgress` and the name `#status`).
 */
export const CLAIMABLE_CONDITION =
  '(attribute_not_exists(pk) OR (#status <> :inProgress AND expires_at <= :now)' +
  ' OR (#status = :inProgress AND (attribute_not_exists(lease_expires_at) OR lease_expires_at <= :now)))';

/**
 * Whether an item carries the mark of a key bound to its request (attribute
 * `bound`, true): written by `bind()` (a step is about to begin) or by a
 * release that binds it (its attempt derived keys), kept by every claim of
 * the key while it lives, and cleared by the completion. The binding lasts
 * as long as the key: until its `expires_at`, which each claim pushes on.
 */
export function markedBound(item: Item): boolean {
  return Boolean(item.bound && 'BOOL' in item.bound && item.bound.BOOL);
}

/**
 * Whether the key of an item is bound at `now` to a request other than the
 * one of `fingerprint` (the item's `fingerprint` is the request it is bound
 * to), whatever became of the claim that bound it (released, lease run out):
 * marked {@link markedBound} while the key lives, or by a committed step
 * that has not expired (`bound_until`, the latest expiry of its steps).
 * Completion clears both.
 */
export function boundElsewhere(
  item: Item,
  fingerprint: string,
  now: number,
): boolean {
  const boundUntil = numberOf(item.bound_until) ?? 0;
  const expiresAt = numberOf(item.expires_at) ?? 0;
  return (
    (boundUntil > now || (markedBound(item) && expiresAt > now)) &&
    stringOf(item.fingerprint) !== fingerprint
  );
}

/**
 * The condition of an item not marked {@link markedBound} (`:false`: the
 * attribute value false).
 */
export const UNMARKED_CONDITION =
  '(attribute_not_exists(bound) OR bound = :false)';

/**
 * The condition of a key not {@link boundElsewhere} to another request than
 * `:fingerprint`, as a condition expression (`:now` as in
 * {@link CLAIMABLE_CONDITION}, `:false` as in {@link UNMARKED_CONDITION}).
 */
export const UNBOUND_CONDITION =
  '(fingerprint = :fingerprint OR ((attribute_not_exists(bound_until) OR bound_until <= :now)' +
  ` AND (${UNMARKED_CONDITION} OR expires_at <= :now)))`;

/**
 * Whether the generation an item carries is still its key's at `now`: the
 * item is a claim (held, released or past its lease) whose key has not
 * expired, or whose live steps keep it for their request (`bound_until`),
 * as they keep the request's derived keys in use. Past that, a claim
 * starts a new generation. A finished record carries none: its key is
 * claimed again only once expired.
 */
export function generationLive(item: Item, now: number): boolean {
  return (
    inProgress(item) &&
    ((numberOf(item.expires_at) ?? 0) > now ||
      (numberOf(item.bound_until) ?? 0) > now)
  );
}

/**
 * The condition of {@link generationLive}, as a condition expression (`:now`
 * and `:inProgress` as in {@link CLAIMABLE_CONDITION}).
 */
export const GENERATION_LIVE_CONDITION =
  '(#status = :inProgress AND (expires_at > :now OR bound_until > :now))';

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
