import {
  Body,
  Controller,
  Injectable,
  Module,
  Post,
  Query,
  type INestApplication,
} from '@nestjs/common';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import qs from 'qs';
import { Idempotent } from '../../src/index.js';
import { PLATFORMS, startTestApp, type TestApp } from '../utils/test-app.js';

/** How many times each route's handler ran. */
@Injectable()
class Runs {
  readonly counts: Record<string, number> = {};

  count(route: string): number {
    this.counts[route] = (this.counts[route] ?? 0) + 1;
    return this.counts[route];
  }
}

/** A class a parser of the application's own makes instances of. */
class Money {
  amount?: unknown;
  currency?: unknown;
}

/**
 * The application's JSON reviver: a date and time to the second
 * (`2024-01-01T00:00:00Z`) a `Date`, `{"$map": [[k, v]]}` a `Map`,
 * `{"$set": [v]}` a `Set`, `{"$money": {...}}` a `Money`, `{"$ring":
 * {...}}` that object with a field `self` that is itself (a cycle, as a
 * deserializer that restores references gives).
 */
const ISO_DATE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;
function reviver(_name: string, value: unknown): unknown {
  if (typeof value === 'string' && ISO_DATE.test(value)) {
    return new Date(value);
  }
  const tagged = value as Record<string, unknown> | null;
  if (tagged !== null && typeof tagged === 'object') {
    if (Array.isArray(tagged.$map)) {
      return new Map(tagged.$map as Array<[unknown, unknown]>);
    }
    if (Array.isArray(tagged.$set)) {
      return new Set(tagged.$set as unknown[]);
    }
    if (tagged.$money !== null && typeof tagged.$money === 'object') {
      return Object.assign(new Money(), tagged.$money);
    }
    if (tagged.$ring !== null && typeof tagged.$ring === 'object') {
      const ring: Record<string, unknown> = { ...tagged.$ring };
      ring.self = ring;
      return ring;
    }
  }
  return value;
}

/** What the handler sees of a value, written so that a test can read it. */
function seen(value: unknown, open: readonly unknown[] = []): unknown {
  if (open.includes(value)) {
    return 'Cycle';
  }
  const inner = [...open, value];
  if (value instanceof Date) {
    return `Date(${value.toISOString()})`;
  }
  if (value instanceof Map) {
    return {
      Map: [...value].map(([k, v]) => [seen(k, inner), seen(v, inner)]),
    };
  }
  if (value instanceof Set) {
    return { Set: [...value].map((item) => seen(item, inner)) };
  }
  if (value instanceof Money) {
    return { Money: { ...value } };
  }
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value).map(([name, field]) => [name, seen(field, inner)]),
    );
  }
  return value;
}

@Controller('parsed')
class ParsedController {
  constructor(private readonly runs: Runs) {}

  @Post('body')
  @Idempotent()
  body(@Body() body: unknown) {
    return { run: this.runs.count('body'), body: seen(body) };
  }

  @Post('query')
  @Idempotent()
  query(@Query() query: unknown) {
    return { run: this.runs.count('query'), query };
  }

  @Post('amount')
  @Idempotent({ fingerprint: { include: ['amount'] } })
  amount(@Query() query: { amount?: unknown }) {
    return { run: this.runs.count('amount'), amount: query.amount };
  }
}

@Module({ controllers: [ParsedController], providers: [Runs] })
class ParsedModule {}

/**
 * The application's own parsers: the JSON reviver above, and `qs` for the
 * query (Express's `extended` query parser, Fastify's `querystringParser`).
 */
function useOwnParsers(app: INestApplication, platform: string): void {
  if (platform === 'express') {
    const express = app as NestExpressApplication;
    express.set('query parser', 'extended');
    express.useBodyParser('json', { reviver });
  } else {
    (app as NestFastifyApplication).useBodyParser(
      'application/json',
      {},
      // Its promise's value is the body (a parser that returns none calls
      // `done`).
      (_request: unknown, body: Buffer) =>
        Promise.resolve().then(
          () => JSON.parse(body.toString('utf8'), reviver) as unknown,
        ),
    );
  }
}

describe.each(PLATFORMS)(
  "fingerprints of what the application's own parsers give the handler (%s)",
  (platform) => {
    let target: TestApp;
    let runs: Runs;

    beforeAll(async () => {
      target = await startTestApp({
        imports: [ParsedModule],
        platform,
        configure: (app) => useOwnParsers(app, platform),
        fastify: {
          routerOptions: { querystringParser: (query) => qs.parse(query) },
        },
      });
      runs = target.app.get(Runs);
    });
    afterAll(() => target?.close());

    const post = (path: string, key: string, body?: string) =>
      fetch(`${target.url}${path}`, {
        method: 'POST',
        headers: {
          'Idempotency-Key': key,
          ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
        },
        body,
      });

    /**
     * Sends `first` under `key` (the handler sees `sees`), then `first`
     * again (replayed: the first's bytes), then each of `others` (422): the
     * route's handler ran once.
     */
    const replaysOnlyItself = async (
      route: 'body' | 'query' | 'amount',
      key: string,
      first: { path?: string; body?: string; sees: Record<string, unknown> },
      others: ReadonlyArray<{ path?: string; body?: string }>,
    ) => {
      const before = runs.counts[route] ?? 0;
      const path = (sent: { path?: string }) => sent.path ?? `/parsed/${route}`;
      const original = await post(path(first), key, first.body);
      expect(original.status).toBe(201);
      const text = await original.text();
      expect(JSON.parse(text)).toEqual({ run: before + 1, ...first.sees });
      const again = await post(path(first), key, first.body);
      expect(again.status).toBe(201);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(await again.text()).toBe(text);
      for (const other of others) {
        const refused = await post(path(other), key, other.body);
        expect({ other, status: refused.status }).toEqual({
          other,
          status: 422,
        });
        expect(((await refused.json()) as { type: string }).type).toBe(
          'urn:idempotency:key-reused',
        );
      }
      expect(runs.counts[route]).toBe(before + 1);
    };

    it("refuses with 422 a body whose dates differ, as a reviver gives them (a Date, never an object without fields), or that sends as text the date's JSON", async () => {
      await replaysOnlyItself(
        'body',
        'dates-1',
        {
          body: '{"at":"2024-01-01T00:00:00Z"}',
          sees: { body: { at: 'Date(2024-01-01T00:00:00.000Z)' } },
        },
        [
          { body: '{"at":"2031-12-31T00:00:00Z"}' },
          { body: '{"at":{}}' },
          // The date's JSON text, which the reviver keeps as text.
          { body: '{"at":"2024-01-01T00:00:00.000Z"}' },
        ],
      );
    });

    it('replays a body that holds a cycle (a reference back, as a deserializer restores it), and refuses with 422 one whose content or shape differs', async () => {
      await replaysOnlyItself(
        'body',
        'cycle-1',
        {
          body: '{"r":{"$ring":{"n":1}}}',
          sees: { body: { r: { n: 1, self: 'Cycle' } } },
        },
        [
          { body: '{"r":{"$ring":{"n":2}}}' },
          { body: '{"r":{"n":1,"self":{}}}' },
          { body: '{"r":{"n":1}}' },
        ],
      );
    });

    it('refuses with 422 a body whose Map, Set or class instance differs, or is a plain object or array of the same content', async () => {
      await replaysOnlyItself(
        'body',
        'collections-1',
        {
          body: '{"m":{"$map":[["a",1]]},"s":{"$set":[1,2]},"p":{"$money":{"amount":5,"currency":"EUR"}}}',
          sees: {
            body: {
              m: { Map: [['a', 1]] },
              s: { Set: [1, 2] },
              p: { Money: { amount: 5, currency: 'EUR' } },
            },
          },
        },
        [
          {
            body: '{"m":{"$map":[["a",2]]},"s":{"$set":[1,2]},"p":{"$money":{"amount":5,"currency":"EUR"}}}',
          },
          {
            body: '{"m":{"$map":[["a",1]]},"s":{"$set":[2,1]},"p":{"$money":{"amount":5,"currency":"EUR"}}}',
          },
          {
            body: '{"m":{"$map":[["a",1]]},"s":{"$set":[1,2]},"p":{"$money":{"amount":500,"currency":"EUR"}}}',
          },
          {
            body: '{"m":{"a":1},"s":{"$set":[1,2]},"p":{"$money":{"amount":5,"currency":"EUR"}}}',
          },
          {
            body: '{"m":{"$map":[["a",1]]},"s":[1,2],"p":{"$money":{"amount":5,"currency":"EUR"}}}',
          },
          {
            body: '{"m":{"$map":[["a",1]]},"s":{"$set":[1,2]},"p":{"amount":5,"currency":"EUR"}}',
          },
        ],
      );
    });

    it('refuses with 422 the parameters `qs` merges into one array (`[a]` and `a`) in another order', async () => {
      await replaysOnlyItself(
        'query',
        'bracketed-1',
        { path: '/parsed/query?[a]=1&a=2', sees: { query: { a: ['1', '2'] } } },
        [{ path: '/parsed/query?a=2&[a]=1' }, { path: '/parsed/query?a=2' }],
      );
      // Their order alone, with other names, still does not count.
      await replaysOnlyItself(
        'query',
        'bracketed-2',
        {
          path: '/parsed/query?b=x&[a]=1&a=2',
          sees: { query: { a: ['1', '2'], b: 'x' } },
        },
        [],
      );
      const reordered = await post(
        '/parsed/query?[a]=1&a=2&b=x',
        'bracketed-2',
      );
      expect(reordered.headers.get('idempotent-replayed')).toBe('true');
    });

    it('counts `[amount]`, which `qs` gives the handler as `amount`, on a route that includes only `amount`', async () => {
      await replaysOnlyItself(
        'amount',
        'included-1',
        { path: '/parsed/amount?[amount]=5', sees: { amount: '5' } },
        [{ path: '/parsed/amount?[amount]=500' }, { path: '/parsed/amount' }],
      );
      // Names it does not include still do not count.
      const other = await post(
        '/parsed/amount?[amount]=5&note=x',
        'included-1',
      );
      expect(other.headers.get('idempotent-replayed')).toBe('true');
    });
  },
);
