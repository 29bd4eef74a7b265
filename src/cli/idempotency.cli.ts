import { parseArgs, type ParseArgsConfig } from 'node:util';
import { IdempotencyAdmin } from '../admin/idempotency.admin.js';
import { IdempotencyAdminInputError } from '../exceptions/idempotency-admin.errors.js';
import type { IdempotencyResponseView } from '../admin/sealed-records.js';
import { DEFAULT_SCOPE } from '../idempotency.constants.js';
import { toMilliseconds } from '../idempotency.duration.js';
import type {
  AbandonedKey,
  RecordState,
} from '../interfaces/idempotency-store.interface.js';
import {
  isSealedStep as isSealed,
  sealedStepText,
} from '../privacy/idempotency-key-ring.js';
import type { IdempotencyPrivacy } from '../privacy/idempotency-privacy.service.js';
import { cliPrivacy, KEYS_VARIABLE } from './cli-keys.js';
import { openCliStore } from './cli-store.js';
import { CliUsageError } from './cli-usage-error.js';
import { schemaFiles } from './schema-files.js';
import { messageOf } from '../core/error-message.js';

/** Where the command line writes, and what it reads of its environment. */
export interface CliIo {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
  readonly env: NodeJS.ProcessEnv;
}

/** Exit codes: done; refused (no record, a live lease, an error); bad usage. */
const OK = 0;
const FAILED = 1;
const USAGE = 2;

export const CLI_HELP = `Usage: nestjs-idempotency <command> [options]

Commands:
  inspect <key>   a record: state, owner and lease left, generation, times,
                  fingerprint, stored response (--body: its body), steps
  list            in-progress claims and failed records (--status, --scope,
                  --older-than, --limit, --cursor)
  reset <key>     end a record so its next request runs (--force: even
                  while its owner's lease is live; the owner is fenced out)
  forget          delete every record and step of --scope (or --key), in
                  batches (--batch-size)
  gc              delete expired records and steps now (--batch-size)
  reencrypt       seal every finished record's response again with the key
                  ring's current key (--keys, --scope, --batch-size), each
                  written back only if unchanged since it was read
  sql             print the schema as plain SQL, the migrations' files in order

Options:
  --url <url>         postgres://… or redis://… (default: DATABASE_URL, else REDIS_URL)
  --scope <scope>     inspect, reset: the key's scope (default: ${DEFAULT_SCOPE});
                      list, reencrypt: only this scope (default: every scope);
                      forget: the scope to forget (needed)
  --key <key>         forget: only this key
  --json              print JSON
  --body              inspect: include the stored body (base64 in JSON)
  --force             reset: even under a live lease
  --status <s,...>    list: in_progress, completed, failed, not_replayable
                      (default: in_progress,failed)
  --older-than <d>    list: created more than <d> ago (30s, 15m, 24h, 7d)
  --limit <n>         list: records per page (default 100, at most 1000)
  --cursor <c>        list: the next page, as the previous one printed it
  --batch-size <n>    forget, gc: rows per batch (default 1000, at most 10000);
                      reencrypt: records per page (default 100, at most 1000)
  --prefix <p>        Redis: the store's key prefix
  --keys <file>       a JSON file of the key ring, as the encryption option:
                      {"keys":{"<id>":"<base64>"},"current":"<id>"} (default:
                      the same JSON in IDEMPOTENCY_KEYS); inspect opens sealed
                      responses with it. Never give keys on the command line.
  -h, --help          this help
`;

const OPTIONS = {
  url: { type: 'string' },
  scope: { type: 'string' },
  key: { type: 'string' },
  json: { type: 'boolean' },
  body: { type: 'boolean' },
  force: { type: 'boolean' },
  status: { type: 'string' },
  'older-than': { type: 'string' },
  limit: { type: 'string' },
  cursor: { type: 'string' },
  'batch-size': { type: 'string' },
  prefix: { type: 'string' },
  keys: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} satisfies ParseArgsConfig['options'];

type Option = keyof typeof OPTIONS;

/** Options every command takes. */
const COMMON: readonly Option[] = ['url', 'json', 'prefix', 'keys', 'help'];

/**
 * What each command takes beside the common options, and whether it takes
 * a key argument: anything else is refused, never ignored (`inspect
 * --force` would otherwise read as done).
 */
const TAKES: Record<string, { options: readonly Option[]; key?: true }> = {
  inspect: { options: ['scope', 'body'], key: true },
  list: { options: ['status', 'scope', 'older-than', 'limit', 'cursor'] },
  reset: { options: ['scope', 'force'], key: true },
  forget: { options: ['scope', 'key', 'batch-size'] },
  gc: { options: ['batch-size'] },
  reencrypt: { options: ['scope', 'batch-size'] },
  sql: { options: [] },
};

/** @throws CliUsageError when `command` is given what it does not take. */
function checkUsage(
  command: string,
  values: Values,
  positionals: readonly string[],
): void {
  const takes = TAKES[command];
  if (!takes) {
    return;
  }
  const foreign = Object.keys(values).filter(
    (name) =>
      !COMMON.includes(name as Option) &&
      !takes.options.includes(name as Option),
  );
  if (foreign.length > 0) {
    throw new CliUsageError(
      `${command} does not take ${foreign.map((name) => `--${name}`).join(', ')}.`,
    );
  }
  if (!takes.key && positionals.length > 0) {
    throw new CliUsageError(
      `${command} takes no argument, not "${positionals[0]}"${command === 'forget' ? ' (one key: --key <key>)' : ''}.`,
    );
  }
}

/**
 * @throws CliUsageError for an option that takes a value given more than
 * once: the parser would keep the last one alone (`forget --key a --key b`
 * forgetting `b` only, `--scope a --scope b` scope `b`), so the command
 * would run on a part of what it was given.
 */
function checkRepeated(
  tokens: ReadonlyArray<{ kind: string; name?: string; value?: string }>,
): void {
  const seen = new Set<string>();
  for (const token of tokens) {
    if (
      token.kind !== 'option' ||
      token.name === undefined ||
      token.value === undefined
    ) {
      continue;
    }
    if (seen.has(token.name)) {
      throw new CliUsageError(
        `--${token.name} is given more than once: give it once (one command per ${token.name === 'key' ? 'key' : 'value'}).`,
      );
    }
    seen.add(token.name);
  }
}

type Values = ReturnType<
  typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>
>['values'];

/**
 * @internal Runs the command line on `args` (without `node` and the
 * script), writing to `io`.
 * @returns its exit code.
 */
export async function runCli(
  args: readonly string[],
  io: CliIo,
): Promise<number> {
  try {
    const { values, positionals, tokens } = parseArgs({
      args: joinedValues(args),
      options: OPTIONS,
      allowPositionals: true,
      strict: true,
      tokens: true,
    });
    checkRepeated(tokens);
    const [command, ...rest] = positionals;
    if (values.help || command === undefined || command === 'help') {
      (command === undefined && !values.help ? io.err : io.out)(CLI_HELP);
      return command === undefined && !values.help ? USAGE : OK;
    }
    checkUsage(command, values, rest);
    if (command === 'sql') {
      const files = await schemaFiles();
      io.out(
        values.json
          ? JSON.stringify(files, null, 2)
          : files.map((file) => file.sql).join('\n'),
      );
      return OK;
    }
    const run = COMMANDS[command];
    if (!run) {
      throw new CliUsageError(`Unknown command "${command}".`);
    }
    // A variable set empty (`DATABASE_URL=` in an env file) is unset, as
    // IDEMPOTENCY_KEYS is: REDIS_URL is then the store's.
    const url =
      values.url ?? (io.env.DATABASE_URL || io.env.REDIS_URL || undefined);
    if (!url) {
      throw new CliUsageError(
        'No store to reach: pass --url, or set DATABASE_URL (or REDIS_URL).',
      );
    }
    const privacy = await cliPrivacy(values.keys, io.env);
    if (command === 'reencrypt' && !privacy) {
      throw new CliUsageError(
        `reencrypt needs the key ring: pass --keys <file>, or set ${KEYS_VARIABLE}.`,
      );
    }
    const opened = await openCliStore(url, values.prefix);
    try {
      const result = await run(
        new IdempotencyAdmin(opened.store, privacy),
        values,
        rest,
        opened.store,
        privacy,
      );
      io.out(
        values.json ? JSON.stringify(result.json, jsonValue, 2) : result.text,
      );
      return result.failed ? FAILED : OK;
    } finally {
      await opened.close();
    }
  } catch (error) {
    const usage =
      error instanceof CliUsageError ||
      error instanceof IdempotencyAdminInputError ||
      (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS');
    io.err(`nestjs-idempotency: ${messageOf(error)}\n`);
    if (usage) {
      io.err('Run `nestjs-idempotency --help` for the commands and options.\n');
    }
    return usage ? USAGE : FAILED;
  }
}

/** What a command prints: as text, or as JSON. */
interface Output {
  readonly text: string;
  readonly json: unknown;
  /** Whether it printed a failure (exit code 1). */
  readonly failed?: boolean;
}

type Command = (
  admin: IdempotencyAdmin,
  values: Values,
  positionals: readonly string[],
  store: import('../interfaces/idempotency-store.interface.js').IdempotencyStore,
  privacy: IdempotencyPrivacy | undefined,
) => Promise<Output>;

const COMMANDS: Record<string, Command | undefined> = {
  async inspect(admin, values, positionals) {
    const record = await admin.inspect(
      keyOf(positionals, 'inspect'),
      values.scope,
      { body: values.body },
    );
    return { text: table(record), json: record };
  },
  async list(admin, values) {
    const olderThan = values['older-than'];
    const page = await admin.list({
      status: values.status?.split(',').map((s) => s.trim() as RecordState),
      scope: values.scope,
      olderThan:
        olderThan === undefined
          ? undefined
          : new Date(Date.now() - durationOf(olderThan)),
      limit: countOf(values.limit, '--limit'),
      cursor: values.cursor,
    });
    const lines = page.records.map((r) =>
      [
        r.status,
        r.scope,
        r.key,
        r.createdAt?.toISOString() ?? '',
        r.owner ?? '',
      ].join('\t'),
    );
    if (page.cursor) {
      lines.push(`next page: --cursor ${page.cursor}`);
    }
    return { text: `${lines.join('\n')}\n`, json: page };
  },
  async reset(admin, values, positionals) {
    const key = keyOf(positionals, 'reset');
    const scope = values.scope ?? DEFAULT_SCOPE;
    const { fenced } = await admin.reset(key, scope, { force: values.force });
    return {
      text: `Reset key "${key}" in scope "${scope}"${fenced ? ': its owner was fenced out' : ''}.\n`,
      json: { scope, key, reset: true, fenced },
    };
  },
  async forget(admin, values) {
    if (values.scope === undefined) {
      throw new CliUsageError('forget needs --scope (and --key for one key).');
    }
    const forgotten = await admin.forget(values.scope, {
      key: values.key,
      batchSize: countOf(values['batch-size'], '--batch-size'),
    });
    return {
      text: `Forgot ${forgotten.records} records and ${forgotten.steps} steps of scope "${values.scope}"${values.key === undefined ? '' : `, key "${values.key}"`}.\n`,
      json: { scope: values.scope, key: values.key, ...forgotten },
    };
  },
  async gc(_admin, values, _positionals, store, privacy) {
    const batchSize = countOf(values['batch-size'], '--batch-size') ?? 1000;
    if (batchSize < 1 || batchSize > 10_000) {
      throw new CliUsageError(
        `--batch-size must be from 1 to 10000, not ${batchSize}.`,
      );
    }
    const abandoned: AbandonedKey[] = [];
    let removed = 0;
    let stopped: unknown;
    try {
      for (;;) {
        const batch = await store.collect(batchSize, (key) => {
          abandoned.push(key);
        });
        removed += batch.removed;
        if (!batch.more) {
          break;
        }
      }
    } catch (error) {
      // The batches before committed their deletions: what they found
      // abandoned is printed all the same (exit code 1), never to be
      // reported again. The failed batch's keys, if any, were reported
      // before a deletion that did not commit: they come again.
      stopped = error;
    }
    // Reported as an application's collector reports them, opened with
    // the key ring: this run deletes them, and no other will report them.
    const reported = abandoned.map((key) => ({
      ...key,
      steps: key.steps.map(({ step, result }) => ({
        step,
        result: openedStep(privacy, key, step, result),
      })),
    }));
    const lines = reported.map(
      (key) =>
        `abandoned: ${key.scope}\t${key.key}\t${JSON.stringify(key.steps)}`,
    );
    if (
      reported.some((key) => key.steps.some(({ result }) => isSealed(result)))
    ) {
      lines.push(
        privacy
          ? 'Some abandoned steps could not be opened with the key ring given: they are shown sealed.'
          : `Some abandoned steps are sealed: run gc with the key ring (--keys <file>, or ${KEYS_VARIABLE}) to read them.`,
      );
    }
    lines.push(`Removed ${removed} expired rows.`);
    if (stopped !== undefined) {
      lines.push(
        `gc stopped: ${messageOf(stopped)}. The rows above are removed; run it again for the rest.`,
      );
    }
    return {
      text: `${lines.join('\n')}\n`,
      json: {
        removed,
        abandoned: reported,
        ...(stopped === undefined ? {} : { error: messageOf(stopped) }),
      },
      failed: stopped !== undefined,
    };
  },
  async reencrypt(admin, values) {
    const done = await admin.reencrypt({
      scope: values.scope,
      batchSize: countOf(values['batch-size'], '--batch-size'),
    });
    const lines = done.unreadable.map(
      (record) =>
        `cannot be opened: ${record.scope}\t${record.key}${record.step === undefined ? '' : `\tstep ${record.step}`}\t${record.reason}`,
    );
    const { steps } = done;
    lines.push(
      `Resealed ${done.resealed} records with the current key; ${done.current} already were; ${done.changed} changed meanwhile and were left alone; ${done.unreadable.length} cannot be opened.`,
      `Steps of claims in progress: resealed ${steps.resealed}; ${steps.current} already were; ${steps.changed} changed meanwhile.`,
    );
    // Records it could not open still need their old key: not done.
    return {
      text: `${lines.join('\n')}\n`,
      json: done,
      failed: done.unreadable.length > 0,
    };
  },
};

/**
 * A step's result as the collector found it, opened with the key ring
 * when it is sealed and the ring opens it; else as it is (sealed, as text).
 */
function openedStep(
  privacy: IdempotencyPrivacy | undefined,
  key: { readonly scope: string; readonly key: string },
  step: string,
  result: unknown,
): unknown {
  if (!privacy || !isSealed(result)) {
    return sealedStepText(result);
  }
  try {
    return privacy.openStep(key.scope, key.key, step, result);
  } catch {
    return sealedStepText(result);
  }
}

/**
 * `args` with each value that begins with a dash joined to its option
 * (`--limit -1` as `--limit=-1`), which the parser would otherwise take
 * for an option of its own and refuse with a message about that: the
 * value is then refused as the option's, saying what it takes.
 */
function joinedValues(args: readonly string[]): string[] {
  const joined: string[] = [];
  for (let i = 0; i < args.length; i += 1) {
    const name = args[i].startsWith('--') ? args[i].slice(2) : undefined;
    const option =
      name === undefined ? undefined : OPTIONS[name as keyof typeof OPTIONS];
    const value = args[i + 1];
    if (
      option?.type === 'string' &&
      value !== undefined &&
      /^-[\d.]/.test(value)
    ) {
      joined.push(`${args[i]}=${value}`);
      i += 1;
    } else {
      joined.push(args[i]);
    }
  }
  return joined;
}

function keyOf(positionals: readonly string[], command: string): string {
  if (positionals.length !== 1 || !positionals[0]) {
    throw new CliUsageError(`${command} takes one key: ${command} <key>.`);
  }
  return positionals[0];
}

function countOf(
  value: string | undefined,
  option: string,
): number | undefined {
  if (value === undefined) {
    return undefined;
  }
  if (!/^\d+$/.test(value)) {
    throw new CliUsageError(
      `${option} must be a whole number, not "${value}".`,
    );
  }
  return Number(value);
}

function durationOf(value: string): number {
  try {
    return toMilliseconds(value, '--older-than');
  } catch {
    throw new CliUsageError(
      `--older-than must be a duration such as 30s, 15m, 24h or 7d, not "${value}".`,
    );
  }
}

/** Buffers as base64 in JSON (dates are ISO strings already). */
function jsonValue(this: unknown, _key: string, value: unknown): unknown {
  return value &&
    typeof value === 'object' &&
    (value as { type?: unknown }).type === 'Buffer' &&
    Array.isArray((value as { data?: unknown }).data)
    ? Buffer.from((value as { data: number[] }).data).toString('base64')
    : value;
}

/** A record as `name: value` lines. */
function table(record: object): string {
  const lines: string[] = [];
  for (const [name, value] of Object.entries(record)) {
    if (name === 'steps') {
      for (const step of value as Array<{ step: string; createdAt?: Date }>) {
        lines.push(
          `step: ${step.step}\t${step.createdAt?.toISOString() ?? ''}`,
        );
      }
    } else if (name === 'response' && value) {
      const response = value as IdempotencyResponseView;
      lines.push(`response status: ${response.status}`);
      if (response.keyId !== undefined) {
        lines.push(`response sealed with key: ${response.keyId}`);
      }
      if (response.unreadable !== undefined) {
        lines.push(`response cannot be opened: ${response.unreadable}`);
      }
      if (response.headers) {
        lines.push(`response headers: ${JSON.stringify(response.headers)}`);
      }
      if (response.body) {
        lines.push(`response body: ${response.body.toString('utf8')}`);
      }
    } else if (value !== undefined) {
      lines.push(
        `${name}: ${value instanceof Date ? value.toISOString() : String(value)}`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}
