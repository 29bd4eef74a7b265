import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HttpService } from '@nestjs/axios';
import axios from 'axios';
import {
  fetchFromHttpService,
  IdempotentClient,
} from '../../src/client/index.js';
import { derivedKeyOf } from '../utils/derived-keys.js';
import { send, startTestApp, type TestApp } from '../utils/test-app.js';
import { outgoingModule } from './outgoing.module.js';
import { ScriptedDownstream } from './scripted-downstream.js';

describe('fetchFromHttpService(): outgoing calls through @nestjs/axios', () => {
  let downstream: ScriptedDownstream;
  let target: TestApp;
  /** The key of each request that went through the application's axios instance. */
  const sent: string[] = [];

  beforeAll(async () => {
    downstream = await new ScriptedDownstream().start();
    const instance = axios.create();
    instance.interceptors.request.use((config) => {
      sent.push(
        String(
          config.headers['Idempotency-Key'] ??
            config.headers['idempotency-key'],
        ),
      );
      return config;
    });
    target = await startTestApp({
      imports: [outgoingModule(downstream.url)],
      idempotency: {
        outgoing: {
          fetch: fetchFromHttpService(new HttpService(instance)),
          retry: { baseDelayMs: 1, maxDelayMs: 10 },
          timeoutMs: 1_500,
        },
      },
    });
  });
  afterAll(async () => {
    await target.close();
    await downstream.stop();
  });

  const pay = (key: string) =>
    send(target, '/pay', { key, body: { amount: 900, reference: key } });

  it('retries through axios with the same key, and charges once', async () => {
    downstream.script('axios-1', 'drop-after', '503', 'hang', '429');
    const before = sent.length;
    const response = await pay('axios-1');
    expect(response.status).toBe(201);
    const body = (await response.json()) as { charge: unknown };
    const derived = await derivedKeyOf(target.db, 'axios-1');
    expect(body.charge).toEqual(downstream.charges.get(derived));
    const calls = downstream.callsWith('axios-1');
    expect(calls.map((call) => call.outcome)).toEqual([
      'drop-after',
      '503',
      'hang',
      '429',
      'charged',
    ]);
    expect(calls.map((call) => call.key)).toEqual(Array(5).fill(derived));
    expect(sent.slice(before)).toEqual(Array(5).fill(derived));
  });

  it('hands a final answer over as fetch would: a 400 is refused, with its body', async () => {
    downstream.script('axios-2', '400');
    const response = await send(target, '/pay', {
      key: 'axios-2',
      body: { amount: 900, reference: 'axios-2', mapRefusal: true },
    });
    expect(response.status).toBe(402);
    expect(await response.json()).toEqual({
      declined: { error: 'card_declined' },
      status: 400,
    });
    expect(downstream.callsWith('axios-2').map((call) => call.key)).toEqual([
      await derivedKeyOf(target.db, 'axios-2'),
    ]);
  });
});

describe('fetchFromHttpService(): an answer whose reason phrase a Response refuses', () => {
  /** Requests received, each answered 201 with a control character in its reason phrase. */
  let received = 0;
  let server: Server;
  let url = '';

  beforeAll(async () => {
    server = createServer((request, response) => {
      request.resume();
      request.on('end', () => {
        received += 1;
        // Written by hand: Node.js refuses to write such a reason phrase.
        response.socket?.end(
          'HTTP/1.1 201 Cre\x7Fated\r\ncontent-type: application/json\r\n' +
            'content-length: 13\r\nconnection: close\r\n\r\n{"id":"ch_1"}',
        );
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/charges`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    server.close();
    await once(server, 'close');
  });
  beforeEach(() => {
    received = 0;
  });

  it('is an answer, as fetch gives it, with the reason phrase left out', async () => {
    const viaFetch = await fetch(url, { method: 'POST', body: '{}' });
    expect([viaFetch.status, await viaFetch.text()]).toEqual([
      201,
      '{"id":"ch_1"}',
    ]);
    const response = await fetchFromHttpService(
      new HttpService(axios.create()),
    )(url, { method: 'POST', body: '{}' });
    expect({
      status: response.status,
      statusText: response.statusText,
      body: await response.text(),
    }).toEqual({ status: 201, statusText: '', body: '{"id":"ch_1"}' });
    expect(received).toBe(2);
  });

  it('ends the operation of an IdempotentClient at its first attempt: it is not sent again as if unanswered', async () => {
    const client = new IdempotentClient({
      attempts: 3,
      baseDelayMs: 1,
      maxDelayMs: 5,
      fetch: fetchFromHttpService(new HttpService(axios.create())),
    });
    const { response, attempts } = await client.send(url, { body: '{}' });
    expect([response.status, attempts, await response.text()]).toEqual([
      201,
      1,
      '{"id":"ch_1"}',
    ]);
    expect(received).toBe(1);
  });
});

describe('fetchFromHttpService(): an answer that axios hands over without data', () => {
  it('has no body: neither the JSON of an empty string nor of nothing', async () => {
    // An adapter of the application's (a stand-in, a cache) that answers
    // without any body, as axios lets one do.
    const instance = axios.create({
      adapter: (config) =>
        Promise.resolve({
          data: undefined,
          status: 201,
          statusText: 'Created',
          headers: { location: '/charges/ch_1' },
          config,
        }),
    });
    const response = await fetchFromHttpService(new HttpService(instance))(
      'http://downstream.example/charges',
      { method: 'POST', body: '{}' },
    );
    expect({
      status: response.status,
      location: response.headers.get('location'),
      body: await response.text(),
    }).toEqual({ status: 201, location: '/charges/ch_1', body: '' });
  });
});
