import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { assertBuilt } from '../utils/library-build.js';
import {
  compileSnippets,
  extractSnippets,
  markdownDocuments,
  type Snippet,
  type SnippetError,
} from './snippets.js';

/*
 * Every TypeScript snippet of the README and of the guides beside the code
 * compiles against the built package and the installed peers (conventions
 * in test/README.md). One program checks them all, with a document of
 * known mistakes beside them: the check must find exactly those.
 *
 * Needs `npm run build` first (`npm test` builds before it runs jest).
 */

const root = path.resolve(import.meta.dirname, '../..');

/** Snippets that must fail, each with the error it must be reported with. */
const BROKEN_DOCUMENT = 'test/docs/broken.md';
const BROKEN = [
  '# Broken on purpose',
  '',
  '```ts',
  "import { IdempotencyModule } from 'nestjs-idempotency';",
  '',
  "IdempotencyModule.forRoot({ ttl: '24h', concurrency: 'sometimes' });",
  '```',
  '',
  "<!-- snippet-prelude: import { Idempotent } from 'nestjs-idempotency'; -->",
  '',
  '```ts',
  'const decorator: string = Idempotent();',
  '```',
  '',
  '```ts fragment',
  'this is not TypeScript, and is not compiled',
  '```',
  '',
  '```ts',
  "import { IdempotencyInterceptor } from 'nestjs-idempotency';",
  '```',
].join('\n');

describe('the snippets of the documentation', () => {
  let documents: string[];
  let snippets: Snippet[];
  let errors: SnippetError[];

  beforeAll(async () => {
    await assertBuilt();
    documents = [
      'README.md',
      ...(await markdownDocuments(root, [
        'sample-app',
        'test',
        'migrations',
        'src',
      ])),
    ];
    snippets = [];
    for (const document of documents) {
      const text = await readFile(path.join(root, document), 'utf8');
      snippets.push(...extractSnippets(document, text));
    }
    errors = await compileSnippets(root, [
      ...snippets,
      ...extractSnippets(BROKEN_DOCUMENT, BROKEN),
    ]);
  }, 120_000);

  it('compiles every TypeScript snippet against the built package', () => {
    const own = errors.filter((error) => error.document !== BROKEN_DOCUMENT);
    expect(
      own.map(
        ({ document, line, message }) => `${document}:${line}: ${message}`,
      ),
    ).toEqual([]);
    // The check looked at the documents it is meant to.
    expect(documents).toEqual(
      expect.arrayContaining([
        'README.md',
        'sample-app/README.md',
        'test/README.md',
        'migrations/README.md',
      ]),
    );
    expect(
      snippets.filter((snippet) => snippet.document === 'README.md').length,
    ).toBeGreaterThanOrEqual(15);
  });

  it('reports a snippet that does not compile at its line of its document', () => {
    const broken = errors
      .filter((error) => error.document === BROKEN_DOCUMENT)
      .map(({ line, message }) => ({
        line,
        code: /^TS\d+/.exec(message)?.[0],
      }));
    expect(broken).toEqual([
      // 'sometimes' is no concurrency mode.
      { line: 6, code: 'TS2322' },
      // A decorator is no string (the prelude's import resolved).
      { line: 12, code: 'TS2322' },
      // No longer exported from the package's entry.
      { line: 20, code: 'TS2305' },
    ]);
  });
});

describe('the extraction of snippets', () => {
  it('reads the prelude of a block and leaves out its fragments', () => {
    const found = extractSnippets(BROKEN_DOCUMENT, BROKEN);
    expect(found.map((snippet) => snippet.line)).toEqual([3, 11, 19]);
    expect(found[1]).toMatchObject({
      preludeLine: 9,
      prelude: ["import { Idempotent } from 'nestjs-idempotency';"],
    });
  });
});
