import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { build, stop } from 'esbuild';
import ts from 'typescript';
import * as client from '../../src/client/index.js';
import { resolveModuleOptions } from '../../src/idempotency.module-options.js';
import { assertBuilt } from '../utils/library-build.js';

/*
 * The client entry (`nestjs-idempotency/client`) is for browsers too: the
 * built entry bundles for the browser, where a Node.js built-in cannot be
 * resolved, and its source type-checks against the DOM library alone.
 *
 * Needs `npm run build` first (`npm test` builds before it runs jest).
 */

const root = path.resolve(import.meta.dirname, '../..');
const entry = path.join(root, 'dist/src/client/index.js');

/** What esbuild is asked for: a browser bundle of one ES module. */
const BROWSER = {
  bundle: true,
  platform: 'browser',
  format: 'esm',
  write: false,
  logLevel: 'silent',
  absWorkingDir: root,
} as const;

beforeAll(assertBuilt);
// esbuild's service process would outlive the tests.
afterAll(() => stop());

describe('the client entry in a browser', () => {
  it('bundles for the browser from its own files only, with no Node.js import', async () => {
    const { outputFiles, metafile } = await build({
      ...BROWSER,
      entryPoints: [entry],
      metafile: true,
    });
    const bundle = outputFiles[0].text;
    expect(bundle).toMatch(/export {[^}]*\bIdempotentClient\b/);
    expect(bundle).not.toContain('node:');
    expect(bundle).not.toContain('require(');
    const compiled = (await readdir(path.join(root, 'dist/src/client')))
      .filter((file) => file.endsWith('.js'))
      .map((file) => `dist/src/client/${file}`);
    // Every input is a file of the entry's folder: nothing else of the
    // library, no package.
    const inputs = Object.keys(metafile.inputs);
    expect(inputs.filter((input) => !compiled.includes(input))).toEqual([]);
    expect(inputs).toContain('dist/src/client/idempotent-client.js');
  });

  it('would fail on a Node.js built-in, as this check relies on', async () => {
    await expect(
      build({
        ...BROWSER,
        stdin: {
          contents:
            "import { randomUUID } from 'node:crypto'; export const key = randomUUID();",
          resolveDir: root,
        },
      }),
    ).rejects.toThrow(/Could not resolve "node:crypto"/);
  });

  it('type-checks against the DOM library, without the types of Node.js', () => {
    const program = ts.createProgram([path.join(root, 'src/client/index.ts')], {
      target: ts.ScriptTarget.ES2023,
      lib: ['lib.es2023.d.ts', 'lib.dom.d.ts'],
      types: [],
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      strict: true,
      noEmit: true,
    });
    const errors = ts
      .getPreEmitDiagnostics(program)
      .map((diagnostic) =>
        ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'),
      );
    expect(errors).toEqual([]);
    expect(
      program
        .getSourceFiles()
        .map((file) => file.fileName)
        .filter((name) => name.includes('@types/')),
    ).toEqual([]);
  });

  it('speaks the headers of the module it calls', () => {
    const { headerName, replayHeaderName } = resolveModuleOptions();
    expect({
      key: client.IDEMPOTENCY_KEY_HEADER,
      replayed: client.IDEMPOTENT_REPLAYED_HEADER,
    }).toEqual({ key: headerName, replayed: replayHeaderName });
  });
});
