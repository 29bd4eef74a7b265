/**
 * Where an injector breaks a connection: at the first call (a statement, a
 * command, a request) that `matches` takes, at `timing` (what each timing
 * means is the injector's: see its `…FaultTiming`).
 */
export interface Fault<Call, Timing extends string> {
  readonly matches: (call: Call) => boolean;
  readonly timing: Timing;
}

/** A fault waiting for its call. */
export interface ArmedFault<Call> {
  /** Whether its call came (and its connection was broken). */
  readonly hit: boolean;
  /** Resolves with its call once the connection was broken (rejects if it could not be). */
  readonly injected: Promise<Call>;
  /** Takes it back if its call has not come. */
  disarm(): void;
}

/** What arms faults at its calls: one of the injectors. */
export interface FaultInjector<Call, Timing extends string> {
  arm(fault: Fault<Call, Timing>): ArmedFault<Call>;
}

/** A fault its call came to: the injector breaks the connection, then says how it went. */
export interface HitFault<Call, Timing extends string> extends Fault<
  Call,
  Timing
> {
  /** The connection was broken: resolves `injected` with the call. */
  injected(): void;
  /** The connection could not be broken: rejects `injected` with `error`. */
  failed(error: unknown): void;
}

interface Waiting<Call, Timing extends string> extends Fault<Call, Timing> {
  hit: boolean;
  resolve(call: Call): void;
  reject(error: unknown): void;
}

/**
 * The faults armed on one injector, each for the first call it matches:
 * what the statement, command and request injectors share (each breaks
 * its connection its own way).
 */
export class ArmedFaults<Call, Timing extends string> {
  private readonly waiting: Waiting<Call, Timing>[] = [];

  /** Arms `fault` for the next call it matches. */
  arm(fault: Fault<Call, Timing>): ArmedFault<Call> {
    let resolve!: (call: Call) => void;
    let reject!: (error: unknown) => void;
    const injected = new Promise<Call>((done, fail) => {
      resolve = done;
      reject = fail;
    });
    // A fault never hit is never awaited.
    injected.catch(() => undefined);
    const armed: Waiting<Call, Timing> = {
      ...fault,
      hit: false,
      resolve,
      reject,
    };
    this.waiting.push(armed);
    return {
      get hit() {
        return armed.hit;
      },
      injected,
      disarm: () => this.remove(armed),
    };
  }

  /**
   * The first armed fault that `call` matches (of `timing`, if given), now
   * hit and no longer armed (later calls pass), or `undefined` if none does.
   */
  take(call: Call, timing?: Timing): HitFault<Call, Timing> | undefined {
    const armed = this.waiting.find(
      (candidate) =>
        (timing === undefined || candidate.timing === timing) &&
        candidate.matches(call),
    );
    if (!armed) {
      return undefined;
    }
    armed.hit = true;
    this.remove(armed);
    return {
      matches: armed.matches,
      timing: armed.timing,
      injected: () => armed.resolve(call),
      failed: (error) => armed.reject(error),
    };
  }

  private remove(armed: Waiting<Call, Timing>): void {
    const index = this.waiting.indexOf(armed);
    if (index >= 0) {
      this.waiting.splice(index, 1);
    }
  }
}
