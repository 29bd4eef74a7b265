import { startSample, type SampleProcess } from '../utils/sample-process.js';
import { libraryEntry, type SoakLibrary } from './soak-libraries.js';

/** `application_name` of the pool connections of instance `index`. */
export function instanceAppName(index: number): string {
  return `soak-app-${index}`;
}

/**
 * Instance `index` of the application name {@link instanceAppName} gave it,
 * or `undefined` for another session.
 */
export function instanceOfAppName(name: string): number | undefined {
  const match = /^soak-app-(\d+)$/.exec(name);
  return match ? Number(match[1]) : undefined;
}

/**
 * The soak's instances of the sample's payments API, instance `index`
 * written with data library `libraries[index]` (see soak-libraries.ts),
 * each slot killed and started again, paused and resumed, as the faults
 * say. Each names its pool connections `soak-app-<index>` (`PGAPPNAME`), so
 * that the faults find its sessions in `pg_stat_activity`; its presence
 * session keeps the module's own name.
 */
export class SoakInstances {
  private readonly slots: Array<SampleProcess | undefined> = [];
  private readonly paused = new Set<number>();
  /** Every process started, killed ones included: their output on failure. */
  readonly started: Array<{ index: number; process: SampleProcess }> = [];
  /** How many instances. */
  readonly count: number;
  /** Instances that exited when no fault or stop ended them, and how. */
  readonly crashes: string[] = [];

  constructor(
    readonly libraries: readonly SoakLibrary[],
    private readonly env: Record<string, string>,
  ) {
    this.count = libraries.length;
  }

  /**
   * Starts every instance: a TypeORM one first and alone (it runs the
   * migrations), then the others together.
   */
  async start(): Promise<void> {
    const first = this.libraries[0] === 'typeorm' ? 1 : 0;
    if (first === 1) {
      await this.launch(0);
    }
    await Promise.all(
      Array.from({ length: this.count - first }, (_, i) =>
        this.launch(i + first),
      ),
    );
  }

  /** Instance `index` and its data library, as one word: `#2 drizzle`. */
  label(index: number): string {
    return `#${index} ${this.libraries[index]}`;
  }

  /** The instances of `library`. */
  of(library: SoakLibrary): number[] {
    return [...this.libraries.keys()].filter(
      (index) => this.libraries[index] === library,
    );
  }

  /** Their URLs; `undefined` while one is down. */
  urls(): Array<string | undefined> {
    return Array.from({ length: this.count }, (_, i) => this.slots[i]?.url);
  }

  /** Kills instance `index` (SIGKILL) and starts it again. */
  async kill(index: number): Promise<void> {
    const victim = this.slots[index];
    this.slots[index] = undefined;
    this.paused.delete(index);
    await victim?.stop('SIGKILL');
    await this.launch(index);
  }

  /** Stops instance `index` where it is (SIGSTOP): it answers nothing. */
  pause(index: number): void {
    const instance = this.slots[index];
    if (instance) {
      this.paused.add(index);
      instance.process.kill('SIGSTOP');
    }
  }

  /** Lets a paused instance go on (SIGCONT). */
  resume(index: number): void {
    if (this.paused.delete(index)) {
      this.slots[index]?.process.kill('SIGCONT');
    }
  }

  /** Resumes the paused ones and stops every instance (SIGTERM). */
  async stop(): Promise<void> {
    [...this.paused].forEach((index) => this.resume(index));
    const running = this.slots.splice(0);
    await Promise.all(
      running.flatMap((instance) => (instance ? [instance.stop()] : [])),
    );
  }

  /**
   * What the instances (of `library`, or all) printed, the last `chars`
   * characters of each.
   */
  outputs(chars = 4_000, library?: SoakLibrary): string {
    return this.started
      .filter(
        ({ index }) =>
          library === undefined || this.libraries[index] === library,
      )
      .map(
        ({ index, process }) =>
          `--- instance ${this.label(index)} (pid ${process.process.pid}) ---\n${process.output().slice(-chars)}`,
      )
      .join('\n');
  }

  private async launch(index: number): Promise<void> {
    const { entry, env } = libraryEntry(this.libraries[index]);
    const instance = await startSample(
      { ...this.env, ...env, PGAPPNAME: instanceAppName(index) },
      entry,
    );
    this.started.push({ index, process: instance });
    this.slots[index] = instance;
    // Still in its slot when it exits: nobody meant it to (a kill and a
    // stop empty the slot first).
    void instance.exited().then(({ code, signal }) => {
      if (this.slots[index] === instance) {
        this.slots[index] = undefined;
        this.crashes.push(
          `instance ${this.label(index)} (pid ${instance.process.pid}) exited on its own (code ${code}, signal ${signal}):\n${instance.output().slice(-2_000)}`,
        );
      }
    });
  }
}
