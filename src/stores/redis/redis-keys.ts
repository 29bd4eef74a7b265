import { hash } from 'node:crypto';

/** Length of a record's id: a SHA-256 digest in base64url. */
export const RECORD_ID_LENGTH = 43;

/**
 * @internal The names of a store's keys. Every key of one (scope, key) sits
 * in one hash slot: its hash tag is the record's id, a digest of scope and
 * key, so that user bytes never reach the braces (nor split a key name), two
 * distinct pairs never share a record, and a script touching the record and
 * its steps is valid on a Redis Cluster.
 */
export class RedisKeys {
  /** The index of steps by expiry (member: `<id>:<step>`), for collection. */
  readonly stepsIndex: string;
  /** The pub/sub channel of completions that duplicates wait for. */
  readonly channel: string;

  constructor(readonly prefix: string) {
    this.stepsIndex = `${prefix}steps-due`;
    this.channel = `${prefix}completions`;
  }

  /** The identity of (scope, key) as stored: JSON, lossless for any string. */
  static identity(scope: string, key: string): string {
    return JSON.stringify([scope, key]);
  }

  /** The record's id: the digest of its identity. */
  static id(scope: string, key: string): string {
    return hash('sha256', RedisKeys.identity(scope, key), 'base64url');
  }

  /** The record (a string: see redis-record.ts). */
  record(id: string): string {
    return `${this.prefix}{${id}}:record`;
  }

  /** The hash of the record's steps (field `s:<step>`, plus `id`). */
  steps(id: string): string {
    return `${this.prefix}{${id}}:steps`;
  }

  /**
   * Held by the collector that reports the key's expired steps (a string,
   * its token, with a lease): another one collecting at once skips them,
   * so that each is reported once.
   */
  collecting(id: string): string {
    return `${this.prefix}{${id}}:collecting`;
  }

  /**
   * The key's generation (a string): kept beside the record, so that it
   * outlives the leases of the key's claims (see redis.scripts.ts).
   */
  generation(id: string): string {
    return `${this.prefix}{${id}}:generation`;
  }

  /**
   * The count of the key's failed attempts (a string), beside the record,
   * which a release deletes; it expires on its own.
   */
  failures(id: string): string {
    return `${this.prefix}{${id}}:failures`;
  }

  /**
   * The identity (JSON of scope and key) of a key with a count of failures,
   * kept as long as the count: the count's name holds only a digest, and a
   * forget of a scope finds the counts of its keys by this.
   */
  identity(id: string): string {
    return `${this.prefix}{${id}}:identity`;
  }
}
