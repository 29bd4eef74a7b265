import {
  claimValue,
  decodeRecord,
  finishedValue,
  finishedValueOf,
  fingerprintLine,
  inProgressValue,
  requestLines,
  statusLetter,
} from './redis-record.js';

/** A finished record's value, as the completion script writes it. */
function finished(
  status: string,
  expiresAt: number,
  code: number,
  fingerprint: string,
  headers: string,
  body: Buffer,
): Buffer {
  return Buffer.concat([
    Buffer.from(
      `${status} ${expiresAt} ${code}\n${fingerprintLine(fingerprint)}\n${JSON.stringify(['POST', '/p'])}\n${headers}\n`,
    ),
    body,
  ]);
}

describe('the Redis record value', () => {
  it('reads a claim back: its owner, whether a duplicate waits, and its fingerprint of any characters', () => {
    const fingerprint = 'fp "\n\u0000λ💳';
    const value = Buffer.from(
      inProgressValue(
        'owner-1',
        { scope: 's', key: 'k', fingerprint, method: 'POST', path: '/p/:id' },
        1,
      ),
    );
    expect(decodeRecord(value)).toEqual({
      state: 'in_progress',
      owner: 'owner-1',
      waiting: false,
      fingerprint,
      bound: false,
    });
    value[1] = 'w'.charCodeAt(0);
    expect(decodeRecord(value)).toMatchObject({ waiting: true });
  });

  it('reads a claim bound by a step back (lease and binding ends in it), held or released', () => {
    const fingerprint = 'fp "\n\u0000λ💳';
    const lines = `\n${fingerprintLine(fingerprint)}\n["POST","/p"]`;
    expect(
      decodeRecord(
        Buffer.from(`bw 1795491712344 1795491799999 owner 1${lines}`),
      ),
    ).toEqual({
      state: 'in_progress',
      owner: 'owner 1',
      waiting: true,
      fingerprint,
      bound: true,
    });
    expect(decodeRecord(Buffer.from(`b- 0 1795491799999 ${lines}`))).toEqual({
      state: 'in_progress',
      owner: '',
      waiting: false,
      fingerprint,
      bound: true,
    });
    expect(() => decodeRecord(Buffer.from(`b- 0${lines}`))).toThrow(
      'Unreadable idempotency record in Redis',
    );
  });

  it('reads a finished record back, its body byte for byte whatever bytes it holds (newlines included)', () => {
    const body = Buffer.from([0x0a, 0x00, 0xff, 0x0a, 0x7b, 0x0a]);
    const headers = { 'content-type': 'application/octet-stream', x: ['a'] };
    expect(
      decodeRecord(
        finished(
          statusLetter('completed'),
          1_795_491_712_344,
          201,
          'fp',
          JSON.stringify(headers),
          body,
        ),
      ),
    ).toEqual({
      state: 'finished',
      expiresAt: 1_795_491_712_344,
      record: {
        status: 'completed',
        fingerprint: 'fp',
        response: { status: 201, headers, body },
      },
    });
  });

  it.each([
    ['failed', 'f'],
    ['not_replayable', 'n'],
  ] as const)(
    'reads a %s record, with no headers and no body',
    (status, letter) => {
      expect(statusLetter(status)).toBe(letter);
      expect(
        decodeRecord(finished(letter, 1, 500, 'fp', '', Buffer.alloc(0))),
      ).toEqual({
        state: 'finished',
        expiresAt: 1,
        record: {
          status,
          fingerprint: 'fp',
          response: { status: 500, headers: {}, body: Buffer.alloc(0) },
        },
      });
    },
  );

  it('writes a UTF-8 body as a string of the same bytes, and any other body as bytes, both read back byte for byte', () => {
    const request = { fingerprint: 'fp', method: 'POST', path: '/p' };
    const head = `${statusLetter('completed')} 1795491712344 201`;
    const headers = JSON.stringify({ 'content-type': 'application/json' });
    const text = `${head}\n"fp"\n["POST","/p"]\n${headers}\n`;
    const utf8 = Buffer.from('{"note":"λ 💳\\n€","n":1}');
    const binary = Buffer.from([0x7b, 0xc3, 0x28, 0x0a, 0xff, 0x7d]);
    const asString = finishedValue(head, request, headers, utf8);
    const asBytes = finishedValue(head, request, headers, binary);
    expect(typeof asString).toBe('string');
    expect(Buffer.from(asString)).toEqual(
      Buffer.concat([Buffer.from(text), utf8]),
    );
    expect(Buffer.isBuffer(asBytes)).toBe(true);
    expect(asBytes).toEqual(Buffer.concat([Buffer.from(text), binary]));
    expect(finishedValue(head, request, headers, Buffer.alloc(0))).toBe(text);
    for (const [value, body] of [
      [asString, utf8],
      [asBytes, binary],
    ] as const) {
      expect(decodeRecord(Buffer.from(value))).toMatchObject({
        state: 'finished',
        record: { response: { status: 201, body } },
      });
    }
  });

  it('builds a claim and its finished record from the same request lines, the claim with its time', () => {
    const request = {
      scope: 'POST /p "]\n',
      key: 'k,1]',
      fingerprint: 'fp "\n',
      method: 'POST',
      path: '/p/:id',
    };
    const lines = requestLines(request);
    const line = `\n"fp \\"\\n"\n["POST","/p/:id","POST /p \\"]\\n","k,1]"`;
    expect(lines).toBe(line);
    expect(claimValue('owner', lines, 1_795_491_712_344)).toBe(
      `i- owner${line},1795491712344]`,
    );
    expect(inProgressValue('owner', request, 1_795_491_712_344)).toBe(
      claimValue('owner', lines, 1_795_491_712_344),
    );
    const value = finishedValueOf('c 1 201 0', lines, '{}', Buffer.from('b'));
    expect(value).toBe(`c 1 201 0${line}]\n{}\nb`);
    expect(value).toBe(
      finishedValue('c 1 201 0', request, '{}', Buffer.from('b')),
    );
    expect(decodeRecord(Buffer.from(value))).toMatchObject({
      record: { fingerprint: 'fp "\n' },
    });
    expect(JSON.parse(`${lines.slice(lines.lastIndexOf('\n') + 1)}]`)).toEqual([
      'POST',
      '/p/:id',
      request.scope,
      request.key,
    ]);
  });

  it('refuses a value that is not a record', () => {
    expect(() => decodeRecord(Buffer.from('c 1 200'))).toThrow(
      'Unreadable idempotency record in Redis',
    );
  });
});
