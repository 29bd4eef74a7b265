import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assertBuilt } from '../utils/library-build.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';

/*
 * The compiled library in an application process of its own, on the
 * in-memory store, whose module resolution hooks (test/utils/hidden-packages.js) make
 * `typeorm`, `@nestjs/typeorm` and `pg` unresolvable, as if they were not
 * installed, and log every attempt to import them.
 *
 * Needs `npm run build` first (`npm test` builds before it runs jest).
 */

describe('the module on another store, without TypeORM, @nestjs/typeorm or pg installed', () => {
  let scratch: string;
  let log: string;
  let app: SampleProcess | undefined;

  beforeAll(async () => {
    await assertBuilt();
    scratch = await mkdtemp(join(tmpdir(), 'nestjs-idempotency-no-typeorm-'));
    log = join(scratch, 'peers.log');
    await writeFile(log, '');
    app = await startSample(
      {
        PEER_LOG: log,
        HIDDEN_PACKAGES: '^(typeorm|@nestjs/typeorm|pg)(/|$)',
        HIDDEN_APP: 'test/stores/typeorm-free-app.js',
      },
      {
        entry: '../test/utils/hidden-packages.js',
        ready: /listening: (http:\/\/\S+)/,
      },
    );
  }, 30_000);
  afterAll(async () => {
    await app?.stop();
    if (scratch) {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  it('starts, executes a request once and replays it for its duplicate', async () => {
    const post = () =>
      fetch(`${app!.url}/payments`, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          'Idempotency-Key': 'no-typeorm',
        },
        body: JSON.stringify({ reference: 'p-1' }),
      });
    const first = await post();
    expect(first.status).toBe(201);
    const body = await first.text();
    const second = await post();
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(await second.text()).toBe(body);
    expect(JSON.parse(body)).toMatchObject({ reference: 'p-1' });
  });

  it('never asks for TypeORM, @nestjs/typeorm or pg, by import() or require()', async () => {
    expect(await readFile(log, 'utf8')).toBe('');
    expect(app!.output()).toContain('cjs: []');
  });
});
