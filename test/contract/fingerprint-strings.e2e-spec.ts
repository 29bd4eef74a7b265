import { Body, Controller, Injectable, Module, Post } from '@nestjs/common';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { Idempotent } from '../../src/index.js';
import { PLATFORMS, startTestApp, type TestApp } from '../utils/test-app.js';

/** How many times the handler ran. */
@Injectable()
class Runs {
  count = 0;
}

@Controller('strings')
class StringsController {
  constructor(private readonly runs: Runs) {}

  /** Answers with the UTF-16 code units of the string it was given. */
  @Post()
  @Idempotent()
  echo(@Body() body: unknown) {
    this.runs.count += 1;
    const units =
      typeof body === 'string'
        ? Array.from({ length: body.length }, (_, i) =>
            body.charCodeAt(i).toString(16),
          )
        : body;
    return { run: this.runs.count, units };
  }
}

@Module({ controllers: [StringsController], providers: [Runs] })
class StringsModule {}

describe.each(PLATFORMS)(
  'fingerprints of string bodies that are not well-formed Unicode (%s)',
  (platform) => {
    let target: TestApp;
    let runs: Runs;

    beforeAll(async () => {
      target = await startTestApp({
        imports: [StringsModule],
        platform,
        // Express: a JSON parser that takes any JSON value (Fastify's does),
        // and a text parser, which decodes the charset the request names.
        configure: (app) => {
          if (platform === 'express') {
            const express = app as NestExpressApplication;
            express.useBodyParser('json', { strict: false });
            express.useBodyParser('text');
          }
        },
      });
      runs = target.app.get(Runs);
    });
    afterAll(() => target?.close());

    const post = (key: string, contentType: string, body: string | Buffer) =>
      fetch(`${target.url}/strings`, {
        method: 'POST',
        headers: { 'Idempotency-Key': key, 'Content-Type': contentType },
        body,
      });

    const records = async (key: string) =>
      (
        await target.db.query(
          `SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
          [key],
        )
      ).length;

    it('refuses with 422 a JSON string with another lone surrogate, or U+FFFD, under the key of the first (UTF-8 writes all of them as U+FFFD), and replays only the same one', async () => {
      const before = runs.count;
      const first = await post('lone-json', 'application/json', '"\\ud800"');
      expect(first.status).toBe(201);
      const text = await first.text();
      expect(JSON.parse(text)).toEqual({ run: before + 1, units: ['d800'] });
      for (const other of ['"\\ud801"', '"\\udc00"', '"\\ufffd"']) {
        const refused = await post('lone-json', 'application/json', other);
        expect([other, refused.status]).toEqual([other, 422]);
        expect(((await refused.json()) as { type: string }).type).toBe(
          'urn:idempotency:key-reused',
        );
      }
      const again = await post('lone-json', 'application/json', '"\\ud800"');
      expect(again.status).toBe(201);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(await again.text()).toBe(text);
      expect(runs.count - before).toBe(1);
      expect(await records('lone-json')).toBe(1);
    });

    if (platform === 'express') {
      it('refuses with 422 a UTF-16 text body with another lone surrogate under the key of the first, and replays only the same one', async () => {
        const before = runs.count;
        const utf16 = 'text/plain; charset=utf-16le';
        const first = await post('lone-text', utf16, Buffer.from([0x00, 0xd8]));
        expect(first.status).toBe(201);
        const text = await first.text();
        expect(JSON.parse(text)).toEqual({ run: before + 1, units: ['d800'] });
        for (const other of [
          [0x01, 0xd8],
          [0xfd, 0xff],
        ]) {
          const refused = await post('lone-text', utf16, Buffer.from(other));
          expect([other, refused.status]).toEqual([other, 422]);
        }
        const again = await post('lone-text', utf16, Buffer.from([0x00, 0xd8]));
        expect(again.headers.get('idempotent-replayed')).toBe('true');
        expect(await again.text()).toBe(text);
        expect(runs.count - before).toBe(1);
      });
    }
  },
);
