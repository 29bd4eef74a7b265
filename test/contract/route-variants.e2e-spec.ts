/**
 * Two handlers of one path that the platform tells apart by something else
 * than the path (a version read from a header or the media type, a
 * controller's literal host) are two routes: a key sent to one, then to the
 * other, gets 422 from the second, never the first one's stored response.
 */
import { Controller, Post, Version, VersioningType } from '@nestjs/common';
import { Idempotent } from '../../src/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { postWithHost } from '../utils/http-client.js';

@Controller('pay')
class PaymentsController {
  @Post()
  @Version('1')
  @Idempotent()
  v1() {
    return { version: 1 };
  }

  @Post()
  @Version('2')
  @Idempotent()
  v2() {
    return { version: 2 };
  }
}

@Controller({ path: 'site', host: 'a.example.test' })
class SiteAController {
  @Post()
  @Idempotent()
  create() {
    return { site: 'a' };
  }
}

@Controller({ path: 'site', host: 'b.example.test' })
class SiteBController {
  @Post()
  @Idempotent()
  create() {
    return { site: 'b' };
  }
}

const VERSIONINGS = [
  [
    'header',
    { type: VersioningType.HEADER, header: 'x-api-version' },
    (version: string) => ({ 'x-api-version': version }),
  ],
  [
    'media type',
    { type: VersioningType.MEDIA_TYPE, key: 'v=' },
    (version: string) => ({ accept: `application/json;v=${version}` }),
  ],
] as const;

describe.each(PLATFORMS)('routes of one path (%s)', (platform) => {
  describe.each(VERSIONINGS)(
    'under %s versioning',
    (_versioning, versioning, versioned) => {
      let target: TestApp;

      beforeAll(async () => {
        target = await startTestApp({
          platform,
          controllers: [PaymentsController],
          configure: (app) => {
            app.enableVersioning(versioning);
          },
        });
      });
      afterAll(() => target.close());

      it("refuses the other version with 422, never the first one's response", async () => {
        const key = `${platform}-${versioning.type}`;
        const body = { amount: 5 };
        const first = await send(target, '/pay', {
          key,
          body,
          headers: versioned('1'),
        });
        expect([first.status, await first.json()]).toEqual([
          201,
          { version: 1 },
        ]);
        const other = await send(target, '/pay', {
          key,
          body,
          headers: versioned('2'),
        });
        expect([
          other.status,
          other.headers.get('idempotent-replayed'),
        ]).toEqual([422, null]);
        const again = await send(target, '/pay', {
          key,
          body,
          headers: versioned('1'),
        });
        expect([
          again.headers.get('idempotent-replayed'),
          await again.json(),
        ]).toEqual(['true', { version: 1 }]);
      });
    },
  );
});

// On Express: Fastify refuses two routes of one method and path at start-up.
describe('routes of one path on two literal hosts (express)', () => {
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({
      platform: 'express',
      controllers: [SiteAController, SiteBController],
    });
  });
  afterAll(() => target.close());

  const post = (host: string) =>
    postWithHost(`${target.url}/site`, host, 'literal-hosts');

  it("refuses the other host's route with 422, never the first one's response", async () => {
    expect(await post('a.example.test')).toEqual({
      status: 201,
      body: JSON.stringify({ site: 'a' }),
    });
    expect((await post('b.example.test')).status).toBe(422);
  });
});
