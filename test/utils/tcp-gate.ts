import {
  createConnection,
  createServer,
  type Server,
  type Socket,
} from 'node:net';
import type { AddressInfo } from 'node:net';
import { Barrier } from './barrier.js';

/**
 * A TCP proxy in front of the server of a URL (PostgreSQL unless the URL
 * gives a port). While it is closed, a new connection is accepted but not
 * forwarded until the test opens the gate again: the connecting client
 * simply waits, as it would behind a slow network. Lets a test hold a
 * reconnection (e.g. of a presence session) at a point of its choosing.
 * Established connections are only touched by {@link holdReplies} and
 * {@link cut}: a reply lost with its connection.
 */
export class TcpGate {
  private server?: Server;
  private barrier = new Barrier();
  private readonly sockets = new Set<Socket>();
  /** Established connections: the server's side, by the client's. */
  private readonly upstreams = new Map<Socket, Socket>();
  private port = 0;

  constructor(private readonly target: string) {
    // Open until told otherwise.
    this.barrier.open();
  }

  async start(): Promise<this> {
    const upstream = new URL(this.target);
    this.server = createServer((client) => {
      this.sockets.add(client);
      client.on('close', () => this.sockets.delete(client));
      client.on('error', () => client.destroy());
      client.pause();
      const barrier = this.barrier;
      void barrier.wait().then(() => {
        if (client.destroyed) {
          return;
        }
        const server = createConnection({
          host: upstream.hostname,
          port: Number(upstream.port || 5432),
        });
        this.sockets.add(server);
        this.upstreams.set(client, server);
        server.on('close', () => {
          this.sockets.delete(server);
          this.upstreams.delete(client);
          client.destroy();
        });
        server.on('error', () => server.destroy());
        client.on('close', () => server.destroy());
        client.pipe(server);
        server.pipe(client);
        client.resume();
      });
    });
    await new Promise<void>((resolve) =>
      this.server!.listen(0, '127.0.0.1', resolve),
    );
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  /** `target` with the gate's host and port: connections through the gate. */
  get url(): string {
    const url = new URL(this.target);
    url.hostname = '127.0.0.1';
    url.port = String(this.port);
    return url.href;
  }

  /** New connections wait from now on, until {@link open}. */
  close(): void {
    this.barrier = new Barrier();
  }

  /** Forwards the waiting connections, and every new one. */
  open(): void {
    this.barrier.open();
  }

  /** Resolves once `count` connections wait at the closed gate. */
  reached(count = 1): Promise<void> {
    return this.barrier.reached(count);
  }

  /**
   * Stops forwarding what the server sends on the connections established
   * now: requests still reach it, their replies do not come back.
   */
  holdReplies(): void {
    for (const [client, server] of this.upstreams) {
      server.unpipe(client);
      server.pause();
    }
  }

  /**
   * Ends every established connection, as a network failure would: what
   * they held back is lost. New connections go through.
   */
  cut(): void {
    for (const socket of this.sockets) {
      socket.destroy();
    }
  }

  async stop(): Promise<void> {
    this.barrier.open();
    for (const socket of this.sockets) {
      socket.destroy();
    }
    await new Promise<void>(
      (resolve) => this.server?.close(() => resolve()) ?? resolve(),
    );
  }
}
