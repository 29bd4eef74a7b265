import {
  mkdir,
  mkdtemp,
  readdir,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import ts from 'typescript';

/*
 * The TypeScript snippets of the documentation, type-checked the way a
 * user's project would see them (the conventions are in test/README.md,
 * "Snippets in the documentation"):
 *
 * - a ```ts block is compiled, as a module of its own;
 * - an HTML comment `<!-- snippet-prelude: ... -->` right before it holds
 *   lines the reader does not need to see (imports, a declared service),
 *   compiled in front of the block;
 * - a ```ts fragment block is not compiled (an excerpt that cannot stand
 *   alone; kept rare).
 */

/** One compiled block of a Markdown document. */
export interface Snippet {
  /** The document, relative to the repository root. */
  readonly document: string;
  /** Line of the opening fence in the document (1-based). */
  readonly line: number;
  /** Line of the prelude comment, when there is one (1-based). */
  readonly preludeLine?: number;
  readonly prelude: readonly string[];
  readonly code: readonly string[];
}

/** A compiler error, placed in its document. */
export interface SnippetError {
  readonly document: string;
  readonly line: number;
  readonly message: string;
}

const FENCE = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)\s*(.*)$/;
const PRELUDE_START = '<!-- snippet-prelude:';

/** The compiled TypeScript blocks of a Markdown document. */
export function extractSnippets(document: string, text: string): Snippet[] {
  const lines = text.split(/\r?\n/);
  const snippets: Snippet[] = [];
  for (let index = 0; index < lines.length; index++) {
    const open = FENCE.exec(lines[index]);
    if (!open) {
      continue;
    }
    const [, indent, fence, language, attributes] = open;
    const code: string[] = [];
    let end = index + 1;
    for (; end < lines.length; end++) {
      const close = lines[end].trimStart();
      if (close.startsWith(fence) && close.slice(fence.length).trim() === '') {
        break;
      }
      // A block inside a list item is indented with it.
      code.push(
        lines[end].startsWith(indent)
          ? lines[end].slice(indent.length)
          : lines[end],
      );
    }
    const typescript = language === 'ts' || language === 'typescript';
    if (typescript && !attributes.split(/\s+/).includes('fragment')) {
      snippets.push({
        document,
        line: index + 1,
        ...preludeBefore(lines, index),
        code,
      });
    }
    index = end;
  }
  return snippets;
}

/** The prelude comment right before the fence at `fenceIndex`, if any. */
function preludeBefore(
  lines: readonly string[],
  fenceIndex: number,
): { prelude: string[]; preludeLine?: number } {
  let last = fenceIndex - 1;
  while (last >= 0 && lines[last].trim() === '') {
    last--;
  }
  if (last < 0 || !lines[last].trimEnd().endsWith('-->')) {
    return { prelude: [] };
  }
  let first = last;
  while (first >= 0 && !lines[first].includes(PRELUDE_START)) {
    if (first < last && lines[first].includes('-->')) {
      return { prelude: [] };
    }
    first--;
  }
  if (first < 0) {
    return { prelude: [] };
  }
  const body = lines
    .slice(first, last + 1)
    .join('\n')
    .trim()
    .slice(PRELUDE_START.length, -'-->'.length);
  return {
    prelude: body
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== ''),
    preludeLine: first + 1,
  };
}

/** The Markdown documents under `dirs` of `root` (recursively), relative. */
export async function markdownDocuments(
  root: string,
  dirs: readonly string[],
): Promise<string[]> {
  const found: string[] = [];
  for (const dir of dirs) {
    const entries = await readdir(path.join(root, dir), { recursive: true });
    for (const entry of entries) {
      if (
        entry.endsWith('.md') &&
        !entry.split(path.sep).includes('node_modules')
      ) {
        found.push(path.join(dir, entry).split(path.sep).join('/'));
      }
    }
  }
  return found.sort();
}

/**
 * Type-checks every snippet in one program, against the built package
 * (`nestjs-idempotency` and its subpaths through its package.json
 * `exports`) and the packages installed in the repository, with the
 * compiler options of the repository's tsconfig.json.
 *
 * @returns the errors, each at the line of its document; none when every
 * snippet compiles.
 */
export async function compileSnippets(
  root: string,
  snippets: readonly Snippet[],
): Promise<SnippetError[]> {
  const project = await mkdtemp(path.join(tmpdir(), 'idempotency-snippets-'));
  try {
    await linkPackages(root, project);
    await writeFile(
      path.join(project, 'package.json'),
      JSON.stringify({ name: 'snippets', private: true, type: 'module' }),
    );
    const files = new Map<string, Snippet>();
    await Promise.all(
      snippets.map(async (snippet) => {
        const name = path.join(
          project,
          `${snippet.document.replace(/[^A-Za-z0-9]+/g, '-')}-${snippet.line}.ts`,
        );
        files.set(name, snippet);
        // Each snippet is a module of its own, whatever it imports.
        await writeFile(
          name,
          [...snippet.prelude, ...snippet.code, 'export {};', ''].join('\n'),
        );
      }),
    );
    const program = ts.createProgram([...files.keys()], compilerOptions(root));
    const errors = ts.getPreEmitDiagnostics(program).map((diagnostic) => {
      const message = `TS${diagnostic.code}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`;
      const snippet =
        diagnostic.file && files.get(path.normalize(diagnostic.file.fileName));
      if (!snippet || diagnostic.start === undefined) {
        return {
          document: diagnostic.file?.fileName ?? '(compiler options)',
          line: 0,
          message,
        };
      }
      const { line } = diagnostic.file!.getLineAndCharacterOfPosition(
        diagnostic.start,
      );
      return {
        document: snippet.document,
        line:
          line < snippet.prelude.length
            ? (snippet.preludeLine ?? snippet.line)
            : snippet.line + 1 + line - snippet.prelude.length,
        message,
      };
    });
    return errors.sort(
      (a, b) => a.document.localeCompare(b.document) || a.line - b.line,
    );
  } finally {
    // Links only: the repository's packages are left as they are.
    await rm(project, { recursive: true, force: true });
  }
}

/**
 * The project's node_modules: a link to each package of the repository's,
 * and `nestjs-idempotency` to the repository itself, so that its
 * package.json `exports` decide what a snippet may import.
 */
async function linkPackages(root: string, project: string): Promise<void> {
  const modules = path.join(project, 'node_modules');
  await mkdir(modules);
  const installed = await readdir(path.join(root, 'node_modules'));
  await Promise.all([
    ...installed
      .filter((name) => name !== 'nestjs-idempotency')
      .map((name) =>
        symlink(
          path.join(root, 'node_modules', name),
          path.join(modules, name),
        ),
      ),
    symlink(root, path.join(modules, 'nestjs-idempotency')),
  ]);
}

/** The repository's compiler options, for files that are checked only. */
function compilerOptions(root: string): ts.CompilerOptions {
  const file = path.join(root, 'tsconfig.json');
  const { config } = ts.readConfigFile(file, (name) => ts.sys.readFile(name));
  const { options } = ts.convertCompilerOptionsFromJson(
    (config as { compilerOptions: unknown }).compilerOptions,
    root,
  );
  return {
    ...options,
    noEmit: true,
    declaration: false,
    sourceMap: false,
    inlineSources: false,
    rootDir: undefined,
    outDir: undefined,
    // A snippet shows a value or a parameter that the reader's code goes
    // on to use: unused ones are not its mistakes.
    noUnusedLocals: false,
    noUnusedParameters: false,
  };
}
