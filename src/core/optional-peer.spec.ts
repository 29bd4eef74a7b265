import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import {
  isAbsentPeer,
  loadOptionalPeer,
  loadRequiredPeer,
} from './optional-peer.js';

/** A package installed nowhere. */
const ABSENT = 'nestjs-idempotency-absent-peer';

/** What a loader threw: its code and message. */
interface Thrown {
  readonly code?: string;
  readonly message: string;
}

const thrown = (code: string, message: string): Error =>
  Object.assign(new Error(message), { code });

/** What `load()` threw, as the loader threw it. */
async function failure(load: () => unknown): Promise<unknown> {
  try {
    await load();
  } catch (error) {
    return error;
  }
  throw new Error('it loaded');
}

/**
 * A directory with two installed packages that each miss a package of
 * their own, `its-own-dependency`: one CommonJS, one ES module.
 */
async function installedPeers(dir: string): Promise<void> {
  for (const [name, type, source] of [
    ['cjs-peer', 'commonjs', "require('its-own-dependency');"],
    ['esm-peer', 'module', "import 'its-own-dependency';"],
  ]) {
    await mkdir(join(dir, 'node_modules', name), { recursive: true });
    await writeFile(
      join(dir, 'node_modules', name, 'package.json'),
      JSON.stringify({ name, type, main: 'index.js' }),
    );
    await writeFile(join(dir, 'node_modules', name, 'index.js'), source);
  }
}

/**
 * What Node.js itself (outside Jest) throws from `dir` for the absent
 * package and for the two installed ones: by `import()` and by `require()`.
 */
const NODE_PROBE = `
import { createRequire } from 'node:module';
const require = createRequire(process.cwd() + '/probe.js');
const report = {};
for (const name of process.argv.slice(1)) {
  for (const [loader, load] of [['import', (n) => import(n)], ['require', async (n) => require(n)]]) {
    await load(name).then(
      () => { report[loader + ' ' + name] = 'loaded'; },
      (error) => { report[loader + ' ' + name] = { code: error.code, message: error.message }; },
    );
  }
}
console.log(JSON.stringify(report));
`;

describe('isAbsentPeer', () => {
  describe("the loaders' own errors", () => {
    let dir: string;
    let node: Record<string, Thrown>;

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'nestjs-idempotency-optional-peer-'));
      await installedPeers(dir);
      const env = { ...process.env };
      delete env.NODE_OPTIONS;
      const { stdout } = await promisify(execFile)(
        process.execPath,
        [
          '--input-type=module',
          '--eval',
          NODE_PROBE,
          ABSENT,
          'cjs-peer',
          'esm-peer',
        ],
        { cwd: dir, env, timeout: 30_000 },
      );
      node = JSON.parse(stdout) as Record<string, Thrown>;
    }, 30_000);
    afterAll(async () => {
      if (dir) {
        await rm(dir, { recursive: true, force: true });
      }
    });

    it.each(['import', 'require'])(
      "says a package is absent from Node.js's %s() of it",
      (loader) => {
        const error = node[`${loader} ${ABSENT}`];
        expect(error.code).toBe(
          loader === 'import' ? 'ERR_MODULE_NOT_FOUND' : 'MODULE_NOT_FOUND',
        );
        expect(isAbsentPeer(error, ABSENT)).toBe(true);
      },
    );

    it.each(['import', 'require'])(
      "says an installed package that misses a package of its own is not absent, from Node.js's %s()",
      (loader) => {
        for (const name of ['cjs-peer', 'esm-peer']) {
          const error = node[`${loader} ${name}`];
          expect(error.message).toContain("'its-own-dependency'");
          expect(isAbsentPeer(error, name)).toBe(false);
        }
      },
    );

    it("says a package is absent from Jest's ESM registry (import())", async () => {
      const error = await failure(() => import(ABSENT));
      expect(error).toMatchObject({ code: 'MODULE_NOT_FOUND' });
      expect(isAbsentPeer(error, ABSENT)).toBe(true);
    });

    it("says a package is absent from Jest's CommonJS registry (require())", async () => {
      const error = await failure(() => createRequire(import.meta.url)(ABSENT));
      expect(error).toMatchObject({ code: 'MODULE_NOT_FOUND' });
      expect(isAbsentPeer(error, ABSENT)).toBe(true);
    });

    it("says an installed package that misses a package of its own is not absent, from Jest's registries", async () => {
      const file = (name: string) =>
        join(dir, 'node_modules', name, 'index.js');
      const errors = {
        esm: await failure(() => import(pathToFileURL(file('esm-peer')).href)),
        cjs: await failure(() =>
          createRequire(import.meta.url)(file('cjs-peer')),
        ),
      };
      expect(errors).toEqual({
        esm: expect.objectContaining({
          code: 'MODULE_NOT_FOUND',
          message: expect.stringContaining("'its-own-dependency'"),
        }),
        cjs: expect.objectContaining({
          code: 'MODULE_NOT_FOUND',
          message: expect.stringContaining("'its-own-dependency'"),
        }),
      });
      expect(isAbsentPeer(errors.esm, 'esm-peer')).toBe(false);
      expect(isAbsentPeer(errors.cjs, 'cjs-peer')).toBe(false);
    });
  });

  const from = '/app/node_modules/nestjs-idempotency/dist/src/openapi/x.js';
  it.each<[string, string, Error]>([
    [
      "Node.js's ESM loader",
      '@nestjs/swagger',
      thrown(
        'ERR_MODULE_NOT_FOUND',
        `Cannot find package '@nestjs/swagger' imported from ${from}`,
      ),
    ],
    [
      "Node.js's ESM loader, for a file of the package",
      'typeorm-transactional/dist/common/index.js',
      thrown(
        'ERR_MODULE_NOT_FOUND',
        `Cannot find package 'typeorm-transactional' imported from ${from}`,
      ),
    ],
    [
      'CommonJS',
      '@nestjs/swagger',
      thrown(
        'MODULE_NOT_FOUND',
        `Cannot find module '@nestjs/swagger'\nRequire stack:\n- ${from}`,
      ),
    ],
    [
      'CommonJS, for a file of the package',
      'typeorm-transactional/dist/common/index.js',
      thrown(
        'MODULE_NOT_FOUND',
        `Cannot find module 'typeorm-transactional/dist/common/index.js'\nRequire stack:\n- ${from}`,
      ),
    ],
    [
      "Jest's registries",
      '@nestjs/swagger',
      thrown(
        'MODULE_NOT_FOUND',
        "Cannot find module '@nestjs/swagger' from 'node_modules/nestjs-idempotency/dist/src/openapi/x.js'",
      ),
    ],
  ])('says a package is absent from the error of %s', (_, name, error) => {
    expect(isAbsentPeer(error, name)).toBe(true);
  });

  it.each<[string, string, unknown]>([
    [
      'a package of its own missing (ESM)',
      '@nestjs/swagger',
      thrown(
        'ERR_MODULE_NOT_FOUND',
        "Cannot find package 'swagger-ui-dist' imported from /app/node_modules/@nestjs/swagger/dist/index.js",
      ),
    ],
    [
      'a package of its own missing (CommonJS)',
      '@nestjs/swagger',
      thrown(
        'MODULE_NOT_FOUND',
        "Cannot find module 'swagger-ui-dist'\nRequire stack:\n- /app/node_modules/@nestjs/swagger/dist/index.js",
      ),
    ],
    [
      'a package of its own missing (Jest)',
      '@nestjs/swagger',
      thrown(
        'MODULE_NOT_FOUND',
        "Cannot find module 'swagger-ui-dist' from 'node_modules/@nestjs/swagger/dist/index.js'",
      ),
    ],
    [
      'a package of its own missing, whose name ends like its own',
      '@nestjs/graphql',
      thrown(
        'ERR_MODULE_NOT_FOUND',
        "Cannot find package 'graphql' imported from /app/node_modules/@nestjs/graphql/dist/index.js",
      ),
    ],
    [
      'its entry file missing (ESM)',
      'graphql',
      thrown(
        'ERR_MODULE_NOT_FOUND',
        "Cannot find package '/app/node_modules/graphql/index.mjs' imported from /app/x.js",
      ),
    ],
    [
      'its entry file missing (CommonJS)',
      'graphql',
      thrown(
        'MODULE_NOT_FOUND',
        `Cannot find module '/app/node_modules/graphql/index.js'. Please verify that the package.json has a valid "main" entry`,
      ),
    ],
    [
      'a file of another version missing',
      'typeorm-transactional/dist/common/index.js',
      thrown(
        'ERR_MODULE_NOT_FOUND',
        "Cannot find module '/app/node_modules/typeorm-transactional/dist/common/index.js' imported from /app/x.js",
      ),
    ],
    [
      'a path it does not export',
      'graphql',
      thrown(
        'ERR_PACKAGE_PATH_NOT_EXPORTED',
        'No "exports" main defined in /app/node_modules/graphql/package.json imported from /app/x.js',
      ),
    ],
    ['its code failing', 'graphql', new SyntaxError("Unexpected token '}'")],
    [
      'the message without the code',
      'graphql',
      new Error("Cannot find package 'graphql' imported from /app/x.js"),
    ],
    ['a thrown string', 'graphql', "Cannot find package 'graphql'"],
    ['nothing thrown', 'graphql', undefined],
  ])('says an installed package is not absent: %s', (_, name, error) => {
    expect(isAbsentPeer(error, name)).toBe(false);
  });
});

describe('loadOptionalPeer', () => {
  it('gives the module, undefined when absent, and throws any other failure', async () => {
    const module = { loaded: true };
    const failing = new SyntaxError("Unexpected token '}'");
    expect(await loadOptionalPeer('x', () => Promise.resolve(module))).toBe(
      module,
    );
    expect(await loadOptionalPeer(ABSENT, () => import(ABSENT))).toBe(
      undefined,
    );
    await expect(
      loadOptionalPeer('x', () => Promise.reject(failing)),
    ).rejects.toBe(failing);
  });
});

describe('loadRequiredPeer', () => {
  it('gives the module, and throws a configuration error that says what to install when absent', async () => {
    const module = { loaded: true };
    expect(
      await loadRequiredPeer('x', () => Promise.resolve(module), 'unused'),
    ).toBe(module);
    const error = await failure(() =>
      loadRequiredPeer(
        ABSENT,
        () => import(ABSENT),
        `The feature needs ${ABSENT}, which is not installed.`,
      ),
    );
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as Error).message).toBe(
      `The feature needs ${ABSENT}, which is not installed.\nPotential solutions:\n- Install it next to nestjs-idempotency: \`npm install ${ABSENT}\`.`,
    );
  });

  it('throws what the import threw when the package fails to load', async () => {
    const failing = thrown(
      'ERR_MODULE_NOT_FOUND',
      "Cannot find package 'its-own-dependency' imported from /app/node_modules/x/index.js",
    );
    await expect(
      loadRequiredPeer('x', () => Promise.reject(failing), 'unused'),
    ).rejects.toBe(failing);
  });
});
