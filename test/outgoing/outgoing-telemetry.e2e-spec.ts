import { SpanKind, SpanStatusCode, context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { createHash } from 'node:crypto';
import { derivedKeyOf } from '../utils/derived-keys.js';
import { send, startTestApp, type TestApp } from '../utils/test-app.js';
import { PayFaults, outgoingModule } from './outgoing.module.js';
import { ScriptedDownstream } from './scripted-downstream.js';

const spans = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({
  spanProcessors: [new SimpleSpanProcessor(spans)],
});
const contextManager = new AsyncLocalStorageContextManager();

/** The key hash spans carry: the first 16 hex digits of its sha256. */
const keyHash = (key: string) =>
  createHash('sha256').update(key).digest('hex').slice(0, 16);

describe('IdempotencyContext.fetch(): the span of an outgoing call', () => {
  let downstream: ScriptedDownstream;
  let target: TestApp;

  beforeAll(async () => {
    context.setGlobalContextManager(contextManager.enable());
    trace.setGlobalTracerProvider(tracerProvider);
    downstream = await new ScriptedDownstream().start();
    target = await startTestApp({
      imports: [outgoingModule(downstream.url)],
      idempotency: {
        outgoing: { retry: { baseDelayMs: 1, maxDelayMs: 10 } },
      },
    });
  });
  afterAll(async () => {
    await target.close();
    await downstream.stop();
    trace.disable();
    context.disable();
    await tracerProvider.shutdown();
  });
  beforeEach(() => spans.reset());

  const pay = (key: string, extra: object = {}) =>
    send(target, '/pay', {
      key,
      body: { amount: 700, reference: key, ...extra },
    });
  const named = (name: string): ReadableSpan[] =>
    spans.getFinishedSpans().filter((span) => span.name === name);

  it('is a client span under the handler’s, with the derived key hashed and the resends counted', async () => {
    downstream.script('traced', '503', 'drop');
    expect((await pay('traced')).status).toBe(201);
    const derived = await derivedKeyOf(target.db, 'traced');
    expect(downstream.callsWith('traced').map((call) => call.key)).toEqual([
      derived,
      derived,
      derived,
    ]);
    const [call] = named('idempotency.call');
    const [handler] = named('idempotency.handler');
    expect(call.parentSpanContext?.spanId).toBe(handler.spanContext().spanId);
    expect(call.kind).toBe(SpanKind.CLIENT);
    expect(call.attributes).toEqual({
      'idempotency.step': 'charge',
      'http.request.method': 'POST',
      'url.full': `${downstream.url}/charges`,
      'server.address': '127.0.0.1',
      'idempotency.key.hash': keyHash(derived),
      'idempotency.call.result': 'succeeded',
      'http.response.status_code': 201,
      'http.request.resend_count': 2,
    });
    expect(call.status.code).toBe(SpanStatusCode.UNSET);
  });

  it('records a refusal as an error, with the status that ended it', async () => {
    downstream.script('declined', '400');
    expect((await pay('declined')).status).toBe(502);
    const [call] = named('idempotency.call');
    expect(call.attributes).toMatchObject({
      'idempotency.call.result': 'refused',
      'http.response.status_code': 400,
      'http.request.resend_count': 0,
    });
    expect(call.status.code).toBe(SpanStatusCode.ERROR);
  });

  it('makes no span when the handler’s retry reuses the stored answer', async () => {
    target.app.get(PayFaults).failAfterCall.add('reused');
    expect((await pay('reused')).status).toBe(500);
    expect(named('idempotency.call')).toHaveLength(1);
    spans.reset();
    expect((await pay('reused')).status).toBe(201);
    expect(named('idempotency.handler')).toHaveLength(1);
    expect(named('idempotency.call')).toEqual([]);
  });
});
