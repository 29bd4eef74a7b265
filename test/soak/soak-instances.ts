import {
  startSample,
  TUNED_SAMPLE,
  type SampleProcess,
} from '../utils/sample-process.js';

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
 * The sample app's instances of the soak (TUNED_SAMPLE processes), each
 * slot killed and started again, paused and resumed, as the faults say.
 * Each names its pool connections `soak-app-<index>` (`PGAPPNAME`), so that
 * the faults find its sessions in `pg_stat_activity`; its presence session
 * keeps the module's own name.
 */
export class SoakInstances {
  private readonly slots: Array<SampleProcess | undefined> = [];
  private readonly paused = new Set<number>();
  /** Every process started, killed ones included: their output on failure. */
  readonly started: Array<{ index: number; process: SampleProcess }> = [];

  constructor(
    readonly count: number,
    private readonly env: Record<string, string>,
  ) {}

  /**
   * Starts every instance: the first alone (it runs the migrations), then
   * the others together.
   */
  async start(): Promise<void> {
    await this.launch(0);
    await Promise.all(
      Array.from({ length: this.count - 1 }, (_, i) => this.launch(i + 1)),
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
    await Promise.all(
      this.slots.flatMap((instance) => (instance ? [instance.stop()] : [])),
    );
    this.slots.length = 0;
  }

  /** What the instances printed, the last `chars` characters of each. */
  outputs(chars = 4_000): string {
    return this.started
      .map(
        ({ index, process }) =>
          `--- instance ${index} (pid ${process.process.pid}) ---\n${process.output().slice(-chars)}`,
      )
      .join('\n');
  }

  private async launch(index: number): Promise<void> {
    const instance = await startSample(
      { ...this.env, PGAPPNAME: instanceAppName(index) },
      TUNED_SAMPLE,
    );
    this.started.push({ index, process: instance });
    this.slots[index] = instance;
  }
}
