/** `sendInPlaceOfEmpty` (response-capture.ts), over a real server. */
import type { ServerResponse } from 'node:http';
import {
  sendInPlaceOfEmpty,
  type CapturedResponse,
} from './response-capture.js';
import { ResponseServer } from '../../test/utils/response-server.js';

const server = new ResponseServer();

describe('sendInPlaceOfEmpty', () => {
  /** Every byte value, in an order no encoding would keep by chance. */
  const stored: CapturedResponse = {
    status: 202,
    headers: {
      'content-type': 'application/octet-stream',
      'content-length': '256',
      link: ['</a>; rel="a"', '</b>; rel="b"'],
    },
    body: Buffer.from(
      Array.from({ length: 256 }, (_, i) => (i * 37 + 11) % 256),
    ),
  };

  /** Serves one request: `respond` writes it as a platform would. */
  function serve(respond: (response: ServerResponse) => void) {
    server.handle = (response) => {
      sendInPlaceOfEmpty(response, stored);
      respond(response);
    };
    return server.send().response;
  }

  it('sends the replacement for an empty answer written as Express does', async () => {
    const received = await serve((response) => {
      response.setHeader('x-middleware', 'kept');
      response.setHeader('content-type', 'text/html');
      response.statusCode = 204;
      response.end();
    });
    expect(received.status).toBe(202);
    expect(received.body.equals(stored.body)).toBe(true);
    expect(received.headers['content-type']).toBe('application/octet-stream');
    expect(received.headers['content-length']).toBe('256');
    expect(received.headers.link).toBe('</a>; rel="a", </b>; rel="b"');
    expect(received.headers['x-middleware']).toBe('kept');
  });

  it("sends the replacement for an empty answer written as Fastify does, keeping the platform's other headers", async () => {
    const received = await serve((response) => {
      response.writeHead(201, { 'content-length': '0', 'x-platform': 'kept' });
      response.end(null);
    });
    expect(received.status).toBe(202);
    expect(received.body.equals(stored.body)).toBe(true);
    expect(received.headers['content-length']).toBe('256');
    expect(received.headers['x-platform']).toBe('kept');
  });

  it('lets an answer with a body (an exception filter) go out unchanged', async () => {
    const problem = '{"status":500}';
    const ended = await serve((response) => {
      response.writeHead(500, { 'content-type': 'application/json' });
      response.end(problem);
    });
    expect(ended.status).toBe(500);
    expect(ended.body.toString()).toBe(problem);
    expect(ended.headers['content-type']).toBe('application/json');
    expect(ended.headers.link).toBe(undefined);

    const written = await serve((response) => {
      response.statusCode = 500;
      response.write('{"status":');
      response.end('500}');
    });
    expect(written.status).toBe(500);
    expect(written.body.toString()).toBe(problem);
  });
});
