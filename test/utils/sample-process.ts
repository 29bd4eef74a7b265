import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** Built by `npm run build && npm run build:sample`, which `npm test` runs. */
const DIST = new URL('../../dist-sample/', import.meta.url);
const READY = /Payments sample listening on (http:\/\/\S+)/;

/** Which compiled entry point to run, and how it says it is ready. */
export interface SampleEntry {
  /** File under dist-sample/ (default `main.js`, the HTTP service). */
  readonly entry?: string;
  /** Its ready line; the first capture group becomes `url` (default: the HTTP service's). */
  readonly ready?: RegExp;
  /** Node.js's own flags for it, before the file (none by default). */
  readonly execArgv?: readonly string[];
}

/** The compiled sample app, running as a process of its own. */
export interface SampleProcess {
  readonly process: ChildProcess;
  /** Base URL from its ready line. */
  readonly url: string;
  /** Everything it printed so far. */
  output(): string;
  /** Resolves when the process has exited, however it ended. */
  exited(): Promise<{ code: number | null; signal: string | null }>;
  /** Sends `signal` (SIGTERM by default) unless it has exited, and waits for the exit. */
  stop(
    signal?: NodeJS.Signals,
  ): Promise<{ code: number | null; signal: string | null }>;
}

/**
 * The sample app under the module options the environment chooses
 * (`SAMPLE_PRESENCE`, `SAMPLE_LEASE`, `SAMPLE_RETRY_AFTER`: see
 * test/utils/tuned-sample.js).
 */
export const TUNED_SAMPLE: SampleEntry = {
  entry: '../test/utils/tuned-sample.js',
};

/** Starts `node dist-sample/main.js` on port 0 and waits for its ready line (no sleeps). */
export async function startSample(
  env: Record<string, string>,
  { entry = 'main.js', ready = READY, execArgv = [] }: SampleEntry = {},
): Promise<SampleProcess> {
  const MAIN = fileURLToPath(new URL(entry, DIST));
  if (!existsSync(MAIN)) {
    throw new Error(
      `${MAIN} does not exist: run \`npm run build && npm run build:sample\` first (\`npm test\` does).`,
    );
  }
  const childEnv: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: '0',
    NO_COLOR: '1',
    ...env,
  };
  // Jest's own flags are not the app's.
  delete childEnv.NODE_OPTIONS;
  const child = spawn(process.execPath, [...execArgv, MAIN], {
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  // Read everything the app prints, so that a full pipe never blocks it.
  child.stdout
    ?.setEncoding('utf8')
    .on('data', (chunk: string) => (output += chunk));
  child.stderr
    ?.setEncoding('utf8')
    .on('data', (chunk: string) => (output += chunk));
  const exited = once(child, 'exit') as Promise<[number | null, string | null]>;
  const url = await new Promise<string>((resolve, reject) => {
    const onData = () => {
      const match = ready.exec(output);
      if (match) {
        child.stdout?.off('data', onData);
        resolve(match[1] ?? '');
      }
    };
    child.stdout?.on('data', onData);
    void exited.then(([code, signal]) =>
      reject(
        new Error(
          `The sample app exited (code ${code}, signal ${signal}) before it was ready:\n${output}`,
        ),
      ),
    );
  });
  return {
    process: child,
    url,
    output: () => output,
    exited: () =>
      exited.then(([code, exitSignal]) => ({ code, signal: exitSignal })),
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill(signal);
      }
      const [code, exitSignal] = await exited;
      return { code, signal: exitSignal };
    },
  };
}
