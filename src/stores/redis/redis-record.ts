import { isUtf8 } from 'node:buffer';
import type {
  RecordStatus,
  StoredRecord,
} from '../../interfaces/idempotency-store.interface.js';

/**
 * @internal The value of a record in Redis: one string, so that a free key
 * is claimed by a plain `SET NX PX GET` (no script), which returns what
 * holds the key otherwise, in the same round trip.
 *
 * In progress (its key expires with its lease, `PX`):
 *
 *     i<w> <owner>\n<fingerprint JSON>\n<request JSON>
 *
 * where `<w>` is `w` once a duplicate waits for it, else `-`. Once the
 * claim saved a step (a recovery point), or was bound to its request
 * (`bind()`, a release that binds), its key is bound to its request (see
 * `StepLease`, `IdempotencyStore.bind`), and the value becomes
 *
 *     b<w> <lease end> <binding end> <owner>\n<fingerprint JSON>\n<request JSON>
 *
 * (ms since the epoch, both by the clock of Redis, `TIME` in the scripts;
 * the binding ends with the step, or with the key's generation, whichever
 * is later): the lease is in the value, and its key expires at the later
 * of the two, so that it outlives its lease while the binding lasts. Released (or past
 * its lease), it stays, ownerless (`<lease end>` 0 and no owner once
 * released), and only a claim of the same fingerprint takes it over (and
 * resumes after its steps) until the binding ends; a claim of another one
 * is refused with its fingerprint. A bound claim never goes through the
 * plain `SET NX` (its key exists): it is the claim script's. A store of the
 * previous version reads a bound value as an unreadable record (it has not
 * four newlines): it answers 503 for the key, and its scripts are fenced
 * out (the value does not begin with `i`), rather than taking it over.
 *
 * Finished (its key expires with its time to live):
 *
 *     <s> <expiry> <status> <completed>\n<fingerprint JSON>\n<request JSON>\n<headers JSON>\n<body>
 *
 * where `<s>` is `c` (completed), `f` (failed) or `n` (not replayable), and
 * `<expiry>` when it expires and `<completed>` when it was written (ms since
 * the epoch, by the clock of the instance that completed it). JSON never
 * holds a raw newline, so the body is everything after the fourth; it is
 * bytes, not text.
 *
 * The request's line is `[method, path, scope, key, claimed]` (`claimed`:
 * when the claim was written, ms since the epoch by the claiming
 * instance's clock; a finished record has none, however it was written): the key names hold only a digest of scope and key, so the
 * operator's listing and forgetting of a scope read them here. Records of
 * the previous versions hold `[method, path]` alone, and their heads no
 * `<completed>`: the readers of both ignore what follows.
 */
export type RedisRecord =
  | {
      readonly state: 'in_progress';
      /** Its owner; empty for a bound claim that was released. */
      readonly owner: string;
      /** Whether a duplicate waits for it. */
      readonly waiting: boolean;
      readonly fingerprint: string;
      /**
       * Whether it is bound to its request by a step (its lease is in its
       * value: only the claim script tells whether it still holds).
       */
      readonly bound: boolean;
    }
  | {
      readonly state: 'finished';
      /** When it expires (ms since the epoch, the completing instance's clock). */
      readonly expiresAt: number;
      readonly record: StoredRecord;
    };

const NEWLINE = 0x0a;
const IN_PROGRESS = 0x69; // 'i'
const BOUND = 0x62; // 'b'
const WAITING = 0x77; // 'w'

const STATUS_CODES: Readonly<Record<RecordStatus, string>> = {
  completed: 'c',
  failed: 'f',
  not_replayable: 'n',
};
const STATUSES: Readonly<Record<string, RecordStatus>> = {
  c: 'completed',
  f: 'failed',
  n: 'not_replayable',
};

/** @internal The letter of a finished record's status. */
export function statusLetter(status: RecordStatus): string {
  return STATUS_CODES[status];
}

/** @internal The fingerprint as the record holds it (its second line). */
export function fingerprintLine(fingerprint: string): string {
  return JSON.stringify(fingerprint);
}

/**
 * @internal What a record says of its request, after its first line
 * (without scope and key: the lines of the previous versions).
 */
export interface RecordRequest {
  readonly scope?: string;
  readonly key?: string;
  readonly fingerprint: string;
  readonly method: string;
  readonly path: string;
}

/**
 * @internal The lines a claim's value and its finished record share, after
 * their first, open: a newline, the fingerprint JSON, a newline, and the
 * request's JSON without its closing bracket, after which a claim adds its
 * time (see {@link claimValue}) and a finished record nothing (see
 * {@link finishedValueOf}). Built once a claim: its completion reuses it.
 */
export function requestLines(request: RecordRequest): string {
  const { fingerprint, method, path, scope, key } = request;
  const line = JSON.stringify(
    scope === undefined || key === undefined
      ? [method, path]
      : [method, path, scope, key],
  );
  return `\n${fingerprintLine(fingerprint)}\n${line.slice(0, -1)}`;
}

/**
 * @internal The value of a claim that nobody waits for yet, from its
 * request's {@link requestLines}.
 */
export function claimValue(
  owner: string,
  lines: string,
  claimed: number,
): string {
  return `i- ${owner}${lines},${claimed}]`;
}

/** @internal The value of a claim that nobody waits for yet. */
export function inProgressValue(
  owner: string,
  request: Required<RecordRequest>,
  claimed: number,
): string {
  return claimValue(owner, requestLines(request), claimed);
}

/**
 * @internal The value of a finished record: `head` (status letter, expiry,
 * response status, completion time), the request's lines, the headers JSON and the body. A
 * string when the body is UTF-8 (the same bytes reach Redis): ioredis then
 * writes the command as one string, where a Buffer argument makes it build
 * the command from buffers.
 */
export function finishedValue(
  head: string,
  request: RecordRequest,
  headers: string,
  body: Buffer | undefined,
): Buffer | string {
  return finishedValueOf(head, requestLines(request), headers, body);
}

/**
 * @internal {@link finishedValue} from the request's {@link requestLines}.
 */
export function finishedValueOf(
  head: string,
  lines: string,
  headers: string,
  body: Buffer | undefined,
): Buffer | string {
  const text = `${head}${lines}]\n${headers}\n`;
  if (!body || body.length === 0) {
    return text;
  }
  return isUtf8(body)
    ? text + body.toString('utf8')
    : Buffer.concat([Buffer.from(text), body]);
}

function line(value: Buffer, from: number): number {
  const end = value.indexOf(NEWLINE, from);
  if (end < 0) {
    throw new Error('Unreadable idempotency record in Redis');
  }
  return end;
}

/** @internal Reads a record's value. */
export function decodeRecord(value: Buffer): RedisRecord {
  const first = line(value, 0);
  const second = line(value, first + 1);
  const fingerprint = JSON.parse(
    value.toString('utf8', first + 1, second),
  ) as string;
  if (value[0] === IN_PROGRESS) {
    return {
      state: 'in_progress',
      owner: value.toString('utf8', 3, first),
      waiting: value[1] === WAITING,
      fingerprint,
      bound: false,
    };
  }
  if (value[0] === BOUND) {
    // b<w> <lease end> <binding end> <owner>
    const lease = value.indexOf(0x20, 3);
    const owner = lease < 0 ? -1 : value.indexOf(0x20, lease + 1);
    if (owner < 0 || owner > first) {
      throw new Error('Unreadable idempotency record in Redis');
    }
    return {
      state: 'in_progress',
      owner: value.toString('utf8', owner + 1, first),
      waiting: value[1] === WAITING,
      fingerprint,
      bound: true,
    };
  }
  const [status, expiresAt, code] = value
    .toString('latin1', 0, first)
    .split(' ');
  const third = line(value, second + 1);
  const fourth = line(value, third + 1);
  return {
    state: 'finished',
    expiresAt: Number(expiresAt),
    record: {
      status: STATUSES[status],
      fingerprint,
      response: {
        status: Number(code),
        headers:
          fourth > third + 1
            ? (JSON.parse(value.toString('utf8', third + 1, fourth)) as Record<
                string,
                string | string[]
              >)
            : {},
        body: value.subarray(fourth + 1),
      },
    },
  };
}
