import { jest } from '@jest/globals';
import { ServerResponse } from 'node:http';
import { holdResponse, type CapturedResponse } from './response-capture.js';
import { deferred, turns } from '../../test/utils/barrier.js';
import { ResponseServer } from '../../test/utils/response-server.js';

type Replace = (error: unknown) => CapturedResponse;

const server = new ResponseServer();

/**
 * Serves one request: holds its response, then lets `respond` write it as a
 * platform would. `settle` stays pending until the test settles it.
 */
function exchange(
  respond: (response: ServerResponse) => void,
  replace = jest.fn<Replace>(() => {
    throw new Error('replace must not be called');
  }),
) {
  const captured = deferred<CapturedResponse>();
  const settled = deferred();
  const served = deferred<ServerResponse>();
  server.handle = (response) => {
    holdResponse(
      response,
      (capture) => {
        captured.resolve(capture);
        return settled.promise;
      },
      replace,
    );
    served.resolve(response);
    respond(response);
  };
  const client = server.send();
  return {
    client,
    captured: captured.promise,
    settled,
    served: served.promise,
    replace,
  };
}

describe('holdResponse', () => {
  /** Every byte value, in an order no encoding would keep by chance. */
  const binary = Buffer.from(
    Array.from({ length: 256 }, (_, i) => (i * 37 + 11) % 256),
  );

  it('sends nothing before settle resolves, then the very bytes written', async () => {
    const { client, captured, settled, served, replace } = exchange(
      (response) => {
        response.writeHead(201, {
          'Content-Type': 'application/octet-stream',
          'Content-Length': String(binary.length),
        });
        response.write(binary.subarray(0, 100));
        response.end(binary.subarray(100));
      },
    );
    const response = await served;

    expect(await captured).toEqual({
      status: 201,
      headers: {
        'content-type': 'application/octet-stream',
        'content-length': '256',
      },
      body: binary,
    });
    await turns();
    expect(response.headersSent).toBe(false);
    expect(response.writableEnded).toBe(false);
    expect(response.socket?.bytesWritten).toBe(0);
    expect(client.responded()).toBe(false);

    settled.resolve();
    const received = await client.response;
    expect(received.status).toBe(201);
    expect(received.headers['content-type']).toBe('application/octet-stream');
    expect(received.headers['content-length']).toBe('256');
    expect(received.body).toEqual(binary);
    expect(received.complete).toBe(true);
    expect(replace).not.toHaveBeenCalled();
  });

  it('captures the headers lower-cased, from setHeader and writeHead alike', async () => {
    const { client, captured, settled } = exchange((response) => {
      response.setHeader('X-From-Set', 'set');
      response.setHeader('Set-Cookie', ['a=1', 'b=2']);
      response.setHeader('X-Count', 3);
      response.setHeader('X-Both', 'from setHeader');
      response.writeHead(200, 'Fine', {
        'X-From-Head': 'head',
        'X-BOTH': 'from writeHead',
        'X-List': ['one', 'two'],
      });
      response.end('ok');
    });

    expect(await captured).toEqual({
      status: 200,
      headers: {
        'x-from-set': 'set',
        'set-cookie': ['a=1', 'b=2'],
        'x-count': '3',
        'x-both': 'from writeHead',
        'x-from-head': 'head',
        'x-list': ['one', 'two'],
      },
      body: Buffer.from('ok'),
    });
    settled.resolve();
    const received = await client.response;
    expect(received).toMatchObject({
      status: 200,
      statusMessage: 'Fine',
      body: Buffer.from('ok'),
    });
    expect(received.headers).toMatchObject({
      'x-from-set': 'set',
      'set-cookie': ['a=1', 'b=2'],
      'x-count': '3',
      'x-both': 'from writeHead',
      'x-from-head': 'head',
      'x-list': 'one, two',
    });
  });

  it("reads writeHead's headers given as a flat list of names and values", async () => {
    const { client, captured, settled } = exchange((response) => {
      response.writeHead(202, ['X-A', '1', 'X-B', '2']);
      response.end();
    });

    expect(await captured).toEqual({
      status: 202,
      headers: { 'x-a': '1', 'x-b': '2' },
      body: Buffer.alloc(0),
    });
    settled.resolve();
    const received = await client.response;
    expect(received.status).toBe(202);
    expect(received.headers).toMatchObject({ 'x-a': '1', 'x-b': '2' });
    expect(received.body).toEqual(Buffer.alloc(0));
  });

  it('takes the status from statusCode when writeHead is never called', async () => {
    const { client, captured, settled } = exchange((response) => {
      response.statusCode = 202;
      response.setHeader('Content-Type', 'text/plain; charset=utf-8');
      response.end('queued #1', 'utf8');
    });

    expect(await captured).toEqual({
      status: 202,
      headers: { 'content-type': 'text/plain; charset=utf-8' },
      body: Buffer.from('queued #1'),
    });
    settled.resolve();
    const received = await client.response;
    expect(received.status).toBe(202);
    expect(received.headers['content-type']).toBe('text/plain; charset=utf-8');
    expect(received.body.toString()).toBe('queued #1');
  });

  it('takes Buffer, Uint8Array and string chunks in their encodings', async () => {
    const pooled = Buffer.from('--ld--');
    // A view into a larger buffer, at an offset.
    const view = new Uint8Array(pooled.buffer, pooled.byteOffset + 2, 2);
    const expected = Buffer.concat([
      Buffer.from('hello wor'),
      Buffer.from('ld!'),
      Buffer.from([0x20, 0xe9, 0x00, 0xff]),
    ]);
    const { client, captured, settled } = exchange((response) => {
      response.write('68656c6c6f', 'hex');
      response.write(' ');
      response.write(Buffer.from('wor'));
      response.write(view);
      response.write('IQ==', 'base64');
      response.write(new Uint8Array([0x20]));
      response.end('\u00e9\u0000\u00ff', 'latin1');
    });

    expect((await captured).body).toEqual(expected);
    settled.resolve();
    expect((await client.response).body).toEqual(expected);
  });

  it('answers write at once, and calls its callbacks', async () => {
    const calls: string[] = [];
    const writes: boolean[] = [];
    const ended = deferred();
    const { client, captured, settled } = exchange((response) => {
      writes.push(response.write('a', () => calls.push('write')));
      writes.push(
        response.write('b', 'utf8', () => calls.push('write with encoding')),
      );
      response.end('c', () => {
        calls.push('end');
        ended.resolve();
      });
    });

    expect((await captured).body.toString()).toBe('abc');
    await turns();
    expect(writes).toEqual([true, true]);
    expect(calls).toEqual(['write', 'write with encoding']);

    settled.resolve();
    await ended.promise;
    expect(calls).toEqual(['write', 'write with encoding', 'end']);
    expect((await client.response).body.toString()).toBe('abc');
  });

  it("calls end's callback when it is end's only argument", async () => {
    const ended = deferred();
    const { client, captured, settled } = exchange((response) => {
      response.write('only write');
      response.end(() => ended.resolve());
    });

    expect((await captured).body.toString()).toBe('only write');
    settled.resolve();
    await ended.promise;
    expect((await client.response).body.toString()).toBe('only write');
  });

  it('gives the response its own methods back once it ends', async () => {
    const { client, captured, settled, served } = exchange((response) => {
      response.end('done');
    });
    const response = await served;
    await captured;
    expect(response.writeHead).toBe(ServerResponse.prototype.writeHead);
    expect(response.write).toBe(ServerResponse.prototype.write);
    expect(response.end).toBe(ServerResponse.prototype.end);
    settled.resolve();
    expect((await client.response).body.toString()).toBe('done');
  });

  it('writes through a writer that another wrapper kept, called after the capture ended', async () => {
    let kept: ((this: ServerResponse, chunk?: string) => unknown) | undefined;
    const { client, captured, settled, served } = exchange((response) => {
      // As a wrapper set up while the capture runs keeps it.
      kept = response.end as NonNullable<typeof kept>;
      kept.call(response, 'first');
    });
    const response = await served;
    await captured;
    settled.resolve();
    expect((await client.response).body.toString()).toBe('first');
    expect(() => kept!.call(response)).not.toThrow();
  });

  it('nests: a hold inside a hold sends once both have settled, and gives the methods back', async () => {
    const inner = deferred<CapturedResponse>();
    const innerSettled = deferred();
    const { client, captured, settled, served } = exchange((response) => {
      holdResponse(
        response,
        (capture) => {
          inner.resolve(capture);
          return innerSettled.promise;
        },
        () => {
          throw new Error('replace must not be called');
        },
      );
      response.end('nested');
    });
    const response = await served;
    expect((await inner.promise).body.toString()).toBe('nested');
    innerSettled.resolve();
    expect((await captured).body.toString()).toBe('nested');
    await turns();
    expect(client.responded()).toBe(false);
    settled.resolve();
    expect((await client.response).body.toString()).toBe('nested');
    expect(response.end).toBe(ServerResponse.prototype.end);
  });

  it("sends replace's answer instead when settle rejects", async () => {
    const failure = new Error('commit refused');
    const problem = Buffer.from('{"status":503}');
    const replace = jest.fn<Replace>(() => ({
      status: 503,
      headers: {
        'content-type': 'application/problem+json',
        'retry-after': '1',
        'content-length': String(problem.length),
      },
      body: problem,
    }));
    const ended = deferred();
    const { client, captured, settled } = exchange((response) => {
      response.setHeader('X-Set', 'set');
      response.writeHead(201, {
        'Content-Type': 'application/json',
        'X-Head': 'head',
      });
      response.end('{"ok":true}', () => ended.resolve());
    }, replace);

    expect((await captured).body.toString()).toBe('{"ok":true}');
    settled.reject(failure);
    const received = await client.response;
    expect(replace.mock.calls).toEqual([[failure]]);
    expect(received.status).toBe(503);
    expect(received.body).toEqual(problem);
    expect(received.headers).toMatchObject({
      'content-type': 'application/problem+json',
      'retry-after': '1',
      'content-length': String(problem.length),
    });
    expect(received.headers['x-set']).toBe(undefined);
    expect(received.headers['x-head']).toBe(undefined);
    await ended.promise;
  });

  it('cuts the connection when settle rejects after the headers went out', async () => {
    const replace = jest.fn<Replace>(() => ({
      status: 503,
      headers: {},
      body: Buffer.from('unavailable'),
    }));
    const { client, captured, settled, served } = exchange((response) => {
      response.end('partial answer');
    }, replace);
    const response = await served;
    await captured;
    response.flushHeaders();
    expect(response.headersSent).toBe(true);

    settled.reject(new Error('lost'));
    const received = await client.response;
    expect(replace).toHaveBeenCalledTimes(1);
    expect(response.destroyed).toBe(true);
    expect(received.status).toBe(200);
    expect(received.complete).toBe(false);
    expect(received.body.toString()).not.toContain('unavailable');
  });
});
