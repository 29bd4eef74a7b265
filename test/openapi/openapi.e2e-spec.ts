import type { INestApplication } from '@nestjs/common';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import type { IdempotencyModuleOptions } from '../../src/index.js';
import {
  PLATFORMS,
  startTestApp,
  type Platform,
  type TestApp,
} from '../utils/test-app.js';
import { OpenApiTestModule } from './openapi.module.js';

interface Operation {
  parameters: {
    name: string;
    in: string;
    required?: boolean;
    description?: string;
    schema?: Record<string, unknown>;
  }[];
  responses: Record<
    string,
    {
      description: string;
      content?: Record<string, { schema: Record<string, unknown> }>;
      headers?: Record<string, unknown>;
    }
  >;
}

interface OpenApiDocument {
  paths: Record<string, Record<string, Operation>>;
}

/**
 * Starts the application as a user's main.ts does: the document is created
 * before the application starts (before any lifecycle hook ran), then served.
 * The test reads it over HTTP.
 */
async function documentOf(
  platform: Platform,
  idempotency: IdempotencyModuleOptions = {},
): Promise<{ target: TestApp; document: OpenApiDocument }> {
  const configure = (app: INestApplication) => {
    const document = SwaggerModule.createDocument(
      app,
      new DocumentBuilder().setTitle('Payments').build(),
    );
    SwaggerModule.setup('docs', app, document, { ui: false });
  };
  const target = await startTestApp({
    platform,
    imports: [OpenApiTestModule],
    idempotency,
    configure,
  });
  const answer = await fetch(`${target.url}/docs-json`);
  expect(answer.status).toBe(200);
  return { target, document: (await answer.json()) as OpenApiDocument };
}

const PROBLEM = 'application/problem+json';
const MODULE_STATUSES = ['400', '409', '415', '422', '503'];

/** The headers the module documents on a route's own success responses. */
function replayHeaders(replayed = 'Idempotent-Replayed') {
  return {
    [replayed]: {
      description: expect.stringContaining('Present on a replay') as string,
      schema: { type: 'string', enum: ['true'] },
    },
    'Idempotent-Body-Omitted': {
      description: expect.stringContaining(
        'the status is the original one, and the body is empty',
      ) as string,
      schema: { type: 'string', enum: ['true'] },
    },
  };
}

function keyHeader(operation: Operation, name = 'Idempotency-Key') {
  return operation.parameters.filter(
    (parameter) =>
      parameter.in === 'header' &&
      parameter.name.toLowerCase() === name.toLowerCase(),
  );
}

describe.each(PLATFORMS)(
  'OpenAPI document of decorated routes (%s)',
  (platform) => {
    let target: TestApp | undefined;
    let document: OpenApiDocument;
    beforeAll(async () => {
      ({ target, document } = await documentOf(platform));
    });
    afterAll(async () => {
      await target?.close();
    });

    it('documents the required key header, the replay headers and the problem responses, next to the inferred 201', () => {
      const operation = document.paths['/payments'].post;
      expect(keyHeader(operation)).toEqual([
        {
          name: 'Idempotency-Key',
          in: 'header',
          required: true,
          description: expect.stringContaining(
            'Unique key of this operation',
          ) as string,
          schema: {
            type: 'string',
            minLength: 1,
            maxLength: 255,
            pattern: '^[\\x21-\\x7e]+$',
            example: '8e03978e-40d5-43e8-bc93-6894a57f9324',
          },
        },
      ]);
      expect(Object.keys(operation.responses).sort()).toEqual([
        '201',
        ...MODULE_STATUSES,
      ]);
      expect(operation.responses['201']).toEqual({
        description: '',
        headers: replayHeaders(),
      });
      expect(keyHeader(operation)[0].description).toContain(
        '`Idempotent-Replayed: true`',
      );
      for (const status of MODULE_STATUSES) {
        const response = operation.responses[status];
        expect(Object.keys(response.content ?? {})).toEqual([PROBLEM]);
        expect(response.content![PROBLEM].schema).toMatchObject({
          type: 'object',
          required: ['type', 'title', 'status', 'detail'],
        });
      }
      expect(operation.responses['400'].description).toContain(
        'urn:idempotency:missing-key',
      );
      expect(operation.responses['409'].headers).toEqual({
        'Retry-After': {
          description: 'Seconds to wait before retrying with the same key',
          schema: { type: 'integer', minimum: 0 },
        },
      });
      expect(operation.responses['503'].headers).toHaveProperty('Retry-After');
      expect(operation.responses['422'].headers).toBeUndefined();
      expect(operation.responses['422'].description).toBe(
        'The key was used for another request (`urn:idempotency:key-reused`). Nothing ran: use a new key for a new request.',
      );
      expect(operation.responses['415'].description).toContain(
        '`urn:idempotency:unreadable-body`',
      );
    });

    it("keeps the route's own responses: its 201 type, and its 409 with the module's case added", () => {
      const operation = document.paths['/payments/{id}/refunds'].post;
      expect(keyHeader(operation)).toMatchObject([{ required: false }]);
      expect(operation.responses['201']).toEqual({
        description: 'The refund',
        content: {
          'application/json': {
            schema: { $ref: '#/components/schemas/Payment' },
          },
        },
        headers: replayHeaders(),
      });
      const conflict = operation.responses['409'];
      expect(conflict.content).toEqual({
        'application/json': {
          schema: { $ref: '#/components/schemas/RefundRefusal' },
        },
      });
      expect(conflict.description).toMatch(
        /^The refund exceeds the charge\n\nA request with the same key is still running/,
      );
      // A key is optional here: it can be malformed, not missing.
      expect(operation.responses['400'].description).not.toContain(
        'missing-key',
      );
    });

    it('documents no header for a route that takes its key elsewhere, and keeps its @HttpCode status', () => {
      const operation = document.paths['/payments/{id}'].put;
      expect(keyHeader(operation)).toEqual([]);
      expect(Object.keys(operation.responses).sort()).toEqual([
        '200',
        ...MODULE_STATUSES,
      ]);
      expect(operation.responses['400'].description).toMatch(
        /^The idempotency key is missing or malformed/,
      );
    });

    it('leaves a key header the route documents itself as it is, its expiration policy added', () => {
      const operation = document.paths['/payments/captures'].post;
      expect(keyHeader(operation)).toEqual([
        {
          name: 'idempotency-key',
          in: 'header',
          description:
            'Our own words. A key is kept for 7 days (`ttl`) after its request: a request with it after that runs as a new request.',
          schema: { type: 'string' },
        },
      ]);
    });

    it('adds nothing to routes without @Idempotent()', () => {
      expect(document.paths['/payments'].get).toMatchObject({
        parameters: [],
        responses: { '200': { description: '' } },
      });
      const quote = document.paths['/payments/quotes'].post;
      expect(keyHeader(quote)).toEqual([]);
      expect(Object.keys(quote.responses)).toEqual(['201']);
    });

    it("follows the class's key rules, and keeps a response its controller documents", () => {
      const operation = document.paths['/transfers'].post;
      expect(keyHeader(operation)[0].schema).toMatchObject({
        maxLength: 64,
        pattern: '^[0-9a-f-]+$',
      });
      expect(operation.responses['503'].description).toMatch(
        /^The bank is closed\n\nThe idempotency record could not be claimed/,
      );
      expect(operation.responses['503'].content).toBeUndefined();
      expect(Object.keys(operation.responses).sort()).toEqual([
        '201',
        ...MODULE_STATUSES,
      ]);
    });

    it('says a key pattern with flags in the description rather than as a schema pattern it would not match, and shows no example the route refuses', () => {
      const [header] = keyHeader(document.paths['/codes'].post);
      expect(header.schema).toEqual({
        type: 'string',
        minLength: 1,
        maxLength: 64,
      });
      expect(header.description).toContain(', matching `/^[a-z]+$/i`.');
      const [transfers] = keyHeader(document.paths['/transfers'].post);
      expect(transfers.schema?.example).toBe(
        '8e03978e-40d5-43e8-bc93-6894a57f9324',
      );
    });

    it('keeps the response the CLI plugin inferred', () => {
      const operation = document.paths['/invoices'].post;
      expect(operation.responses['201']).toEqual({
        description: '',
        content: {
          'application/json': {
            schema: { $ref: '#/components/schemas/Payment' },
          },
        },
        headers: replayHeaders(),
      });
      expect(Object.keys(operation.responses).sort()).toEqual([
        '201',
        ...MODULE_STATUSES,
      ]);
    });
  },
);

describe('OpenAPI options', () => {
  let target: TestApp | undefined;
  afterEach(async () => {
    await target?.close();
    target = undefined;
  });

  it('names the header given by `headerName`', async () => {
    let document: OpenApiDocument;
    ({ target, document } = await documentOf('express', {
      headerName: 'X-Request-Key',
    }));
    const operation = document.paths['/payments'].post;
    expect(keyHeader(operation)).toEqual([]);
    expect(keyHeader(operation, 'X-Request-Key')).toMatchObject([
      { name: 'X-Request-Key', required: true },
    ]);
    expect(operation.responses['400'].description).toMatch(
      /^The X-Request-Key header is missing or malformed/,
    );
  });

  it('names the replay header given by `replayHeaderName`, and points problem types at `problemTypeBaseUrl`', async () => {
    let document: OpenApiDocument;
    ({ target, document } = await documentOf('fastify', {
      replayHeaderName: 'Idempotency-Replayed',
      problemTypeBaseUrl: 'https://docs.example.com/errors/',
    }));
    const operation = document.paths['/payments'].post;
    expect(operation.responses['201'].headers).toEqual(
      replayHeaders('Idempotency-Replayed'),
    );
    expect(keyHeader(operation)[0].description).toContain(
      '`Idempotency-Replayed: true`',
    );
    expect(keyHeader(operation)[0].description).not.toContain(
      'Idempotent-Replayed',
    );
    expect(operation.responses['400'].description).toBe(
      'The Idempotency-Key header is missing or malformed (`https://docs.example.com/errors/missing-key` or `https://docs.example.com/errors/invalid-key`). Nothing ran.',
    );
    expect(operation.responses['422'].description).toContain(
      '`https://docs.example.com/errors/key-reused`',
    );
    expect(JSON.stringify(operation.responses)).not.toContain('urn:');
  });

  it("states each decorated route's ttl in its key header, and documents the expiry header when on", async () => {
    let document: OpenApiDocument;
    ({ target, document } = await documentOf('express', {
      ttl: '90m',
      expiresHeader: true,
    }));
    const described = Object.entries(document.paths).flatMap(([path, item]) =>
      Object.values(item).flatMap((operation) =>
        keyHeader(operation).map(
          (header) => [path, header.description] as const,
        ),
      ),
    );
    expect(described.length).toBeGreaterThanOrEqual(4);
    for (const [path, description] of described) {
      expect(description).toContain(
        `A key is kept for ${path === '/payments/captures' ? '7 days' : '90 minutes'} (\`ttl\`) after its request (the response's \`Idempotency-Expires\` header says until when)`,
      );
    }
    expect(
      document.paths['/payments'].post.responses['201'].headers,
    ).toMatchObject({
      'Idempotency-Expires': {
        description: expect.stringContaining('an HTTP-date') as string,
        schema: { type: 'string' },
      },
    });
    const answer = await fetch(`${target.url}/payments`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': 'k' },
      body: JSON.stringify({ amount: 5 }),
    });
    expect(answer.headers.get('idempotency-expires')).toMatch(/ GMT$/);
  });

  it('`openApi: false` documents nothing, and requests still run idempotently', async () => {
    let document: OpenApiDocument;
    ({ target, document } = await documentOf('fastify', { openApi: false }));
    const operation = document.paths['/payments'].post;
    expect(keyHeader(operation)).toEqual([]);
    expect(Object.keys(operation.responses)).toEqual(['201']);
    const answer = await fetch(`${target.url}/payments`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ amount: 5 }),
    });
    expect(answer.status).toBe(400);
    expect(answer.headers.get('content-type')).toContain(PROBLEM);
  });
});
