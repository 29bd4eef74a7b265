/**
 * The central promise on every data library's adapter, over HTTP on
 * Express and Fastify: the payments handler's rows and its idempotency
 * record commit together or not at all, whatever fails and wherever.
 */
import { PLATFORMS } from '../utils/test-app.js';
import { startAdapterApp, type AdapterApp } from './adapter-app.js';
import { ADAPTERS } from './adapters.js';
import { describePaymentsPromise } from './payments-promise.js';

describe.each(ADAPTERS.map((fixture) => [fixture.name, fixture] as const))(
  'payments on %s',
  (_name, fixture) => {
    describe.each(PLATFORMS)('on %s', (platform) => {
      let target: AdapterApp;

      beforeAll(async () => {
        target = await startAdapterApp(fixture, { platform });
      });
      afterAll(() => target?.close());

      describePaymentsPromise(() => target);
    });
  },
);
