import {
  Agent,
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { ArmedFaults, type ArmedFault, type Fault } from './armed-faults.js';

/** A request as the proxy received it. */
export interface HttpRequestView {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
  /**
   * The status of the server's answer, for a fault `after` (matched once
   * the server answered): a request refused by the server (a failed
   * condition) took no effect, and a fault meant for one that took effect
   * can pass it by.
   */
  readonly answered?: number;
}

/**
 * When the client's connection is reset (its socket destroyed by the
 * proxy):
 * - `before`: once the request arrived, before it is forwarded: the server
 *   never sees it.
 * - `after`: once the server answered it (it took effect), instead of the
 *   answer: the client cannot know.
 */
export type RequestFaultTiming = 'before' | 'after';

/** Where to reset the connection: at the first request `matches` takes. */
export type RequestFault = Fault<HttpRequestView, RequestFaultTiming>;

async function bodyOf(message: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of message) {
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/**
 * An HTTP proxy in front of a server (an HTTP API such as DynamoDB's, here
 * dynalite) that resets a client's connection at a chosen request, before
 * the server sees it or once the server answered it, as a network would.
 * Every other request is forwarded as it is, and its answer returned.
 */
export class HttpRequestFaults {
  private server?: Server;
  private readonly armed = new ArmedFaults<
    HttpRequestView,
    RequestFaultTiming
  >();
  private readonly sockets = new Set<Socket>();
  private readonly agent = new Agent({ keepAlive: true });
  private port = 0;

  constructor(private readonly target: string) {}

  async start(): Promise<this> {
    const upstream = new URL(this.target);
    this.server = createServer((request, response) => {
      void (async () => {
        const view: HttpRequestView = {
          method: request.method ?? 'GET',
          url: request.url ?? '/',
          headers: request.headers,
          body: await bodyOf(request),
        };
        const early = this.armed.take(view, 'before');
        if (early) {
          request.socket.destroy();
          early.injected();
          return;
        }
        const forwarded = httpRequest({
          host: upstream.hostname,
          port: upstream.port,
          method: view.method,
          path: view.url,
          headers: view.headers,
          agent: this.agent,
        });
        forwarded.end(view.body);
        let answer: IncomingMessage;
        try {
          [answer] = (await new Promise((resolve, reject) => {
            forwarded.once('response', (message) => resolve([message]));
            forwarded.once('error', reject);
          })) as [IncomingMessage];
        } catch {
          request.socket.destroy();
          return;
        }
        const body = await bodyOf(answer);
        const fault = this.armed.take(
          { ...view, answered: answer.statusCode },
          'after',
        );
        if (fault) {
          request.socket.destroy();
          fault.injected();
          return;
        }
        response.writeHead(answer.statusCode ?? 502, answer.headers);
        response.end(body);
      })();
    });
    this.server.on('connection', (socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    await new Promise<void>((resolve) =>
      this.server!.listen(0, '127.0.0.1', resolve),
    );
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  /** The proxy's URL: requests to it reach the target. */
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /**
   * Resets the connection of the next request `fault` matches, at its
   * timing; its `injected` resolves once the connection was reset.
   */
  arm(fault: RequestFault): ArmedFault<HttpRequestView> {
    return this.armed.arm(fault);
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) {
      socket.destroy();
    }
    this.agent.destroy();
    await new Promise<void>(
      (resolve) => this.server?.close(() => resolve()) ?? resolve(),
    );
  }
}
