import {
  reportedStep,
  storedStep,
  storedStepValue,
  unkeptStepValue,
} from './stored-step.js';

describe('stored step values', () => {
  it.each([
    ['a string', 'charge'],
    ['null', null],
    ['an object', { id: 'ch_1', amount: 10 }],
    ['an object of the mark’s shape', { '$idempotency:unkept': { bytes: 1 } }],
    ['an object of the wrapper’s shape', { '$idempotency:value': 1 }],
    [
      'an object with a reserved key among others',
      { '$idempotency:value': 1, a: 2 },
    ],
    ['an array', [{ '$idempotency:unkept': {} }]],
  ])('reads %s back as the result it was', (_what, result) => {
    const stored = JSON.parse(
      JSON.stringify(storedStepValue(result)),
    ) as unknown;
    expect(storedStep(stored)).toEqual({ result });
  });

  it('reads the mark of a step whose result was too large as such', () => {
    const stored = JSON.parse(
      JSON.stringify(unkeptStepValue({ bytes: 430_082, limitBytes: 407_482 })),
    ) as unknown;
    expect(storedStep(stored)).toEqual({
      unkept: { bytes: 430_082, limitBytes: 407_482 },
    });
  });

  it('reads the mark of a step whose result was not JSON as such, its reason cut to 500 characters', () => {
    const reason = `Do not know how to serialize a BigInt ${'x'.repeat(600)}`;
    const stored = JSON.parse(
      JSON.stringify(unkeptStepValue({ notJson: reason })),
    ) as unknown;
    expect(storedStep(stored)).toEqual({
      unkept: { notJson: reason.slice(0, 500) },
    });
    expect(reportedStep({ step: 'charge', result: stored })).toEqual({
      step: 'charge',
      result: undefined,
      unreadable: `it ran, and its result was not a value JSON can hold (${reason.slice(0, 500)})`,
    });
  });
});
