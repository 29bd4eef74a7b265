import type { Cluster, Redis } from 'ioredis';
import type {
  ForgottenBatch,
  RecordInspection,
  RecordPage,
  RecordQuery,
  RecordSummary,
  ResetOutcome,
} from '../../interfaces/idempotency-store.interface.js';
import { IdempotencyAdminInputError } from '../../exceptions/idempotency-admin.errors.js';
import { ForgetPasses } from '../forget-passes.js';
import { decodeCursor, encodeCursor } from '../record-cursor.js';
import {
  runScript,
  runScriptBuffer,
  type RedisClient,
} from './redis-client.js';
import { RECORD_ID_LENGTH, RedisKeys } from './redis-keys.js';
import { parseStep } from './redis-step-value.js';
import {
  FORGET_RECORD,
  PEEK_RECORD,
  READ_RECORD,
  RESET_RECORD,
} from './redis-admin.scripts.js';

const STATUSES: Readonly<Record<string, RecordSummary['status']>> = {
  c: 'completed',
  f: 'failed',
  n: 'not_replayable',
};

/** Keys per SCAN call. */
const SCAN_COUNT = 1000;
/** A record's id (see `RedisKeys.id`): base64url of a sha256. */
const RECORD_ID = new RegExp(`^[A-Za-z0-9_-]{${RECORD_ID_LENGTH}}$`);

/** READ_RECORD's reply. */
type ReadReply = [Buffer] | [Buffer, number, Buffer, number, number, Buffer[]];

/**
 * A record's summary, and, once finished, its response's status and the
 * rest of its value (headers, body).
 */
interface ReadRecord {
  readonly summary: RecordSummary;
  readonly code?: number;
  readonly rest: Buffer;
}

/** The request line's `[method, path, scope?, key?, claimed?]`. */
type RequestLine = [string, string, string?, string?, number?];

function lineEnd(value: Buffer, from: number): number {
  const end = value.indexOf(0x0a, from);
  return end < 0 ? value.length : end;
}

/** A date `ms` from now by this instance's clock. */
const fromNow = (ms: number) => new Date(Date.now() + ms);

/**
 * Reads a record's value (see redis-record.ts) for the operator; `scope`
 * and `key` when its request line has none (a record of a previous
 * version), else undefined for such a record.
 */
function readReply(
  reply: ReadReply,
  identity?: readonly [string, string],
): ReadRecord | undefined {
  if (reply.length === 1) {
    return undefined;
  }
  const [value, recordTtl, generation, generationTtl, now] = reply;
  const first = lineEnd(value, 0);
  const second = lineEnd(value, first + 1);
  const third = lineEnd(value, second + 1);
  const fingerprint = JSON.parse(
    value.toString('utf8', first + 1, second),
  ) as string;
  const [method, path, scope, key, claimed] = JSON.parse(
    value.toString('utf8', second + 1, third),
  ) as RequestLine;
  const [scopeOf, keyOf] =
    scope !== undefined && key !== undefined ? [scope, key] : (identity ?? []);
  if (scopeOf === undefined || keyOf === undefined) {
    return undefined;
  }
  const head = value.toString('utf8', 0, first).split(' ');
  const common = {
    scope: scopeOf,
    key: keyOf,
    fingerprint,
    method,
    path,
    generation: generation.length > 0 ? generation.toString() : undefined,
    createdAt: claimed === undefined ? undefined : new Date(claimed),
    owner: undefined,
    leaseExpiresAt: undefined,
    completedAt: undefined,
  };
  const rest = value.subarray(Math.min(third + 1, value.length));
  if (value[0] === 0x69) {
    // i<w> <owner>: its lease is its key's PX; it lasts as its generation.
    return {
      summary: {
        ...common,
        status: 'in_progress',
        owner: head[1],
        leaseExpiresAt: fromNow(recordTtl),
        bound: false,
        expiresAt: fromNow(Math.max(recordTtl, generationTtl)),
      },
      rest,
    };
  }
  if (value[0] === 0x62) {
    // b<w> <lease end> <binding end> <owner>, by Redis's clock.
    const [, lease, binding, owner] = head;
    const held = owner !== undefined && owner !== '';
    return {
      summary: {
        ...common,
        status: 'in_progress',
        owner: held ? owner : undefined,
        leaseExpiresAt: held ? fromNow(Number(lease) - now) : undefined,
        bound: true,
        expiresAt: fromNow(Math.max(Number(lease), Number(binding)) - now),
      },
      rest,
    };
  }
  const [status, expiry, code, completed] = head;
  return {
    code: Number(code),
    summary: {
      ...common,
      status: STATUSES[status],
      bound: false,
      completedAt: completed === undefined ? undefined : new Date(+completed),
      expiresAt: new Date(Number(expiry)),
    },
    rest,
  };
}

/** Whether a summary is one `query` asks for. */
function wanted(summary: RecordSummary, query: RecordQuery): boolean {
  const since = summary.createdAt ?? summary.completedAt;
  return (
    query.statuses.includes(summary.status) &&
    (query.scope === undefined || summary.scope === query.scope) &&
    (query.olderThan === undefined ||
      (since !== undefined && since < query.olderThan))
  );
}

/** A key of a scope found by a forget, and its rows as found. */
interface FoundKey {
  readonly id: string;
  readonly rows: number;
}

/** Where a forget's scan is: a master (its index) and its SCAN cursor. */
type ScanPosition = readonly [number, string];

/**
 * @internal The Redis store's operator operations. The key names hold a
 * digest of scope and key only: a key is found by its digest, and a scope
 * by SCAN over every master's record and steps keys (each record names its
 * request's scope and key, each steps hash its identity), the cursor of a
 * page naming the node and its SCAN cursor. Every write is one script on
 * one key's slot.
 */
export class RedisAdmin {
  /** The forgets of scopes under way. */
  private readonly forgets: ForgetPasses<FoundKey, ScanPosition>;
  private readonly pattern: string;

  constructor(
    private readonly client: RedisClient,
    private readonly keys: RedisKeys,
  ) {
    const prefix = keys.prefix.replace(/[*?[\]\\]/g, '\\$&');
    // `<prefix>{<id>}:record`, `…:steps` and `…:identity` (of a count of
    // failures), not the generations and counts.
    this.pattern = `${prefix}{*}:[rsi][etd]*`;
    this.forgets = new ForgetPasses<FoundKey, ScanPosition>({
      scan: (scope, position) => this.scan(scope, position),
      rows: (found) => Math.max(1, found.rows),
      remove: (taken) =>
        Promise.all(
          taken.map(async ({ item, share }) => {
            const [records, steps, left] = await this.forgetId(item.id, share);
            return {
              records,
              steps,
              left: left > 0 ? { id: item.id, rows: left } : undefined,
            };
          }),
        ),
      divisible: true,
    });
  }

  async inspect(
    scope: string,
    key: string,
    withBody: boolean,
  ): Promise<RecordInspection | undefined> {
    const id = RedisKeys.id(scope, key);
    const reply = await this.read(id, 'inspect');
    const read = readReply(reply, [scope, key]);
    if (!read || reply.length === 1) {
      return undefined;
    }
    const { summary, code, rest } = read;
    const steps: Array<RecordInspection['steps'][number]> = [];
    const fields = reply[5];
    for (let i = 0; i < fields.length; i += 2) {
      const field = fields[i].toString();
      if (field.startsWith('s:')) {
        const { expiresAt } = parseStep(fields[i + 1].toString());
        steps.push({ step: field.slice(2), expiresAt: new Date(expiresAt) });
      }
    }
    steps.sort((a, b) => a.expiresAt.getTime() - b.expiresAt.getTime());
    if (code === undefined) {
      return { ...summary, steps };
    }
    const headersEnd = lineEnd(rest, 0);
    return {
      ...summary,
      response: {
        status: code,
        headers:
          headersEnd > 0
            ? (JSON.parse(rest.toString('utf8', 0, headersEnd)) as Record<
                string,
                string | string[]
              >)
            : {},
        ...(withBody
          ? { body: Buffer.from(rest.subarray(headersEnd + 1)) }
          : {}),
      },
      steps,
    };
  }

  /**
   * A page of records, in SCAN order, node by node. The cursor names the
   * node, the SCAN cursor to go on from, and the records of the last chunk
   * that the page had no room for (their ids), listed first on the next
   * page: a page never takes a SCAN again from within a chunk, which,
   * after Redis resized its table meanwhile, would cover other keys (some
   * listed twice, others never). So, as SCAN promises, a record present
   * from the first page to the last is listed; one may be listed twice
   * while Redis shrinks its table. SCAN is asked for four times as many
   * keys as the page has room for (1000 at most), and the cursor carries
   * only the records of the chunk that the page would have listed.
   */
  async list(query: RecordQuery): Promise<RecordPage> {
    const nodes = this.nodes();
    const position =
      query.cursor === undefined ? [] : decodeCursor(query.cursor, 3);
    let node =
      position.length === 0
        ? 0
        : nodes.findIndex((client) => address(client) === position[0]);
    if (node < 0) {
      throw new IdempotencyAdminInputError(
        `The cursor "${query.cursor}" names no node of this Redis deployment: list again from the first page.`,
      );
    }
    let cursor = position[1] ?? '0';
    let pending = position[2] ? position[2].split('.') : [];
    // A SCAN position is an unsigned 64-bit number: Redis refuses any other
    // (or, for a negative one, starts the scan over as if done).
    if (
      !/^\d{1,20}$/.test(cursor) ||
      BigInt(cursor) >= 2n ** 64n ||
      !pending.every((id) => RECORD_ID.test(id))
    ) {
      throw new IdempotencyAdminInputError(
        `The cursor "${query.cursor}" is not one that a page of records returned.`,
      );
    }
    const records: RecordSummary[] = [];
    while (node < nodes.length) {
      let ids = pending;
      let next = cursor;
      pending = [];
      if (ids.length === 0) {
        const room = query.limit - records.length;
        let names: string[];
        [next, names] = await this.scanNames(
          nodes[node],
          cursor,
          Math.min(SCAN_COUNT, Math.max(room * 4, 10)),
        );
        ids = [
          ...new Set(
            names
              .filter((name) => name.endsWith(':record'))
              .map((name) => this.idOf(name)),
          ),
        ].sort();
      }
      const read = await Promise.all(ids.map((id) => this.read(id, 'list')));
      for (const [i, reply] of read.entries()) {
        const summary = readReply(reply)?.summary;
        if (summary && wanted(summary, query)) {
          records.push(summary);
          if (records.length === query.limit) {
            // Those of the rest the page would have listed, read again
            // on the next one: the cursor carries no more than that.
            const rest = ids.filter((_, j) => {
              const later = j > i ? readReply(read[j])?.summary : undefined;
              return later !== undefined && wanted(later, query);
            });
            const resume: string[] | undefined =
              rest.length > 0 || next !== '0'
                ? [address(nodes[node]), next, rest.join('.')]
                : node + 1 < nodes.length
                  ? [address(nodes[node + 1]), '0', '']
                  : undefined;
            return resume
              ? { records, cursor: encodeCursor(resume) }
              : { records };
          }
        }
      }
      if (next === '0') {
        node += 1;
      }
      cursor = next;
    }
    return { records };
  }

  async reset(
    scope: string,
    key: string,
    force: boolean,
  ): Promise<ResetOutcome> {
    const id = RedisKeys.id(scope, key);
    const reply = await runScript<[0] | [1, number] | [2, string, number]>(
      this.client,
      RESET_RECORD,
      [this.keys.record(id), this.keys.steps(id), this.keys.generation(id)],
      [force ? '1' : '0'],
    );
    switch (reply[0]) {
      case 0:
        return { state: 'absent' };
      case 1:
        return { state: 'reset', fenced: reply[1] === 1 };
      default:
        return { state: 'held', owner: reply[1], leaseMs: reply[2] };
    }
  }

  /**
   * One batch of a forget: of one key, by its digest; of a scope, by SCAN
   * (see {@link ForgetPasses}).
   */
  async forget(
    scope: string,
    key: string | undefined,
    batchSize: number,
  ): Promise<ForgottenBatch> {
    if (key === undefined) {
      return this.forgets.batch(scope, batchSize);
    }
    const [records, steps, left] = await this.forgetId(
      RedisKeys.id(scope, key),
      batchSize,
    );
    return { records, steps, more: left > 0 };
  }

  /** One SCAN step of `node` from `cursor`: the store's key names in it. */
  private scanNames(
    node: Redis,
    cursor: string,
    count = SCAN_COUNT,
  ): Promise<[string, string[]]> {
    return node.scan(cursor, 'MATCH', this.pattern, 'COUNT', count);
  }

  /** The next chunk of a forget's SCAN: the keys of `scope` in it. */
  private async scan(
    scope: string,
    position: ScanPosition | undefined,
  ): Promise<{ found: FoundKey[]; next: ScanPosition | undefined }> {
    const nodes = this.nodes();
    const [node, cursor] = position ?? [0, '0'];
    const [next, names] = await this.scanNames(nodes[node], cursor);
    const ids = [...new Set(names.map((name) => this.idOf(name)))];
    const peeks = await Promise.all(
      ids.map((id) =>
        runScript<[string, string, number]>(
          this.client,
          PEEK_RECORD,
          [this.keys.record(id), this.keys.steps(id), this.keys.identity(id)],
          [],
        ),
      ),
    );
    const found: FoundKey[] = [];
    for (const [i, [line, identity, fields]] of peeks.entries()) {
      const ofRecord =
        line === '' ? undefined : (JSON.parse(line) as RequestLine)[2];
      const ofSteps =
        identity === '' ? undefined : (JSON.parse(identity) as string[])[0];
      if (ofRecord === scope || ofSteps === scope) {
        found.push({
          id: ids[i],
          rows: (line === '' ? 0 : 1) + Math.max(0, fields - 1),
        });
      }
    }
    const more: ScanPosition | undefined =
      next !== '0'
        ? [node, next]
        : node + 1 < nodes.length
          ? [node + 1, '0']
          : undefined;
    return { found, next: more };
  }

  private forgetId(
    id: string,
    rows: number,
  ): Promise<[number, number, number]> {
    return runScript<[number, number, number]>(
      this.client,
      FORGET_RECORD,
      [
        this.keys.record(id),
        this.keys.steps(id),
        this.keys.generation(id),
        this.keys.failures(id),
        this.keys.identity(id),
      ],
      [rows],
    );
  }

  private read(id: string, mode: 'list' | 'inspect'): Promise<ReadReply> {
    return runScriptBuffer<ReadReply>(
      this.client,
      READ_RECORD,
      [this.keys.record(id), this.keys.generation(id), this.keys.steps(id)],
      [mode],
    );
  }

  /** The id in a key's name: between the braces after the prefix. */
  private idOf(name: string): string {
    const from = this.keys.prefix.length + 1;
    return name.slice(from, from + RECORD_ID_LENGTH);
  }

  /** The servers to scan: a Cluster's masters, or the one server. */
  private nodes(): Redis[] {
    const cluster = this.client as Cluster;
    return cluster.isCluster
      ? cluster
          .nodes('master')
          .sort((a, b) => address(a).localeCompare(address(b)))
      : [this.client as Redis];
  }
}

function address(client: Redis): string {
  return `${client.options.host}:${client.options.port}`;
}
