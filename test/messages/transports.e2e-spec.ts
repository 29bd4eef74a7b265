import {
  MqttRecordBuilder,
  Transport,
  type ClientOptions,
} from '@nestjs/microservices';
import { createServer } from 'node:net';
import { describeWithBroker } from '../utils/broker.js';
import { startMessageApp, type MessageApp } from './message-app.js';
import { KEY_SUBJECTS, KeyHandlers, KeysTestModule } from './keys.module.js';
import {
  OBJECT_PATTERN,
  REFUND_PATTERN,
  ObjectPatternRuns,
  ObjectPatternsModule,
} from './object-patterns.module.js';
import type { IdempotencyEvent } from '../../src/index.js';
import { until } from '../utils/barrier.js';
import { lastValueFrom } from 'rxjs';

/** A port nothing listens on now. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const describeRedis = await describeWithBroker('Redis', '127.0.0.1', 6379);
const describeMqtt = await describeWithBroker('MQTT', '127.0.0.1', 1883);

/** TCP needs no broker; Redis pub/sub runs on the machine's Redis. */
const TRANSPORTS: ReadonlyArray<
  [typeof describe, string, () => Promise<ClientOptions>]
> = [
  [
    describe,
    'TCP',
    async () => ({
      transport: Transport.TCP,
      options: { host: '127.0.0.1', port: await freePort() },
    }),
  ],
  [
    describeRedis,
    'Redis',
    () =>
      Promise.resolve({
        transport: Transport.REDIS,
        options: { host: '127.0.0.1', port: 6379 },
      }),
  ],
];

for (const [describeIf, name, transport] of TRANSPORTS) {
  describeIf(
    `@Idempotent() on ${name} message handlers (the key in the data)`,
    () => {
      let app: MessageApp;
      const events: IdempotencyEvent[] = [];

      beforeAll(async () => {
        app = await startMessageApp(
          {
            imports: [KeysTestModule, ObjectPatternsModule],
            idempotency: { onEvent: (event) => events.push(event) },
          },
          await transport(),
        );
      });
      afterAll(() => app.close());

      it('runs a message once and replays its reply to a duplicate', async () => {
        const message = {
          idempotencyKey: `${name}-1`,
          reference: `${name}-ref-1`,
        };
        const first = await app.request(KEY_SUBJECTS.keyed, message);
        const again = await app.request(KEY_SUBJECTS.keyed, message);
        expect(first.reply).toEqual({ orderId: expect.any(Number), run: 1 });
        expect(again.reply).toEqual(first.reply);
        expect(app.target.app.get(KeyHandlers).runs).toBe(1);
        expect(await app.orders(`${name}-ref-1`)).toBe(1);
        expect(
          await app.target.db.query(
            'SELECT method, path FROM idempotency_records WHERE key = $1',
            [`${name}-1`],
          ),
        ).toEqual([{ method: 'MESSAGE', path: KEY_SUBJECTS.keyed }]);
      });

      it('names the key option, not a field it never read, when the option finds no key or an invalid one', async () => {
        const runs = app.target.app.get(KeyHandlers).runs;
        const missing = await app.request(KEY_SUBJECTS.byOption, {
          reference: `${name}-ref-3`,
        });
        const invalid = await app.request(KEY_SUBJECTS.byOption, {
          paymentId: '',
          reference: `${name}-ref-3`,
        });
        expect([missing.error, invalid.error]).toEqual([
          expect.objectContaining({
            type: 'urn:idempotency:missing-key',
            detail:
              'The "key" option found no idempotency key for this operation.',
          }),
          expect.objectContaining({
            type: 'urn:idempotency:invalid-key',
            detail:
              'The key of the "key" option is invalid: it must be 1 to 255 characters long.',
          }),
        ]);
        expect(app.target.app.get(KeyHandlers).runs).toBe(runs);
        expect(await app.orders(`${name}-ref-3`)).toBe(0);
      });

      it('runs an event once in each of two handlers of one object pattern written in two orders, each under a key of its own', async () => {
        const key = `${name}-object-1`;
        const message = { idempotencyKey: key, reference: `${name}-ref-4` };
        for (let copy = 0; copy < 3; copy += 1) {
          await lastValueFrom(app.client.emit(OBJECT_PATTERN, message), {
            defaultValue: undefined,
          });
        }
        const ofKey = () => events.filter((e) => e.key?.startsWith(key));
        await until(async () => ofKey().length === 6, 'six deliveries');
        expect(
          ofKey()
            .map((e) => `${e.key} ${e.type}`)
            .sort(),
        ).toEqual([
          `${key}#PaidAudit.audit executed`,
          `${key}#PaidAudit.audit replayed`,
          `${key}#PaidAudit.audit replayed`,
          `${key}#PaidLedger.ledger executed`,
          `${key}#PaidLedger.ledger replayed`,
          `${key}#PaidLedger.ledger replayed`,
        ]);
        expect(app.target.app.get(ObjectPatternRuns).runs).toBe(2);
        expect(
          await app.target.db.query(
            'SELECT source FROM orders WHERE reference = $1 ORDER BY source',
            [`${name}-ref-4`],
          ),
        ).toEqual([{ source: 'audit' }, { source: 'ledger' }]);
      });

      it("replays a request to a duplicate that writes its object pattern's fields in another order, which Nest routes to the same handler", async () => {
        const runs = app.target.app.get(ObjectPatternRuns);
        const before = runs.refunds;
        const message = {
          idempotencyKey: `${name}-refund-1`,
          reference: 'r-1',
        };
        const first = await app.request(REFUND_PATTERN as never, message);
        const again = await app.request(
          {
            action: REFUND_PATTERN.action,
            entity: REFUND_PATTERN.entity,
          } as never,
          message,
        );
        expect([first, again]).toEqual([
          { reply: { refunded: 'r-1', run: before + 1 } },
          { reply: { refunded: 'r-1', run: before + 1 } },
        ]);
        expect(runs.refunds - before).toBe(1);
      });

      it("runs a keyless message in the handler's transaction: its failure commits nothing", async () => {
        const failed = await app.request(KEY_SUBJECTS.failing, {
          reference: `${name}-ref-2`,
        });
        expect(failed.error).toMatchObject({
          message: 'Internal server error',
        });
        expect(await app.orders(`${name}-ref-2`)).toBe(0);
      });
    },
  );
}

describeMqtt(
  '@Idempotent() on MQTT 5 message handlers (the key in a user property)',
  () => {
    let app: MessageApp;

    beforeAll(async () => {
      app = await startMessageApp(
        {
          imports: [KeysTestModule],
          idempotency: { headerName: 'X-Request-Id' },
        },
        {
          transport: Transport.MQTT,
          options: { url: 'mqtt://127.0.0.1:1883', protocolVersion: 5 },
        },
      );
    });
    afterAll(() => app.close());

    /** The reply to a message whose user properties are `properties`. */
    const request = (
      reference: string,
      properties: Record<string, string | string[]>,
      subject = KEY_SUBJECTS.keyed,
    ) =>
      app.request(
        subject,
        new MqttRecordBuilder({ reference })
          .setProperties({ userProperties: properties })
          .build(),
      );
    const keys = async () =>
      (
        await app.target.db.query<{ key: string }>(
          'SELECT key FROM idempotency_records ORDER BY key',
        )
      ).map((row) => row.key);

    it('takes the key from the user property that headerName names, else Idempotency-Key', async () => {
      const first = await request('mqtt-1', { 'X-Request-Id': 'mqtt-key-1' });
      expect(first.reply).toEqual({ orderId: expect.any(Number), run: 1 });
      expect(await request('mqtt-1', { 'X-Request-Id': 'mqtt-key-1' })).toEqual(
        first,
      );
      const legacy = await request('mqtt-2', {
        'Idempotency-Key': 'mqtt-key-2',
      });
      expect(
        await request('mqtt-2', { 'Idempotency-Key': 'mqtt-key-2' }),
      ).toEqual(legacy);
      expect(app.target.app.get(KeyHandlers).runs).toBe(2);
      expect(await keys()).toEqual(['mqtt-key-1', 'mqtt-key-2']);
    });

    it('refuses a key user property sent twice as repeated, as HTTP does, and reads a quoted one unquoted', async () => {
      const handlers = app.target.app.get(KeyHandlers);
      const runs = handlers.runs;
      const refused = await request(
        'mqtt-4',
        { 'X-Request-Id': ['mqtt-key-4', 'mqtt-key-5'] },
        KEY_SUBJECTS.optional,
      );
      expect(refused.error).toMatchObject({
        type: 'urn:idempotency:invalid-key',
        status: 400,
        detail: 'The "X-Request-Id" header is invalid: it is repeated.',
      });
      expect(handlers.runs).toBe(runs);
      expect(await app.orders('mqtt-4')).toBe(0);

      const quoted = await request('mqtt-6', {
        'X-Request-Id': '"mqtt-key-6"',
      });
      expect(quoted.reply).toEqual({
        orderId: expect.any(Number),
        run: runs + 1,
      });
      expect(await request('mqtt-6', { 'X-Request-Id': 'mqtt-key-6' })).toEqual(
        quoted,
      );
      expect(handlers.runs).toBe(runs + 1);
      expect(await keys()).toContain('mqtt-key-6');
    });

    it('refuses an empty key user property as an invalid key, as HTTP does, where no key is required: it runs nothing', async () => {
      const handlers = app.target.app.get(KeyHandlers);
      const [runs, stored] = [handlers.runs, await keys()];
      for (let copy = 0; copy < 2; copy += 1) {
        const refused = await request(
          'mqtt-3',
          { 'X-Request-Id': '' },
          KEY_SUBJECTS.optional,
        );
        expect(refused.error).toMatchObject({
          type: 'urn:idempotency:invalid-key',
          status: 400,
          detail:
            'The "X-Request-Id" header is invalid: it must be 1 to 255 characters long.',
        });
      }
      expect(handlers.runs).toBe(runs);
      expect(await app.orders('mqtt-3')).toBe(0);
      expect(await keys()).toEqual(stored);
    });
  },
);
