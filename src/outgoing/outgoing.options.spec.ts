import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { resolveModuleOptions } from '../idempotency.module-options.js';
import { FETCH_DEFAULTS, resolveFetchOptions } from './outgoing.options.js';

describe('the options of outgoing calls', () => {
  const fetch = () => Promise.resolve(new Response('ok'));

  it('overrides the base field by field, and the retries as a whole', () => {
    const base = resolveFetchOptions(
      FETCH_DEFAULTS,
      { headerName: 'X-Key', retry: { attempts: 2 } },
      'outgoing',
    );
    expect(
      resolveFetchOptions(base, { timeoutMs: 50, fetch }, 'idempotency'),
    ).toEqual({
      headerName: 'X-Key',
      replayHeaderName: 'Idempotent-Replayed',
      retry: { ...FETCH_DEFAULTS.retry, attempts: 2 },
      timeoutMs: 50,
      fetch,
    });
    expect(
      resolveFetchOptions(base, { retry: { baseDelayMs: 7 } }, 'idempotency')
        .retry,
    ).toEqual({ ...FETCH_DEFAULTS.retry, baseDelayMs: 7 });
  });

  it.each([
    [{ headerName: 'no spaces' }, '"outgoing.headerName": "no spaces"'],
    [
      { replayHeaderName: 'no spaces' },
      '"outgoing.replayHeaderName": "no spaces"',
    ],
    [{ replayHeaderName: '' }, '"outgoing.replayHeaderName": ""'],
    [{ timeoutMs: 0 }, '"outgoing.timeoutMs": 0'],
    [{ timeoutMs: Number.NaN }, '"outgoing.timeoutMs": NaN'],
    [{ fetch: 'fetch' }, '"outgoing.fetch": it is not a function'],
    [
      { retry: { attempts: 0 } },
      '"outgoing.retry": The option "attempts" must be an integer of at least 1',
    ],
  ])('refuses %j at startup, naming the option', (outgoing, message) => {
    expect(() => resolveModuleOptions({ outgoing: outgoing as never })).toThrow(
      IdempotencyConfigurationError,
    );
    expect(() => resolveModuleOptions({ outgoing: outgoing as never })).toThrow(
      message,
    );
  });

  it('takes the replay header name of the module, and of a call over it', () => {
    const base = resolveFetchOptions(
      FETCH_DEFAULTS,
      { replayHeaderName: 'Idempotency-Replayed' },
      'outgoing',
    );
    expect(base.replayHeaderName).toBe('Idempotency-Replayed');
    expect(base.headerName).toBe('Idempotency-Key');
    expect(
      resolveFetchOptions(base, { timeoutMs: 50 }, 'idempotency')
        .replayHeaderName,
    ).toBe('Idempotency-Replayed');
    expect(
      resolveFetchOptions(
        base,
        { replayHeaderName: 'X-Replayed' },
        'idempotency',
      ).replayHeaderName,
    ).toBe('X-Replayed');
  });

  it('refuses a value that is not an object', () => {
    expect(() =>
      resolveFetchOptions(FETCH_DEFAULTS, 'fast' as never, 'idempotency'),
    ).toThrow('Invalid "idempotency": fast.');
  });
});
