import {
  SpanStatusCode,
  context,
  metrics,
  trace,
  type HrTime,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  DataPointType,
  MeterProvider,
  MetricReader,
  type DataPoint,
  type Histogram,
  type MetricData,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { randomUUID } from 'node:crypto';
import {
  IdempotencyService,
  IdempotencyUnavailableException,
  type IdempotencyEvent,
} from '../../src/index.js';
import { READ_HOLDER } from '../../src/stores/postgres/postgres-statements.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';
import { REQUEST_ID_HEADER, traceRequests } from '../utils/server-spans.js';
import {
  StatementFaults,
  typeormPool,
  type Statement,
} from '../utils/statement-faults.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import {
  Gate,
  keyHash as hash,
  TelemetryTestModule,
  USER_HEADER,
  userScope as scope,
} from './telemetry.module.js';

/** A reader that exports nothing by itself: the spec collects when it reads. */
class CollectingReader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

const SCOPE = 'nestjs-idempotency';
const CLAIM = 'idempotency.claim';
const HANDLER = 'idempotency.handler';
const COMMIT = 'idempotency.commit';
const REPLAY = 'idempotency.replay';

const MILLISECOND = 1_000_000n;
const nanoseconds = ([seconds, nanos]: HrTime) =>
  BigInt(seconds) * 1_000_000_000n + BigInt(nanos);

const route = (path: string) => ({
  'http.request.method': 'POST',
  'http.route': path,
});

const spans = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({
  spanProcessors: [new SimpleSpanProcessor(spans)],
});
const contextManager = new AsyncLocalStorageContextManager();

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
  trace.setGlobalTracerProvider(tracerProvider);
});

afterAll(async () => {
  trace.disable();
  context.disable();
  metrics.disable();
  await tracerProvider.shutdown();
});

/** The spans whose parent is `parent`, by name (each name once). */
function childrenOf(parent: ReadableSpan): Record<string, ReadableSpan> {
  const children: Record<string, ReadableSpan> = {};
  for (const span of spans.getFinishedSpans()) {
    if (span.parentSpanContext?.spanId === parent.spanContext().spanId) {
      expect(children[span.name]).toBeUndefined();
      children[span.name] = span;
    }
  }
  return children;
}

describe.each(PLATFORMS)('OpenTelemetry (%s)', (platform) => {
  let target: TestApp;
  let reader: CollectingReader;
  let meterProvider: MeterProvider;
  let serverSpanEnded: (requestId: string) => Promise<void>;
  /** Every key and user sent: none may show in a metric, nor raw in a span. */
  const secrets: string[] = [];
  /** What the module reported (`onEvent`). */
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    reader = new CollectingReader();
    meterProvider = new MeterProvider({ readers: [reader] });
    // Each platform's app gets a meter provider of its own.
    metrics.disable();
    metrics.setGlobalMeterProvider(meterProvider);
    target = await startTestApp({
      platform,
      imports: [TelemetryTestModule],
      idempotency: { gc: false, scope, onEvent: (event) => events.push(event) },
    });
    serverSpanEnded = traceRequests(
      target.app.getHttpServer(),
      trace.getTracer('test-server'),
    );
  });
  afterAll(async () => {
    await target.close();
    await meterProvider.shutdown();
  });

  /**
   * POSTs to the app as `user` and waits for the request's server span to
   * end: its idempotency spans ended before it.
   */
  async function post(
    path: string,
    key: string,
    body: { reference: string },
    user = 'user-7f3a',
    method = 'POST',
  ) {
    secrets.push(key, user);
    const requestId = randomUUID();
    const response = await send(target, path, {
      method,
      key,
      body,
      headers: { [REQUEST_ID_HEADER]: requestId, [USER_HEADER]: user },
    });
    const text = await response.text();
    await serverSpanEnded(requestId);
    const server = spans
      .getFinishedSpans()
      .find((span) => span.attributes['test.request'] === requestId);
    expect(server).toBeDefined();
    return { response, text, server: server!, children: childrenOf(server!) };
  }

  /** The data points of one of the module's instruments. */
  async function points(name: string): Promise<MetricData['dataPoints']> {
    const { resourceMetrics, errors } = await reader.collect();
    expect(errors).toEqual([]);
    const metric = resourceMetrics.scopeMetrics
      .filter((scopeMetrics) => scopeMetrics.scope.name === SCOPE)
      .flatMap((scopeMetrics) => scopeMetrics.metrics)
      .find((data) => data.descriptor.name === name);
    return metric?.dataPoints ?? [];
  }

  /**
   * Counts of an instrument's points whose attributes include `filter`, by
   * the value of attribute `by`: the sum of a counter, the count of a
   * histogram.
   */
  async function counts(
    name: string,
    filter: Record<string, string>,
    by = 'idempotency.outcome',
  ): Promise<Record<string, number>> {
    const result: Record<string, number> = {};
    for (const point of await points(name)) {
      const { attributes } = point;
      if (Object.entries(filter).every(([k, v]) => attributes[k] === v)) {
        const value = (point as DataPoint<number | Histogram>).value;
        result[String(attributes[by])] =
          typeof value === 'number' ? value : value.count;
      }
    }
    return result;
  }

  it('records the claim, the handler and the commit of a first execution under the request span, and the replay of its duplicate', async () => {
    const key = `otel-order-${platform}`;
    const first = await post('/telemetry/orders', key, { reference: key });
    expect(first.response.status).toBe(201);

    const {
      [CLAIM]: claim,
      [HANDLER]: handler,
      [COMMIT]: commit,
    } = first.children;
    expect(Object.keys(first.children).sort()).toEqual([
      CLAIM,
      COMMIT,
      HANDLER,
    ]);
    const attributes = {
      ...route('/telemetry/orders'),
      'idempotency.key.hash': hash(key),
    };
    expect(claim.attributes).toEqual({
      ...attributes,
      'idempotency.claim.result': 'claimed',
    });
    expect(handler.attributes).toEqual(attributes);
    expect(commit.attributes).toEqual({
      ...attributes,
      'idempotency.outcome': 'executed',
    });
    for (const span of [claim, handler, commit]) {
      expect(span.status.code).toBe(SpanStatusCode.UNSET);
      expect(span.spanContext().traceId).toBe(
        first.server.spanContext().traceId,
      );
    }
    expect(first.server.attributes['idempotency.outcome']).toBe('executed');
    // One after the other: claim, handler, commit. (The SDK anchors each
    // span on Date.now(): their clocks agree to a millisecond.)
    expect(nanoseconds(claim.endTime)).toBeLessThanOrEqual(
      nanoseconds(handler.startTime) + MILLISECOND,
    );
    expect(nanoseconds(handler.endTime)).toBeLessThanOrEqual(
      nanoseconds(commit.startTime) + MILLISECOND,
    );
    // The handler's span is the active one while it runs.
    expect(Object.keys(childrenOf(handler))).toEqual(['orders.insert']);

    const second = await post('/telemetry/orders', key, { reference: key });
    expect(second.response.status).toBe(201);
    expect(second.response.headers.get('idempotent-replayed')).toBe('true');
    expect(second.text).toBe(first.text);
    expect(Object.keys(second.children).sort()).toEqual([CLAIM, REPLAY]);
    expect(second.children[CLAIM].attributes).toEqual({
      ...attributes,
      'idempotency.claim.result': 'finished',
    });
    expect(second.children[REPLAY].attributes).toEqual({
      ...attributes,
      'idempotency.outcome': 'replayed',
    });
    expect(second.server.attributes['idempotency.outcome']).toBe('replayed');

    expect(await target.db.query(`SELECT reference FROM orders`, [])).toEqual([
      { reference: key },
    ]);
    const orders = route('/telemetry/orders');
    expect(await counts('idempotency.requests', orders)).toEqual({
      executed: 1,
      replayed: 1,
    });
    expect(await counts('idempotency.request.duration', orders)).toEqual({
      executed: 1,
      replayed: 1,
    });
    expect(
      await counts(
        'idempotency.claim.duration',
        orders,
        'idempotency.claim.result',
      ),
    ).toEqual({ claimed: 1, finished: 1 });
    expect(await counts('idempotency.commit.duration', orders)).toEqual({
      executed: 1,
    });
  });

  it('records a conflict on the claim of a duplicate sent while the first runs', async () => {
    const gate = target.app.get(Gate);
    gate.barrier = new Barrier();
    const key = `otel-held-${platform}`;
    const first = post('/telemetry/held', key, { reference: key });
    await gate.barrier.reached(1);

    const duplicate = await post('/telemetry/held', key, { reference: key });
    expect(duplicate.response.status).toBe(409);
    expect(Object.keys(duplicate.children)).toEqual([CLAIM]);
    expect(duplicate.children[CLAIM].attributes).toEqual({
      ...route('/telemetry/held'),
      'idempotency.key.hash': hash(key),
      'idempotency.claim.result': 'conflict',
      'idempotency.outcome': 'conflict',
    });
    expect(duplicate.children[CLAIM].status.code).toBe(SpanStatusCode.UNSET);
    expect(duplicate.server.attributes['idempotency.outcome']).toBe('conflict');

    gate.barrier.open();
    const executed = await first;
    expect(executed.response.status).toBe(201);
    expect(executed.server.attributes['idempotency.outcome']).toBe('executed');
    expect(
      await counts('idempotency.requests', route('/telemetry/held')),
    ).toEqual({ conflict: 1, executed: 1 });
  });

  it('marks the handler span of a failing handler as an error, with its exception, and counts the outcome as an error', async () => {
    const key = `otel-declined-${platform}`;
    const declined = await post('/telemetry/declined', key, { reference: key });
    expect(declined.response.status).toBe(402);
    expect(Object.keys(declined.children).sort()).toEqual([CLAIM, HANDLER]);
    const handler = declined.children[HANDLER];
    expect(handler.status).toEqual({
      code: SpanStatusCode.ERROR,
      message: 'card declined',
    });
    expect(handler.events).toEqual([
      expect.objectContaining({
        name: 'exception',
        attributes: expect.objectContaining({
          'exception.type': 'HttpException',
          'exception.message': 'card declined',
        }),
      }),
    ]);
    expect(declined.server.attributes['idempotency.outcome']).toBe('error');
    expect(
      await target.db.query(`SELECT * FROM orders WHERE reference = $1`, [key]),
    ).toEqual([]);
    expect(
      await target.db.query(
        `SELECT * FROM idempotency_records WHERE key = $1`,
        [key],
      ),
    ).toEqual([]);
    expect(
      await counts('idempotency.requests', route('/telemetry/declined')),
    ).toEqual({ error: 1 });
  });

  it('ends the commit span of a handler that returned with its transaction aborted, and counts the outcome as an error', async () => {
    const key = `otel-swallowed-${platform}`;
    const swallowed = await post('/telemetry/swallowed', key, {
      reference: key,
    });
    expect(swallowed.response.status).toBe(500);
    expect(Object.keys(swallowed.children).sort()).toEqual([
      CLAIM,
      COMMIT,
      HANDLER,
    ]);
    const commit = swallowed.children[COMMIT];
    expect(commit.attributes).toEqual({
      ...route('/telemetry/swallowed'),
      'idempotency.key.hash': hash(key),
      'idempotency.outcome': 'error',
    });
    expect(commit.status).toEqual({
      code: SpanStatusCode.ERROR,
      message: 'error',
    });
    expect(swallowed.children[HANDLER].status.code).toBe(SpanStatusCode.UNSET);
    expect(swallowed.server.attributes['idempotency.outcome']).toBe('error');
    expect(
      await target.db.query(`SELECT * FROM orders WHERE reference = $1`, [key]),
    ).toEqual([]);
    expect(
      await target.db.query(
        `SELECT * FROM idempotency_records WHERE key = $1`,
        [key],
      ),
    ).toEqual([]);
    const swallowedRoute = route('/telemetry/swallowed');
    expect(await counts('idempotency.requests', swallowedRoute)).toEqual({
      error: 1,
    });
    expect(await counts('idempotency.commit.duration', swallowedRoute)).toEqual(
      { error: 1 },
    );
  });

  it('records a request of another HTTP method that changes state (WebDAV MOVE) by its HTTP method and route, as any HTTP request', async () => {
    const key = `otel-move-${platform}`;
    const moved = await post(
      `/telemetry/files/move-${platform}`,
      key,
      { reference: key },
      'user-7f3a',
      'MOVE',
    );
    expect(moved.response.status).toBe(200);
    const route = {
      'http.request.method': 'MOVE',
      'http.route': '/telemetry/files/:name',
    };
    expect(moved.children[CLAIM].attributes).toEqual({
      ...route,
      'idempotency.key.hash': hash(key),
      'idempotency.claim.result': 'claimed',
    });
    expect(await counts('idempotency.requests', route)).toEqual({
      executed: 1,
    });
  });

  it('records run() under the span active where it is called, by the name of the run', async () => {
    const service = target.app.get(IdempotencyService);
    const key = `otel-run-${platform}`;
    secrets.push(key, 'tenant-run-9');
    const jobs: string[] = [];
    const job = () =>
      trace.getTracer('test-job').startActiveSpan('job', async (span) => {
        jobs.push(span.spanContext().spanId);
        try {
          return await service.run(
            { key, scope: 'tenant-run-9', name: 'settle' },
            async (manager) => {
              await manager.insert(Order, { reference: key });
              return { settled: key };
            },
          );
        } finally {
          span.end();
        }
      });
    expect(await job()).toEqual({ settled: key });
    expect(await job()).toEqual({ settled: key });

    const [executed, replayed] = jobs.map((spanId) =>
      spans
        .getFinishedSpans()
        .find((span) => span.spanContext().spanId === spanId)!,
    );
    const run = {
      'idempotency.operation.type': 'run',
      'idempotency.operation.name': 'settle',
    };
    expect(Object.keys(childrenOf(executed)).sort()).toEqual([
      CLAIM,
      COMMIT,
      HANDLER,
    ]);
    expect(childrenOf(executed)[COMMIT].attributes).toEqual({
      ...run,
      'idempotency.key.hash': hash(key),
      'idempotency.outcome': 'executed',
    });
    expect(Object.keys(childrenOf(replayed)).sort()).toEqual([CLAIM, REPLAY]);
    expect(executed.attributes['idempotency.outcome']).toBe('executed');
    expect(replayed.attributes['idempotency.outcome']).toBe('replayed');
    expect(
      await target.db.query(`SELECT * FROM orders WHERE reference = $1`, [key]),
    ).toHaveLength(1);
    expect(await counts('idempotency.requests', run)).toEqual({
      executed: 1,
      replayed: 1,
    });
  });

  it('gives the spans of a run called outside any span a root span of their own, which carries the outcome', async () => {
    const service = target.app.get(IdempotencyService);
    const key = `otel-nightly-${platform}`;
    secrets.push(key);
    await service.run({ key, name: 'nightly' }, async (manager) => {
      await manager.insert(Order, { reference: key });
    });
    const roots = spans
      .getFinishedSpans()
      .filter(
        (span) =>
          span.name === 'idempotency.attempt' &&
          span.attributes['idempotency.key.hash'] === hash(key),
      );
    expect(roots).toHaveLength(1);
    const [root] = roots;
    expect(root.parentSpanContext).toBeUndefined();
    expect(root.attributes).toEqual({
      'idempotency.operation.type': 'run',
      'idempotency.operation.name': 'nightly',
      'idempotency.key.hash': hash(key),
      'idempotency.outcome': 'executed',
    });
    expect(Object.keys(childrenOf(root)).sort()).toEqual([
      CLAIM,
      COMMIT,
      HANDLER,
    ]);
  });

  it('ends the root span of a run whose claim kept finding its record changed, and counts and reports it as failed', async () => {
    const service = target.app.get(IdempotencyService);
    const key = `otel-rereads-${platform}`;
    secrets.push(key);
    const job = () =>
      service.run(
        { key, name: 'reread', fingerprint: 'payload-old' },
        () => 'done',
      );
    expect(await job()).toBe('done');
    // As 0.6 wrote it: the fingerprint function's value alone, which the
    // claim reads the record back for (its method and path).
    const fingerprint = (value: string) =>
      target.db.query(
        `UPDATE idempotency_records SET fingerprint = $1 WHERE key = $2`,
        [value, key],
      );
    await fingerprint('payload-old');
    const faults = await StatementFaults.install(
      typeormPool(target.dataSource),
      target.db.url,
    );
    const ofKey = (statement: Statement) => statement.values[1] === key;
    const isClaim = (statement: Statement) =>
      ofKey(statement) && statement.text.includes('async_commit');
    // The record read back (inspectRecord), not the claim's read of what
    // holds the key.
    const isReadBack = (statement: Statement) =>
      ofKey(statement) &&
      statement.text.includes('response_headers') &&
      statement.text !== READ_HOLDER.text;
    events.length = 0;
    try {
      // Each read back finds another fingerprint than its claim did, four
      // times: the claim gives up.
      let readBack = faults.hold(isReadBack);
      const failure = job().then(
        () => undefined,
        (error: unknown) => error,
      );
      for (let round = 1; ; round += 1) {
        await readBack.reached();
        await fingerprint('payload-new');
        if (round === 4) {
          readBack.release();
          break;
        }
        const claim = faults.hold(isClaim);
        readBack.release();
        await claim.reached();
        await fingerprint('payload-old');
        readBack = faults.hold(isReadBack);
        claim.release();
      }
      expect(await failure).toBeInstanceOf(IdempotencyUnavailableException);
    } finally {
      await faults.restore();
    }

    const roots = spans
      .getFinishedSpans()
      .filter(
        (span) =>
          span.name === 'idempotency.attempt' &&
          span.attributes['idempotency.key.hash'] === hash(key),
      );
    expect(roots.map((root) => root.attributes['idempotency.outcome'])).toEqual(
      ['executed', 'failed'],
    );
    const [, root] = roots;
    expect(root.status.code).toBe(SpanStatusCode.ERROR);
    expect(childrenOf(root)[CLAIM].attributes).toEqual({
      'idempotency.operation.type': 'run',
      'idempotency.operation.name': 'reread',
      'idempotency.key.hash': hash(key),
      'idempotency.claim.result': 'failed',
      'idempotency.outcome': 'failed',
    });
    expect(
      await counts('idempotency.requests', {
        'idempotency.operation.type': 'run',
        'idempotency.operation.name': 'reread',
      }),
    ).toEqual({ executed: 1, failed: 1 });
    expect(events).toEqual([
      expect.objectContaining({
        type: 'failed',
        key,
        method: 'RUN',
        path: 'reread',
        status: 503,
        error: expect.any(Error),
      }),
    ]);
  });

  it('puts no key and no scope in metric attributes, and only a hash of the key in spans', async () => {
    const { resourceMetrics } = await reader.collect();
    const ours = resourceMetrics.scopeMetrics
      .filter((scopeMetrics) => scopeMetrics.scope.name === SCOPE)
      .flatMap((scopeMetrics) => scopeMetrics.metrics);
    expect(
      ours
        .map(({ descriptor, dataPointType }) => ({
          name: descriptor.name,
          unit: descriptor.unit,
          histogram: dataPointType === DataPointType.HISTOGRAM,
        }))
        .sort((a, b) => a.name.localeCompare(b.name)),
    ).toEqual([
      { name: 'idempotency.claim.duration', unit: 's', histogram: true },
      { name: 'idempotency.commit.duration', unit: 's', histogram: true },
      { name: 'idempotency.request.duration', unit: 's', histogram: true },
      { name: 'idempotency.requests', unit: '{request}', histogram: false },
    ]);
    const attributes = ours.flatMap((metric) =>
      metric.dataPoints.map((point) => point.attributes),
    );
    expect(attributes.length).toBeGreaterThan(0);
    expect(
      [...new Set(attributes.flatMap((a) => Object.keys(a)))].sort(),
    ).toEqual([
      'http.request.method',
      'http.route',
      'idempotency.claim.result',
      'idempotency.operation.name',
      'idempotency.operation.type',
      'idempotency.outcome',
    ]);
    expect(secrets.length).toBeGreaterThan(0);
    const metricValues = JSON.stringify(attributes);
    const spanValues = JSON.stringify(
      spans.getFinishedSpans().map((span) => span.attributes),
    );
    for (const secret of secrets) {
      expect(metricValues).not.toContain(secret);
      expect(metricValues).not.toContain(hash(secret));
      expect(spanValues).not.toContain(secret);
    }
  });
});
