import type { AbandonedKey } from '../interfaces/idempotency-store.interface.js';

/**
 * The key of the object that a store keeps in place of a step's result
 * too large for it: the step ran, and its result is not there to give back.
 */
const UNKEPT = '$idempotency:unkept';
/**
 * The key of the object that a step's result shaped as one of the module's
 * own objects (a one-key object under {@link UNKEPT} or this key) is kept
 * in, so that reading never mistakes a result for a mark. A result of that
 * shape saved before marks existed is read as a mark: none is expected.
 */
const VALUE = '$idempotency:value';

/**
 * @internal Why a step that ran has no result in its store: how large its
 * result was and what its store keeps, or why JSON could not hold it.
 */
export type UnkeptStep =
  | { readonly bytes: number; readonly limitBytes: number }
  | { readonly notJson: string };

/** The longest reason of a result JSON could not hold that a mark keeps. */
const MAX_REASON_LENGTH = 500;

/**
 * @internal What a step's stored value stands for: its result, or the mark
 * of a step that ran without a result its store could keep.
 */
export type StoredStep =
  { readonly result: unknown } | { readonly unkept: UnkeptStep };

/** @internal The value a store keeps for a step's result. */
export function storedStepValue(result: unknown): unknown {
  return reservedKey(result) === undefined ? result : { [VALUE]: result };
}

/**
 * @internal The value a store keeps for a step whose result it refused as
 * too large: a mark that the step ran, small enough for any store.
 */
export function unkeptStepValue(unkept: UnkeptStep): unknown {
  return {
    [UNKEPT]:
      'notJson' in unkept
        ? { notJson: unkept.notJson.slice(0, MAX_REASON_LENGTH) }
        : { bytes: unkept.bytes, limitBytes: unkept.limitBytes },
  };
}

/** @internal What a step's stored value (see {@link storedStepValue}) stands for. */
export function storedStep(value: unknown): StoredStep {
  const reserved = reservedKey(value);
  if (reserved === undefined) {
    return { result: value };
  }
  const inner = (value as Record<string, unknown>)[reserved];
  if (reserved === VALUE) {
    return { result: inner };
  }
  const { bytes, limitBytes, notJson } = (inner ?? {}) as Record<
    string,
    unknown
  >;
  if (typeof notJson === 'string') {
    return { unkept: { notJson } };
  }
  return {
    unkept: {
      bytes: typeof bytes === 'number' ? bytes : 0,
      limitBytes: typeof limitBytes === 'number' ? limitBytes : 0,
    },
  };
}

/**
 * @internal A step of an abandoned key as the `abandoned` event reports
 * it: its result, or, for a step that ran without a result its store
 * could keep, no result and why.
 */
export function reportedStep(
  step: AbandonedKey['steps'][number],
): AbandonedKey['steps'][number] {
  if (step.unreadable !== undefined) {
    return step;
  }
  const stored = storedStep(step.result);
  if (!('unkept' in stored)) {
    return { step: step.step, result: stored.result };
  }
  const { unkept } = stored;
  return {
    step: step.step,
    result: undefined,
    unreadable:
      'notJson' in unkept
        ? `it ran, and its result was not a value JSON can hold (${unkept.notJson})`
        : `it ran, and its result (${unkept.bytes} bytes) was too large for the store to keep (at most ${unkept.limitBytes} bytes)`,
  };
}

/** The module's own key of a one-key object, or `undefined` for another value. */
function reservedKey(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return undefined;
  }
  const keys = Object.keys(value);
  return keys.length === 1 && (keys[0] === UNKEPT || keys[0] === VALUE)
    ? keys[0]
    : undefined;
}
