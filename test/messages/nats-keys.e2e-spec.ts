import { NatsRecordBuilder } from '@nestjs/microservices';
import { headers } from '@nats-io/transport-node';
import { Barrier } from '../utils/barrier.js';
import type { TestApp } from '../utils/test-app.js';
import { describeWithBroker } from '../utils/broker.js';
import {
  NATS_HOST,
  NATS_PORT,
  startMessageApp,
  type MessageApp,
} from './message-app.js';
import { KEY_SUBJECTS, KeyHandlers, KeysTestModule } from './keys.module.js';

const describeNats = await describeWithBroker('NATS', NATS_HOST, NATS_PORT);

describeNats(
  'Message keys from the headerName header, and keyless messages (NATS)',
  () => {
    let nats: MessageApp;
    let target: TestApp;
    let handlers: KeyHandlers;

    beforeAll(async () => {
      nats = await startMessageApp({
        imports: [KeysTestModule],
        idempotency: { headerName: 'X-Request-Id' },
      });
      ({ target } = nats);
      handlers = target.app.get(KeyHandlers);
    });
    afterAll(() => nats.close());
    beforeEach(() => {
      handlers.barrier = new Barrier();
      handlers.runs = 0;
    });

    /**
     * The reply of a request with these headers (a list: the values of one
     * name, appended), or the error given back.
     */
    const request = (
      subject: string,
      data: unknown,
      with_: Record<string, string | string[]> = {},
    ) => {
      const natsHeaders = headers();
      for (const [name, value] of Object.entries(with_)) {
        for (const one of [value].flat()) {
          natsHeaders.append(name, one);
        }
      }
      return nats.request(
        subject,
        new NatsRecordBuilder(data).setHeaders(natsHeaders).build(),
      );
    };
    const rows = (reference: string) => nats.orders(reference);
    const records = async (key: string) =>
      (
        await target.db.query(
          'SELECT status FROM idempotency_records WHERE key = $1',
          [key],
        )
      ).map((row) => row.status);

    it('takes the key from the header that headerName names', async () => {
      const message = { reference: 'header-1' };
      const first = await request(KEY_SUBJECTS.keyed, message, {
        'X-Request-Id': 'header-key-1',
      });
      expect(first.reply).toEqual({ orderId: expect.any(Number), run: 1 });
      const again = await request(KEY_SUBJECTS.keyed, message, {
        'X-Request-Id': 'header-key-1',
      });
      expect(again.reply).toEqual(first.reply);
      expect(handlers.runs).toBe(1);
      expect(await rows('header-1')).toBe(1);
      expect(await records('header-key-1')).toEqual(['completed']);
    });

    it('still reads the Idempotency-Key header that messages were read by before', async () => {
      const message = { reference: 'header-2' };
      const first = await request(KEY_SUBJECTS.keyed, message, {
        'Idempotency-Key': 'header-key-2',
      });
      const again = await request(KEY_SUBJECTS.keyed, message, {
        'Idempotency-Key': 'header-key-2',
      });
      expect(again.reply).toEqual(first.reply);
      expect(handlers.runs).toBe(1);
      expect(await records('header-key-2')).toEqual(['completed']);
    });

    it('reads the key headers case aside, as on the other transports', async () => {
      const message = { reference: 'header-5' };
      const first = await request(KEY_SUBJECTS.keyed, message, {
        'x-request-id': 'header-key-5',
      });
      expect(first.reply).toEqual({ orderId: expect.any(Number), run: 1 });
      const again = await request(KEY_SUBJECTS.keyed, message, {
        'X-REQUEST-ID': 'header-key-5',
      });
      expect(again.reply).toEqual(first.reply);
      const legacy = await request(
        KEY_SUBJECTS.keyed,
        { reference: 'header-6' },
        { 'idempotency-key': 'header-key-6' },
      );
      expect(legacy.reply).toEqual({ orderId: expect.any(Number), run: 2 });
      expect(handlers.runs).toBe(2);
      expect(await records('header-key-5')).toEqual(['completed']);
      expect(await records('header-key-6')).toEqual(['completed']);
    });

    it('prefers the headerName header to Idempotency-Key', async () => {
      await request(
        KEY_SUBJECTS.keyed,
        { reference: 'header-3' },
        { 'X-Request-Id': 'header-key-3', 'Idempotency-Key': 'legacy-key-3' },
      );
      expect(await records('header-key-3')).toEqual(['completed']);
      expect(await records('legacy-key-3')).toEqual([]);
    });

    /** The records of the key routes' messages. */
    const routeRecords = () =>
      target.db.query(
        `SELECT key FROM idempotency_records WHERE path = ANY($1) ORDER BY key`,
        [[KEY_SUBJECTS.keyed, KEY_SUBJECTS.optional]],
      );

    it.each(['X-Request-Id', 'Idempotency-Key'])(
      'refuses an empty %s header as an invalid key, as HTTP does, where a key is not required too: it runs nothing and stores nothing',
      async (name) => {
        const before = await routeRecords();
        for (const subject of [KEY_SUBJECTS.optional, KEY_SUBJECTS.keyed]) {
          for (let copy = 0; copy < 2; copy += 1) {
            const refused = await request(
              subject,
              { reference: 'empty-1' },
              { [name]: '' },
            );
            expect(refused.error).toMatchObject({
              type: 'urn:idempotency:invalid-key',
              status: 400,
              detail: `The "${name}" header is invalid: it must be 1 to 255 characters long.`,
            });
          }
        }
        expect(handlers.runs).toBe(0);
        expect(await rows('empty-1')).toBe(0);
        expect(await routeRecords()).toEqual(before);
      },
    );

    it.each<[string, Record<string, string | string[]>]>([
      ['with two values', { 'X-Request-Id': ['dup-1', 'dup-2'] }],
      ['twice with one value', { 'X-Request-Id': ['dup-3', 'dup-3'] }],
      [
        'under two spellings of its name',
        { 'X-Request-Id': 'case-1', 'x-request-id': 'case-2' },
      ],
    ])(
      'refuses a key header sent %s as repeated, as HTTP does: it runs nothing',
      async (_how, sent) => {
        const before = await routeRecords();
        for (const subject of [KEY_SUBJECTS.keyed, KEY_SUBJECTS.optional]) {
          const refused = await request(
            subject,
            { reference: 'repeated-1' },
            sent,
          );
          expect(refused.error).toMatchObject({
            type: 'urn:idempotency:invalid-key',
            status: 400,
            detail: 'The "X-Request-Id" header is invalid: it is repeated.',
          });
        }
        expect(handlers.runs).toBe(0);
        expect(await rows('repeated-1')).toBe(0);
        expect(await routeRecords()).toEqual(before);
      },
    );

    it('reads a quoted key header as HTTP does: "quoted-1" and quoted-1 are one key', async () => {
      const message = { reference: 'quoted-1' };
      const first = await request(KEY_SUBJECTS.keyed, message, {
        'X-Request-Id': '"quoted-1"',
      });
      expect(first.reply).toEqual({ orderId: expect.any(Number), run: 1 });
      const again = await request(KEY_SUBJECTS.keyed, message, {
        'X-Request-Id': 'quoted-1',
      });
      expect(again.reply).toEqual(first.reply);
      expect(handlers.runs).toBe(1);
      expect(await records('quoted-1')).toEqual(['completed']);
      expect(await records('"quoted-1"')).toEqual([]);

      const malformed = await request(
        KEY_SUBJECTS.keyed,
        { reference: 'quoted-2' },
        { 'X-Request-Id': '"quoted-2' },
      );
      expect(malformed.error).toMatchObject({
        type: 'urn:idempotency:invalid-key',
        status: 400,
        detail:
          'The "X-Request-Id" header is invalid: it is not a valid quoted string.',
      });
      expect(handlers.runs).toBe(1);
      expect(await rows('quoted-2')).toBe(0);
    });

    it('refuses a message without a key where one is required', async () => {
      const keyless = await request(KEY_SUBJECTS.keyed, {
        reference: 'header-4',
      });
      expect(keyless.error).toMatchObject({
        type: 'urn:idempotency:missing-key',
        status: 400,
      });
      expect(handlers.runs).toBe(0);
      expect(await rows('header-4')).toBe(0);
    });

    it('runs a keyless message on a route that does not require a key, storing no record', async () => {
      const first = await request(KEY_SUBJECTS.optional, {
        reference: 'free-1',
      });
      const second = await request(KEY_SUBJECTS.optional, {
        reference: 'free-1',
      });
      expect(first.reply).toEqual({ orderId: expect.any(Number), run: 1 });
      expect(second.reply).toEqual({ orderId: expect.any(Number), run: 2 });
      expect(await rows('free-1')).toBe(2);
      expect(
        await target.db.query(
          `SELECT 1 FROM idempotency_records WHERE path = $1`,
          [KEY_SUBJECTS.optional],
        ),
      ).toEqual([]);
    });

    it("runs a keyless message in the handler's transaction: a failure commits none of its writes", async () => {
      const failed = await request(KEY_SUBJECTS.failing, {
        reference: 'free-2',
      });
      expect(failed.error).toMatchObject({ message: 'Internal server error' });
      expect(handlers.runs).toBe(1);
      expect(await rows('free-2')).toBe(0);
    });

    it('abandons a keyless message at its deadline: a 503, and nothing it wrote commits', async () => {
      const late = await request(KEY_SUBJECTS.slow, { reference: 'free-3' });
      expect(late.error).toMatchObject({
        type: 'urn:idempotency:unavailable',
        status: 503,
      });
      handlers.barrier.open();
      expect(handlers.runs).toBe(1);
      expect(await rows('free-3')).toBe(0);
    });
  },
);
