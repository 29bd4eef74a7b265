import {
  Body,
  Controller,
  Inject,
  Injectable,
  InternalServerErrorException,
  Module,
  Post,
  type ExecutionContext,
} from '@nestjs/common';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { DERIVED_KEY, derivedKeyOf } from '../utils/derived-keys.js';
import { FakeGateway, requestCharge } from '../utils/fake-gateway.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';

const GATEWAY_URL = Symbol('GATEWAY_URL');

/** Requests whose handler fails once, after its gateway call. */
@Injectable()
class ChargeFaults {
  readonly failAfterCall = new Set<string>();
}

interface ChargeBody {
  amount: number;
  reference: string;
}

/**
 * Charges a gateway that deduplicates by key, as real ones do, with the
 * derived key of the request; the call made outside of any step, so that a
 * failure after it leaves no recovery point behind: the derived key alone
 * must keep the retry from charging twice.
 */
@Controller('derived')
class DerivedController {
  constructor(
    private readonly idempotency: IdempotencyContext,
    private readonly faults: ChargeFaults,
    @Inject(GATEWAY_URL) private readonly gateway: string,
  ) {}

  @Post()
  @Idempotent()
  async charge(@Body() body: ChargeBody) {
    const key = this.idempotency.deriveKey('charge');
    const charge = await requestCharge(this.gateway, body.amount, key);
    if (this.faults.failAfterCall.delete(body.reference)) {
      throw new InternalServerErrorException('failed after the charge');
    }
    return { key, charge };
  }

  /** Fails before any call downstream. */
  @Post('early')
  @Idempotent()
  early(): never {
    throw new InternalServerErrorException('failed before any call');
  }

  /**
   * Calls `fetch()` with a URL it refuses before sending anything (another
   * scheme): a configuration error, nothing called downstream.
   */
  @Post('unsendable')
  @Idempotent()
  async unsendable(): Promise<never> {
    await this.idempotency.fetch('charge', 'ftp://gateway.example/charges', {
      method: 'POST',
      body: '{"amount":1}',
    });
    throw new InternalServerErrorException('fetch() did not refuse the URL');
  }

  /**
   * Calls `fetch()` under a step name its step refuses before sending
   * anything (longer than a store keeps): a configuration error.
   */
  @Post('unnamed')
  @Idempotent()
  async unnamed(): Promise<never> {
    await this.idempotency.fetch('charge'.repeat(500), this.gateway, {
      method: 'POST',
      body: '{"amount":1}',
    });
    throw new InternalServerErrorException('fetch() did not refuse the name');
  }
}

function derivedModule(gatewayUrl: string) {
  @Module({
    controllers: [DerivedController],
    providers: [ChargeFaults, { provide: GATEWAY_URL, useValue: gatewayUrl }],
  })
  class DerivedModule {}
  return DerivedModule;
}

const tenantOf = (context: ExecutionContext) =>
  String(
    context.switchToHttp().getRequest<{ headers: Record<string, string> }>()
      .headers['x-tenant'],
  );

describe.each(PLATFORMS)(
  'derived keys of downstream calls (%s)',
  (platform) => {
    let gateway: FakeGateway;
    let target: TestApp;
    let faults: ChargeFaults;

    beforeAll(async () => {
      gateway = await new FakeGateway().start();
      target = await startTestApp({
        platform,
        imports: [derivedModule(gateway.url)],
        idempotency: { scope: tenantOf },
      });
      faults = target.app.get(ChargeFaults);
    });
    afterAll(async () => {
      await target?.close();
      await gateway?.stop();
    });

    const charge = (
      tenant: string,
      key: string,
      amount: number,
      reference = key,
    ) =>
      send(target, '/derived', {
        key,
        headers: { 'X-Tenant': tenant },
        body: { amount, reference },
      });
    type Charged = { key: string; charge: { id: string; amount: number } };

    it('derives another key in another scope: two tenants with one client key get two charges, each of its own amount', async () => {
      const a = await charge(`${platform}-a`, 'shared', 100);
      const b = await charge(`${platform}-b`, 'shared', 999);
      expect([a.status, b.status]).toEqual([201, 201]);
      const [bodyA, bodyB] = (await Promise.all([a.json(), b.json()])) as [
        Charged,
        Charged,
      ];
      expect(bodyA.key).not.toBe(bodyB.key);
      expect(bodyA.charge.id).not.toBe(bodyB.charge.id);
      expect([bodyA.charge.amount, bodyB.charge.amount]).toEqual([100, 999]);
      expect([
        gateway.calls.get(bodyA.key),
        gateway.calls.get(bodyB.key),
      ]).toEqual([1, 1]);
      expect(bodyA.key).toBe(
        await derivedKeyOf(target.db, 'shared', 'charge', `${platform}-a`),
      );
    });

    it('derives a key of 36 characters, a UUID, from a key of 255', async () => {
      const key = 'k'.repeat(255);
      const response = await charge(platform, key, 5);
      expect(response.status).toBe(201);
      const body = (await response.json()) as Charged;
      expect(body.key).toMatch(DERIVED_KEY);
      expect(body.key).not.toContain('kkk');
    });

    it('derives a new key once the key expired and is used again: the same body charges again', async () => {
      const key = `${platform}-expiring`;
      const first = (await (await charge(platform, key, 42)).json()) as Charged;
      await target.db.query(
        `UPDATE idempotency_records SET expires_at = now() - interval '1 minute' WHERE key = $1`,
        [key],
      );
      const again = await charge(platform, key, 42);
      expect(again.status).toBe(201);
      expect(again.headers.get('idempotent-replayed')).toBeNull();
      const second = (await again.json()) as Charged;
      expect(second.key).not.toBe(first.key);
      expect(second.charge.id).not.toBe(first.charge.id);
      expect(second.key).toBe(await derivedKeyOf(target.db, key));
    });

    it('keeps the key of a failed attempt whose call went through for its retry (one charge); another body under the key is refused with 422 and calls nothing', async () => {
      const key = `${platform}-failed`;
      const reference = `${platform}-failed-ref`;
      faults.failAfterCall.add(reference);
      const failed = await charge(platform, key, 70, reference);
      expect(failed.status).toBe(500);
      const charges = gateway.chargeCount;
      const calls = gateway.received.length;

      // The key now belongs to the request whose call went through: another
      // body under it would charge another amount, and leave the first
      // charge unbooked.
      const other = await charge(platform, key, 71, reference);
      expect(other.status).toBe(422);
      expect(gateway.received.length).toBe(calls);

      const retried = await charge(platform, key, 70, reference);
      expect(retried.status).toBe(201);
      const retry = (await retried.json()) as Charged;
      expect(gateway.calls.get(retry.key)).toBe(2);
      expect(gateway.chargeCount).toBe(charges);
      expect(retry.key).toBe(await derivedKeyOf(target.db, key));
      expect(retry.charge.amount).toBe(70);
    });

    it('frees a key whose failed attempt called nothing for any body', async () => {
      const key = `${platform}-failed-early`;
      const response = await send(target, '/derived/early', {
        key,
        headers: { 'X-Tenant': platform },
        body: { amount: 1, reference: key },
      });
      expect(response.status).toBe(500);
      const other = await charge(platform, key, 2, key);
      expect(other.status).toBe(201);
      expect(((await other.json()) as Charged).charge.amount).toBe(2);
    });

    it.each([
      ['a URL of another scheme', 'unsendable'],
      ['a step name too long', 'unnamed'],
    ])(
      'frees a key whose fetch() was refused before it sent anything (%s), for any body',
      async (_refusal, route) => {
        const key = `${platform}-${route}`;
        const calls = gateway.received.length;
        const response = await send(target, `/derived/${route}`, {
          key,
          headers: { 'X-Tenant': platform },
          body: { amount: 1, reference: key },
        });
        expect(response.status).toBe(500);
        expect(gateway.received.length).toBe(calls);
        // Nothing went downstream: another request under the key runs.
        const other = await charge(platform, key, 3, key);
        expect(other.status).toBe(201);
        expect(((await other.json()) as Charged).charge.amount).toBe(3);
      },
    );
  },
);
