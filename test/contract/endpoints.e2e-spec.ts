import {
  Controller,
  HostParam,
  Module,
  Post,
  Req,
  VersioningType,
} from '@nestjs/common';
import { RouterModule } from '@nestjs/core';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { Idempotent } from '../../src/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { postWithHost } from '../utils/http-client.js';

@Controller({ path: 'orders', version: '1' })
class OrdersV1Controller {
  @Post()
  @Idempotent()
  create() {
    return { handler: 'orders v1' };
  }
}

@Controller({ path: 'orders', version: '2' })
class OrdersV2Controller {
  @Post()
  @Idempotent()
  create() {
    return { handler: 'orders v2' };
  }
}

@Controller('refunds')
class PublicRefundsController {
  @Post()
  @Idempotent()
  create() {
    return { handler: 'public refunds' };
  }
}

@Controller('refunds')
class AdminRefundsController {
  @Post()
  @Idempotent()
  create() {
    return { handler: 'admin refunds' };
  }
}

/** Mounted under `admin` by the RouterModule. */
@Module({ controllers: [AdminRefundsController] })
class AdminModule {}

@Controller({ path: 'ops', version: '1' })
class OperationsController {
  /** One handler, two paths. */
  @Post(['charge', 'refund'])
  @Idempotent()
  operate(@Req() request: { url?: string }) {
    return { operation: request.url?.split('/').pop() };
  }
}

@Controller({ host: ':tenant.example.test', path: 'tenants' })
class TenantsController {
  @Post()
  @Idempotent()
  create(@HostParam('tenant') tenant: string) {
    return { tenant };
  }
}

@Module({
  imports: [
    AdminModule,
    RouterModule.register([{ path: 'admin', module: AdminModule }]),
  ],
  controllers: [
    OrdersV1Controller,
    OrdersV2Controller,
    PublicRefundsController,
    OperationsController,
    TenantsController,
  ],
})
class EndpointsModule {}

/**
 * Two endpoints under one key: never the other's stored response. The
 * route a fingerprint names is the one the platform matched (a version, a
 * RouterModule path, one entry of an array of paths, a host's parameters),
 * not only the handler's template.
 */
describe.each(PLATFORMS)('endpoints under one key (%s)', (platform) => {
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({
      platform,
      imports: [EndpointsModule],
      configure: (app) => {
        app.setGlobalPrefix('api');
        app.enableVersioning({ type: VersioningType.URI });
      },
    });
  });
  afterAll(() => target.close());

  it.each([
    ['two versions of a route', '/api/v1/orders', '/api/v2/orders'],
    ['a route and its RouterModule twin', '/api/refunds', '/api/admin/refunds'],
    ['two paths of one handler', '/api/v1/ops/charge', '/api/v1/ops/refund'],
  ])(
    'refuses %s with 422, and never replays the first one to the second',
    async (_what, first, second) => {
      const key = `${platform}:${first}:${second}`;
      const body = { amount: 1 };
      const ran = await send(target, first, { key, body });
      expect(ran.status).toBe(201);
      const other = await send(target, second, { key, body });
      expect(other.status).toBe(422);
      expect(other.headers.get('idempotent-replayed')).toBeNull();
      // The first one still replays.
      const again = await send(target, first, { key, body });
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(await again.text()).toBe(await ran.text());
    },
  );

  it("refuses the same route on another host parameter with 422, never the other host's response", async () => {
    const post = (host: string) =>
      postWithHost(`${target.url}/api/tenants`, host, `${platform}-tenants`);
    expect(await post('acme.example.test')).toEqual({
      status: 201,
      body: JSON.stringify({ tenant: 'acme' }),
    });
    expect((await post('globex.example.test')).status).toBe(422);
  });

  it('keeps naming a route by its template where only the global prefix is added: fingerprints of records made before stay valid', async () => {
    const key = `${platform}-plain`;
    expect((await send(target, '/api/refunds', { key })).status).toBe(201);
    const [record] = await target.db.query<{ path: string }>(
      `SELECT path FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
      [key],
    );
    expect(record.path).toBe('/refunds');
  });
});
