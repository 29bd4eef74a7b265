/**
 * Multer as an Express middleware reads a multipart body before the module:
 * it sets the text fields as `req.body` and keeps the files apart
 * (`req.file`, `req.files`), where the fingerprint cannot read them. Two
 * uploads of other files under one key must not share a fingerprint: such
 * a request is refused with 415 unreadable-body, as an upload that
 * `FileInterceptor` reads after the module is, unless the route has a
 * fingerprint function; one without files is fingerprinted by its fields.
 */
import { Controller, Post, Req } from '@nestjs/common';
import { createRequire } from 'node:module';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { Idempotent } from '../../src/index.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';

/** Multer (a dependency of @nestjs/platform-express), untyped here. */
const multer = createRequire(import.meta.url)('multer') as () => {
  any(): (request: unknown, response: unknown, next: () => void) => void;
};

/** What the handler read of an upload. */
interface Upload {
  body?: { note?: string };
  files?: Array<{ buffer: Buffer }>;
}

@Controller('uploads')
class UploadsController {
  @Post()
  @Idempotent()
  create(@Req() request: Upload) {
    return {
      note: request.body?.note,
      files: Array.isArray(request.files)
        ? request.files.map((file) => file.buffer.toString())
        : [],
    };
  }

  @Post('digested')
  @Idempotent({
    fingerprint: (context) =>
      String(
        context.switchToHttp().getRequest<{ headers: Record<string, string> }>()
          .headers['content-digest'],
      ),
  })
  digested(@Req() request: Upload) {
    return { files: Array.isArray(request.files) ? request.files.length : 0 };
  }
}

/** A multipart body: a `note` field, and a file of `content` if given. */
function multipart(content?: string): FormData {
  const form = new FormData();
  form.append('note', 'receipt');
  if (content !== undefined) {
    form.append('file', new Blob([content], { type: 'text/plain' }), 'r.txt');
  }
  return form;
}

describe('uploads that Multer read as an Express middleware', () => {
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({
      platform: 'express',
      controllers: [UploadsController],
      configure: (app) => {
        app.use(multer().any());
      },
    });
  });
  afterAll(() => target.close());

  const upload = (route: string, key: string, form: FormData, digest = '') =>
    fetch(`${target.url}${route}`, {
      method: 'POST',
      headers: { 'idempotency-key': key, 'content-digest': digest },
      body: form,
    });
  const records = (key: string) =>
    target.db.query(
      `SELECT key FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
      [key],
    );

  it('refuses one with files with 415 unreadable-body: nothing runs, nothing is stored', async () => {
    const refused = await upload('/uploads', 'files-1', multipart('AAAA'));
    expect(refused.status).toBe(415);
    expect(refused.headers.get('content-type')).toMatch(
      /^application\/problem\+json/,
    );
    expect(await refused.json()).toMatchObject({
      type: 'urn:idempotency:unreadable-body',
    });
    expect(await records('files-1')).toEqual([]);
    // Another file under the key: refused alike, never the first one's answer.
    expect(
      (await upload('/uploads', 'files-1', multipart('BBBB'))).status,
    ).toBe(415);
  });

  it('fingerprints one without files by its fields', async () => {
    const first = await upload('/uploads', 'fields-1', multipart());
    expect([first.status, await first.json()]).toEqual([
      201,
      { note: 'receipt', files: [] },
    ]);
    const again = await upload('/uploads', 'fields-1', multipart());
    expect(again.headers.get('idempotent-replayed')).toBe('true');
  });

  it('runs a route with a fingerprint function, which tells the uploads apart', async () => {
    const first = await upload(
      '/uploads/digested',
      'digest-1',
      multipart('A'),
      'a',
    );
    expect(first.status).toBe(201);
    const other = await upload(
      '/uploads/digested',
      'digest-1',
      multipart('B'),
      'b',
    );
    expect(other.status).toBe(422);
  });
});

describe('requests on Fastify whose platform gives every request file() and files()', () => {
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({
      platform: 'fastify',
      controllers: [UploadsController],
      configure: (app) => {
        // As @fastify/multipart does, for the routes that take uploads.
        const fastify = app.getHttpAdapter().getInstance() as {
          decorateRequest(name: string, value: unknown): void;
        };
        fastify.decorateRequest('file', function file() {
          return undefined;
        });
        fastify.decorateRequest('files', function files() {
          return undefined;
        });
      },
    });
  });
  afterAll(() => target.close());

  it('fingerprints a JSON request as any other: the methods are no files', async () => {
    const post = () =>
      fetch(`${target.url}/uploads`, {
        method: 'POST',
        headers: {
          'idempotency-key': 'json-1',
          'content-type': 'application/json',
        },
        body: JSON.stringify({ note: 'receipt' }),
      });
    const first = await post();
    expect([first.status, await first.json()]).toEqual([
      201,
      { note: 'receipt', files: [] },
    ]);
    expect((await post()).headers.get('idempotent-replayed')).toBe('true');
  });
});
