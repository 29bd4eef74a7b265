import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join, posix } from 'node:path';
import { promisify } from 'node:util';
import { packLibrary } from './packed-library.js';

/*
 * The documents of the package as published, read where a user who
 * installed it reads them: `npm pack` of the repository, unpacked outside
 * it. Every relative link of every Markdown file reaches a file of the
 * package (and a heading of it, for a Markdown file with an anchor); the
 * version agrees with the changelog and the README; the license ships.
 *
 * Runs without a build: the documents, the manifest and the license are
 * packed from the repository as they are.
 */

const run = promisify(execFile);

/** The lines of a Markdown text outside its fenced code blocks. */
function proseLines(markdown: string): string[] {
  let fenced = false;
  return markdown.split('\n').filter((line) => {
    if (/^\s*(```|~~~)/.test(line)) {
      fenced = !fenced;
      return false;
    }
    return !fenced;
  });
}

/**
 * The anchors of a Markdown text's headings, as GitHub makes them: lower
 * case, punctuation dropped, spaces as hyphens, `-1`, `-2` after repeats.
 */
function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  for (const line of proseLines(markdown)) {
    const heading = /^#{1,6}\s+(.*?)(\s+#+)?\s*$/.exec(line);
    if (heading) {
      const base = heading[1]
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\p{M}\p{Pc}\- ]/gu, '')
        .replace(/ /g, '-');
      let anchor = base;
      for (let repeat = 1; anchors.has(anchor); repeat++) {
        anchor = `${base}-${repeat}`;
      }
      anchors.add(anchor);
    }
  }
  return anchors;
}

/**
 * The targets of a Markdown text's links (`[text](target)`, `![alt](target)`
 * and `[label]: target`) outside code, except those with a scheme (https:,
 * mailto:).
 */
function relativeLinks(markdown: string): string[] {
  const prose = proseLines(markdown)
    .join('\n')
    .replace(/`[^`\n]*`/g, '');
  const targets = [
    ...prose.matchAll(/\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g),
    ...prose.matchAll(/^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)/gm),
  ].map((match) => match[1]);
  return targets.filter((target) => !/^[a-z][a-z\d+.-]*:/i.test(target));
}

/**
 * The links of the Markdown files under `dir` that reach no file under
 * `dir`, or no heading of the Markdown file they reach, as
 * `file: target`.
 */
async function brokenLinks(dir: string, documents: string[]) {
  const broken: string[] = [];
  for (const document of documents) {
    for (const target of relativeLinks(
      await readFile(join(dir, document), 'utf8'),
    )) {
      const [path, anchor] = target.split('#', 2);
      const reached = path
        ? posix.normalize(
            posix.join(posix.dirname(document), decodeURIComponent(path)),
          )
        : document;
      const isFile =
        !reached.startsWith('../') &&
        (await stat(join(dir, reached)).then(
          (found) => found.isFile(),
          () => false,
        ));
      if (
        !isFile ||
        (anchor &&
          reached.endsWith('.md') &&
          !headingAnchors(await readFile(join(dir, reached), 'utf8')).has(
            anchor,
          ))
      ) {
        broken.push(`${document}: ${target}`);
      }
    }
  }
  return broken;
}

/** The versions named in the section of `markdown` under `## heading`. */
function versionsUnder(markdown: string, heading: string): string[] {
  const start = markdown.indexOf(`\n## ${heading}\n`);
  if (start === -1) {
    return [];
  }
  const end = markdown.indexOf('\n## ', start + 1);
  return [
    ...markdown
      .slice(start, end === -1 ? undefined : end)
      .matchAll(/\b\d+\.\d+\.\d+\b/g),
  ].map((match) => match[0]);
}

describe('the documents of the published package', () => {
  let scratch: string;
  let tarball: string;
  let files: string[];
  let unpacked: string;
  let documents: string[];

  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'nestjs-idempotency-docs-'));
    ({ tarball, files } = await packLibrary(scratch));
    unpacked = join(scratch, 'package');
    await mkdir(unpacked);
    await run('tar', ['-xzf', tarball, '-C', unpacked, '--strip-components=1']);
    documents = (await readdir(unpacked, { recursive: true }))
      .filter((file) => file.endsWith('.md'))
      .sort();
  }, 60_000);

  afterAll(async () => {
    if (scratch) {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  it('links its Markdown files only to files it holds, and to their headings', async () => {
    expect(await brokenLinks(unpacked, documents)).toEqual([]);
    expect(documents).toEqual(
      expect.arrayContaining(['README.md', 'CHANGELOG.md']),
    );
  });

  it("is versioned as its changelog's newest release, which the README installs and upgrades to", async () => {
    const manifest = JSON.parse(
      await readFile(join(unpacked, 'package.json'), 'utf8'),
    ) as { version: string };
    const changelog = await readFile(join(unpacked, 'CHANGELOG.md'), 'utf8');
    // What is not released yet sits above the newest release, as `Unreleased`.
    const releases = [...changelog.matchAll(/^## (.+)$/gm)]
      .map((match) => match[1])
      .filter((heading) => heading !== 'Unreleased');
    expect(releases[0]).toBe(manifest.version);

    const readme = await readFile(join(unpacked, 'README.md'), 'utf8');
    const tarballs = [
      ...readme.matchAll(/nestjs-idempotency-\d+\.\d+\.\d+\.tgz/g),
    ].map((match) => match[0]);
    expect(tarballs.length).toBeGreaterThan(0);
    expect(new Set(tarballs)).toEqual(new Set([basename(tarball)]));
    const upgrades = versionsUnder(readme, 'Upgrading');
    expect(upgrades).toContain(manifest.version);
    expect(upgrades.filter((version) => !releases.includes(version))).toEqual(
      [],
    );
  });

  it('holds the MIT license its package.json names', async () => {
    expect(files).toContain('package/LICENSE');
    const manifest = JSON.parse(
      await readFile(join(unpacked, 'package.json'), 'utf8'),
    ) as { license?: string };
    expect(manifest.license).toBe('MIT');
    const license = await readFile(join(unpacked, 'LICENSE'), 'utf8');
    expect(license).toMatch(/^MIT License\n/);
    expect(license).toMatch(/^Copyright \(c\) \d{4} \S.*$/m);
  });
});
