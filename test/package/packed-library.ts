import { execFile, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/*
 * `npm pack` of the repository, for the tests of the package as published.
 */

const run = promisify(execFile);

/** The repository's root directory. */
export const root = fileURLToPath(new URL('../../', import.meta.url));

/** The environment of child processes, without what jest and npm scripts add. */
export function childEnv(
  extra: Record<string, string> = {},
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (
      name !== 'NODE_OPTIONS' &&
      name !== 'INIT_CWD' &&
      !/^npm_(lifecycle|package|command|config_local_prefix)/i.test(name)
    ) {
      env[name] = value;
    }
  }
  return { ...env, ...extra };
}

/** Runs npm in `cwd`; what it printed, or an error with what it said. */
export async function npm(args: string[], cwd: string): Promise<string> {
  try {
    const { stdout } = await run('npm', args, {
      cwd,
      env: childEnv(),
      timeout: 90_000,
      maxBuffer: 16 * 1024 * 1024,
    });
    return stdout;
  } catch (error) {
    const { stderr, stdout } = error as { stderr?: string; stdout?: string };
    throw new Error(
      `npm ${args.join(' ')} failed in ${cwd}:\n${stderr || stdout || String(error)}`,
      { cause: error },
    );
  }
}

/**
 * `npm install`s `packages` (names with versions, or tarballs) in `cwd` as
 * an application would: from npm's cache when it has them, without running
 * install scripts.
 */
export async function npmInstall(
  cwd: string,
  packages: readonly string[],
): Promise<void> {
  await npm(
    [
      'install',
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
      '--ignore-scripts',
      '--loglevel=error',
      ...packages,
    ],
    cwd,
  );
}

/**
 * Packs the repository as `npm publish` would into `destination`: the
 * tarball's path and the paths it holds (each under `package/`).
 */
export async function packLibrary(
  destination: string,
): Promise<{ tarball: string; files: string[] }> {
  const output = await npm(
    ['pack', '--pack-destination', destination, '--json'],
    root,
  );
  // Anything a pack script prints comes before the JSON report.
  const report = JSON.parse(output.slice(output.search(/^\[/m))) as Array<{
    filename: string;
  }>;
  const tarball = join(destination, report[0].filename);
  const { stdout } = await run('tar', ['-tzf', tarball]);
  return {
    tarball,
    files: stdout.split('\n').filter((line) => line.length > 0),
  };
}

/** The installed version of a dependency of the repository. */
export async function installedVersion(name: string): Promise<string> {
  const manifest = JSON.parse(
    await readFile(join(root, 'node_modules', name, 'package.json'), 'utf8'),
  ) as { version: string };
  return manifest.version;
}

/** What an application outside the repository printed, as it prints it. */
export interface AppOutput {
  readonly lines: string[];
  stderr: string;
}

/** Collects the output of `child`; resolves once it prints `listening: <url>`. */
export function listening(
  child: ChildProcess,
  output: AppOutput,
): Promise<string> {
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => {
    output.stderr += chunk;
  });
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null, signal: string | null) =>
      reject(
        new Error(
          `the application exited (${signal ?? code}) before it listened:\n${output.stderr}`,
        ),
      );
    child.once('exit', onExit);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      output.lines.push(line);
      const match = /^listening: (\S+)$/.exec(line);
      if (match) {
        child.off('exit', onExit);
        resolve(match[1]);
      }
    });
  });
}

/** Stops `child` (SIGTERM, then SIGKILL after 10 s). */
export async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return;
  }
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  try {
    await exited;
  } finally {
    clearTimeout(timer);
  }
}
