/**
 * V8's CPU profile of another Node.js process, started with `--inspect`,
 * over the DevTools protocol; and the profile's self time by where the
 * code comes from.
 */

/** A node of a CPU profile (the DevTools protocol's `Profiler.ProfileNode`). */
interface ProfileNode {
  readonly id: number;
  readonly callFrame: {
    readonly functionName: string;
    readonly url: string;
    readonly lineNumber: number;
  };
}

/** A CPU profile (`Profiler.Profile`): which node ran at each sample. */
export interface CpuProfile {
  readonly nodes: readonly ProfileNode[];
  readonly samples: readonly number[];
  /** µs since the sample before (the first: since the start). */
  readonly timeDeltas: readonly number[];
}

/** µs of self time by key. */
export type SelfTimes = Record<string, number>;

/** The sampling profiler of one process. */
export interface Profiler {
  /** Starts sampling every `intervalUs` µs. */
  start(intervalUs: number): Promise<void>;
  /** Stops sampling: the profile since {@link start}. */
  stop(): Promise<CpuProfile>;
  close(): void;
}

/**
 * Attaches to the inspector at `url`, which the process printed
 * (`Debugger listening on ws://...`).
 */
export async function attachProfiler(url: string): Promise<Profiler> {
  const socket = new WebSocket(url);
  await new Promise((resolve, reject) => {
    socket.onopen = resolve;
    socket.onerror = reject;
  });
  let lastId = 0;
  const pending = new Map<number, (result: unknown) => void>();
  socket.onmessage = (event: MessageEvent) => {
    const message = JSON.parse(String(event.data)) as {
      id?: number;
      result?: unknown;
    };
    if (message.id !== undefined) {
      pending.get(message.id)?.(message.result);
      pending.delete(message.id);
    }
  };
  const send = <R>(method: string, params: object = {}) =>
    new Promise<R>((resolve) => {
      const id = ++lastId;
      pending.set(id, resolve as (result: unknown) => void);
      socket.send(JSON.stringify({ id, method, params }));
    });
  await send('Profiler.enable');
  return {
    async start(intervalUs) {
      await send('Profiler.setSamplingInterval', { interval: intervalUs });
      await send('Profiler.start');
    },
    async stop() {
      return (await send<{ profile: CpuProfile }>('Profiler.stop')).profile;
    },
    close: () => socket.close(),
  };
}

/**
 * Where a function comes from: a package of node_modules, `node:<module>`,
 * the library itself (`module`, from dist/), the bench's app (`bench-app`),
 * V8's own entries (`(garbage collector)`, `(program)`, `(idle)`), or
 * `native` (built-ins without a script).
 */
export function origin(url: string, functionName: string): string {
  if (!url) {
    return functionName.startsWith('(') ? functionName : 'native';
  }
  if (url.startsWith('node:')) {
    return `node:${url.slice('node:'.length).split('/')[0]}`;
  }
  const inPackage = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (inPackage) {
    return inPackage[1];
  }
  if (url.includes('/dist-bench/')) {
    return 'bench-app';
  }
  return url.includes('/dist/') ? 'module' : url;
}

/**
 * The self time of `profile`, by origin ({@link origin}) and by function
 * (`origin|name|file:line`).
 */
export function selfTimes(profile: CpuProfile): {
  byOrigin: SelfTimes;
  byFunction: SelfTimes;
} {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const byOrigin: SelfTimes = {};
  const byFunction: SelfTimes = {};
  profile.samples.forEach((id, i) => {
    // A sample's time is the delta to the next one.
    const us = profile.timeDeltas[i + 1] ?? 0;
    const { functionName, url, lineNumber } = nodes.get(id)!.callFrame;
    const from = origin(url, functionName);
    const file = url.split('/').slice(-2).join('/');
    const name = `${from}|${functionName || '(anonymous)'}|${file}:${lineNumber + 1}`;
    byOrigin[from] = (byOrigin[from] ?? 0) + us;
    byFunction[name] = (byFunction[name] ?? 0) + us;
  });
  return { byOrigin, byFunction };
}
