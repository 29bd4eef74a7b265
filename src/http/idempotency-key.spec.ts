import { jest } from '@jest/globals';
import { once } from 'node:events';
import { createServer, IncomingMessage, type Server } from 'node:http';
import { connect, Socket, type AddressInfo } from 'node:net';
import type { ResolvedKeyValidation } from '../core/executor.options.js';
import { IdempotencyKeyInvalidException } from '../exceptions/idempotency-key-invalid.exception.js';
import type { IdempotencyProblem } from '../exceptions/idempotency-http.exception.js';
import { keyProblem, validKey } from '../core/idempotency-key.js';
import { readKeyHeader } from './idempotency-key.js';

const FIELD = 'idempotency-key';
const REPEATED = { problem: 'it is repeated' };
const NOT_QUOTED_STRING = { problem: 'it is not a valid quoted string' };

/** The module's default rules: 1 to 255 visible ASCII characters. */
const DEFAULT_RULES: ResolvedKeyValidation = {
  minLength: 1,
  maxLength: 255,
  pattern: /^[\x21-\x7e]+$/,
  validate: undefined,
};

describe('readKeyHeader', () => {
  let server: Server;
  let port: number;
  let take: ((request: IncomingMessage) => void) | undefined;

  beforeAll(async () => {
    server = createServer((request, response) => {
      take?.(request);
      take = undefined;
      response.end();
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    server.closeAllConnections();
    server.close();
    await once(server, 'close');
  });

  /**
   * The request Node.js's own parser makes of these header lines, sent as
   * raw bytes (latin1, one byte per character) over a real connection.
   */
  function received(...headerLines: string[]): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      take = resolve;
      const socket = connect(port, '127.0.0.1', () => {
        const head = [
          'POST /payments HTTP/1.1',
          'Host: localhost',
          'Content-Length: 0',
          'Connection: close',
          ...headerLines,
        ];
        socket.end(Buffer.from(`${head.join('\r\n')}\r\n\r\n`, 'latin1'));
      });
      socket.resume();
      socket.on('error', reject);
      socket.on('close', () =>
        reject(new Error(`the server took no request of ${headerLines}`)),
      );
    });
  }

  async function read(...headerLines: string[]) {
    return readKeyHeader(await received(...headerLines), FIELD);
  }

  it('reads nothing from a request without the header', async () => {
    expect(await read('X-Other: value')).toBe(undefined);
  });

  it.each([
    'pay-2024-0001',
    '0f8fad5b-d9cb-469f-a165-70867728950e',
    'a',
    '!#$%&*+.^_`|~',
    'ab"cd"',
    'with,comma',
  ])('reads the token %p as it is', async (token) => {
    expect(await read(`Idempotency-Key: ${token}`)).toEqual({ key: token });
  });

  it.each(['IDEMPOTENCY-KEY', 'idempotency-key', 'IdEmPoTeNcY-kEy'])(
    'finds the header under the name %p',
    async (name) => {
      expect(await read(`${name}: k-1`)).toEqual({ key: 'k-1' });
    },
  );

  it('reads the value without the whitespace around it', async () => {
    expect(await read('Idempotency-Key: \t k-1 \t')).toEqual({ key: 'k-1' });
  });

  it('reads an empty value as an empty key (for the rules to refuse)', async () => {
    expect(await read('Idempotency-Key:')).toEqual({ key: '' });
  });

  it('reads a value of one line with a comma as one key', async () => {
    expect(await read('Idempotency-Key: a, b')).toEqual({ key: 'a, b' });
  });

  it('reads the field it is given, and only that one', async () => {
    const request = await received(
      'Idempotency-Key: from-default',
      'X-Request-Key: from-custom',
    );
    expect(readKeyHeader(request, 'x-request-key')).toEqual({
      key: 'from-custom',
    });
    expect(readKeyHeader(request, 'x-other-key')).toBe(undefined);
  });

  it('reads a long value whole; the length rules refuse it later', async () => {
    const long = 'k'.repeat(2000);
    expect(await read(`Idempotency-Key: ${long}`)).toEqual({ key: long });
  });

  it.each([
    ['"abc"', 'abc'],
    [' \t "abc" \t ', 'abc'],
    ['""', ''],
    ['"a b c"', 'a b c'],
    ['"say \\"hi\\""', 'say "hi"'],
    ['"back\\\\slash"', 'back\\slash'],
    ['"\\\\"', '\\'],
    ['"~!#,;"', '~!#,;'],
    [
      '"0f8fad5b-d9cb-469f-a165-70867728950e"',
      '0f8fad5b-d9cb-469f-a165-70867728950e',
    ],
  ])('reads the quoted string %s as %p', async (value, key) => {
    expect(await read(`Idempotency-Key: ${value}`)).toEqual({ key });
  });

  it.each([
    ['"', 'a lone quote'],
    ['"abc', 'no closing quote'],
    ['"abc\\"', 'an escaped closing quote'],
    ['"abc"def', 'text after the closing quote'],
    ['"a"b"', 'a quote inside'],
    ['"a\\nb"', 'an escape of another character than " and \\'],
    ['"a\tb"', 'a tab'],
    ['"caf\xe9"', 'a character beyond ASCII'],
  ])('refuses the quoted string %p (%s)', async (value, _why) => {
    expect(await read(`Idempotency-Key: ${value}`)).toEqual(NOT_QUOTED_STRING);
  });

  it.each([
    [['Idempotency-Key: k-1', 'Idempotency-Key: k-1']],
    [['Idempotency-Key: k-1', 'Idempotency-Key: k-2']],
    [['Idempotency-Key: k-1', 'idempotency-key: k-1']],
    [['Idempotency-Key:', 'Idempotency-Key: k-1']],
    [['Idempotency-Key: "k-1"', 'Idempotency-Key: "k-1"']],
    [['Idempotency-Key: a', 'Idempotency-Key: b', 'Idempotency-Key: c']],
  ])('refuses the header sent more than once: %p', async (lines) => {
    expect(await read(...lines)).toEqual(REPEATED);
  });

  it('refuses a value Node.js gives as a list', () => {
    const request = new IncomingMessage(new Socket());
    request.headers = { [FIELD]: ['k-1', 'k-2'] } as never;
    request.rawHeaders = ['Idempotency-Key', 'k-1'];
    expect(readKeyHeader(request, FIELD)).toEqual(REPEATED);
  });
});

/** The problem detail `validKey` refuses `key` with. */
function refusal(
  key: unknown,
  rules: ResolvedKeyValidation = DEFAULT_RULES,
  field = 'Idempotency-Key',
): IdempotencyProblem {
  try {
    validKey(key, rules, field);
  } catch (error) {
    expect(error).toBeInstanceOf(IdempotencyKeyInvalidException);
    expect((error as IdempotencyKeyInvalidException).getStatus()).toBe(400);
    return (error as IdempotencyKeyInvalidException).getProblem();
  }
  throw new Error(`validKey accepted ${JSON.stringify(key)}`);
}

/** The problem detail of an invalid key. */
function invalid(detail: string): IdempotencyProblem {
  return {
    type: 'urn:idempotency:invalid-key',
    title: 'Invalid idempotency key',
    status: 400,
    detail,
  };
}

const TOO_SHORT_OR_LONG = invalid(
  'The "Idempotency-Key" header is invalid: it must be 1 to 255 characters long.',
);
const BAD_FORMAT = invalid(
  'The "Idempotency-Key" header is invalid: it has an invalid format.',
);

describe('validKey', () => {
  describe('with the default rules', () => {
    it.each([
      ['one character', 'a'],
      ['255 characters', 'k'.repeat(255)],
      [
        'every visible ASCII character',
        '!"#$%&\'()*+,-./0123456789:;<=>?@[\\]^_`{|}~',
      ],
      ['a UUID', '0f8fad5b-d9cb-469f-a165-70867728950e'],
    ])('returns a valid key of %s', (_what, key) => {
      expect(validKey(key, DEFAULT_RULES, 'Idempotency-Key')).toBe(key);
    });

    it.each([
      ['an empty key', ''],
      ['a key of 256 characters', 'k'.repeat(256)],
      ['a key of 2000 characters', 'k'.repeat(2000)],
    ])('refuses %s by its length', (_what, key) => {
      expect(refusal(key)).toEqual(TOO_SHORT_OR_LONG);
    });

    it.each([
      ['a space', 'a b'],
      ['a tab', 'a\tb'],
      ['a line feed', 'a\nb'],
      ['a character beyond ASCII', 'café'],
      ['a NUL', 'a\0'],
      ['DEL', 'a\x7f'],
      ['only a space', ' '],
    ])('refuses a key with %s by its format', (_what, key) => {
      expect(refusal(key)).toEqual(BAD_FORMAT);
    });

    it.each<[string, unknown]>([
      ['a number', 42],
      ['null', null],
      ['undefined', undefined],
      ['an object', { key: 'k-1' }],
      ['an array', ['k-1']],
    ])('refuses %s, which is no string', (_what, key) => {
      expect(refusal(key)).toEqual(
        invalid('The "Idempotency-Key" header is invalid: it is not a string.'),
      );
    });
  });

  describe('with rules of its own', () => {
    const validate = jest.fn((key: string) => key[14] === '4');
    const uuid: ResolvedKeyValidation = {
      minLength: 36,
      maxLength: 36,
      pattern: /^[0-9a-f-]+$/,
      validate,
    };
    beforeEach(() => validate.mockClear());

    it('returns a key that passes the length, the pattern and validate', () => {
      const key = '0f8fad5b-d9cb-469f-a165-70867728950e';
      expect(validKey(key, uuid, 'Idempotency-Key')).toBe(key);
      expect(validate.mock.calls).toEqual([[key]]);
    });

    it('refuses a key that validate refuses', () => {
      expect(refusal('0f8fad5b-d9cb-169f-a165-70867728950e', uuid)).toEqual(
        BAD_FORMAT,
      );
      expect(validate).toHaveBeenCalledTimes(1);
    });

    it('refuses a key off the pattern without calling validate', () => {
      expect(refusal('0F8FAD5B-D9CB-469F-A165-70867728950E', uuid)).toEqual(
        BAD_FORMAT,
      );
      expect(validate).not.toHaveBeenCalled();
    });

    it.each([35, 37])(
      'refuses a key of %p characters by its length, before anything else',
      (length) => {
        expect(refusal('0'.repeat(length), uuid)).toEqual(
          invalid(
            'The "Idempotency-Key" header is invalid: it must be 36 to 36 characters long.',
          ),
        );
        expect(validate).not.toHaveBeenCalled();
      },
    );

    it('names the field the key came from', () => {
      expect(refusal('', DEFAULT_RULES, 'key')).toEqual(
        invalid(
          'The "key" header is invalid: it must be 1 to 255 characters long.',
        ),
      );
      expect(refusal(7, DEFAULT_RULES, 'X-Request-Key')).toEqual(
        invalid('The "X-Request-Key" header is invalid: it is not a string.'),
      );
    });

    it('lets a pattern accept what the default refuses', () => {
      const spaced = { ...DEFAULT_RULES, pattern: /^[a-z ]+$/ };
      expect(validKey('a b', spaced, 'Idempotency-Key')).toBe('a b');
    });
  });
});

describe('keyProblem', () => {
  it('says why a key breaks the rules, or nothing', () => {
    expect(keyProblem('k-1', DEFAULT_RULES)).toBe(undefined);
    expect(keyProblem('', DEFAULT_RULES)).toBe(
      'it must be 1 to 255 characters long',
    );
    expect(keyProblem('k 1', DEFAULT_RULES)).toBe('it has an invalid format');
  });

  it('checks each key from its start with a global or sticky pattern, whose test() would go on from where the last match ended', () => {
    for (const pattern of [/^[a-z0-9-]+$/g, /[a-z0-9-]+$/y, /k-\d/g]) {
      const rules = { ...DEFAULT_RULES, pattern };
      for (const key of ['k-1', 'k-2', 'k-3', 'k-4']) {
        expect(keyProblem(key, rules)).toBe(undefined);
      }
      expect(keyProblem('K 1', rules)).toBe('it has an invalid format');
      expect(keyProblem('k-5', rules)).toBe(undefined);
    }
  });

  it('refuses a key with a lone surrogate, which PostgreSQL would keep as another key (U+FFFD), whatever the pattern lets through, before validate', () => {
    const validate = jest.fn(() => true);
    const anyText = { ...DEFAULT_RULES, pattern: /^[\s\S]+$/, validate };
    for (const key of ['k\ud800', '\udfffk', 'k\ude00\ud83d']) {
      expect(keyProblem(key, anyText)).toBe(
        'it is not well-formed Unicode (it has a lone surrogate)',
      );
    }
    expect(validate).not.toHaveBeenCalled();
    expect(keyProblem('k\ufffd', anyText)).toBe(undefined);
    expect(keyProblem('k\ud83d\ude00', anyText)).toBe(undefined);
  });

  it('refuses a key of more than 1024 bytes of UTF-8, whatever maxLength counts', () => {
    const anyText = {
      ...DEFAULT_RULES,
      pattern: /^[\s\S]+$/,
      maxLength: 1024,
    };
    expect(keyProblem('é'.repeat(513), anyText)).toBe(
      'it is 1026 bytes long in UTF-8, more than the 1024 a key may have',
    );
    expect(keyProblem('\u{1f600}'.repeat(257), anyText)).toBe(
      'it is 1028 bytes long in UTF-8, more than the 1024 a key may have',
    );
    expect(keyProblem('é'.repeat(512), anyText)).toBe(undefined);
    expect(keyProblem('\u{1f600}'.repeat(256), anyText)).toBe(undefined);
    expect(keyProblem('k'.repeat(1024), anyText)).toBe(undefined);
  });

  it('refuses a key with a NUL character, which PostgreSQL refuses, whatever the pattern lets through', () => {
    const anyText = { ...DEFAULT_RULES, pattern: /^[\s\S]+$/ };
    for (const key of ['\0', 'k\0', '\0k']) {
      expect(keyProblem(key, anyText)).toBe(
        'it has a NUL character (U+0000), which PostgreSQL cannot store',
      );
    }
  });
});
