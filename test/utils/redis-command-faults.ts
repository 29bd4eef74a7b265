import { randomUUID } from 'node:crypto';
import { Redis, type RedisOptions } from 'ioredis';
import {
  ArmedFaults,
  type ArmedFault,
  type Fault,
  type HitFault,
} from './armed-faults.js';
import { until } from './barrier.js';

/**
 * Resolves at the client's next `event`. Not `events.once`, which rejects
 * on an `error` first: a connection killed by the server may reach the
 * client as a reset (`read ECONNRESET`) rather than an end, and a client
 * reconnecting may be refused a few times; both are the fault itself, not
 * a failure of the wait.
 */
export function nextEvent(
  client: Redis,
  event: 'ready' | 'close',
): Promise<void> {
  return new Promise((resolve) => client.once(event, () => resolve()));
}

/** Resolves once `client` is connected and ready for commands. */
export async function clientReady(client: Redis): Promise<void> {
  while (client.status !== 'ready') {
    await nextEvent(client, 'ready');
  }
}

/** A command as an ioredis client sends it. */
export interface RedisCommand {
  /** Its name, lower case (`set`, `evalsha`). */
  readonly name: string;
  /** Its arguments (strings, numbers or Buffers). */
  readonly args: readonly unknown[];
}

/**
 * When the client's connection is lost (`CLIENT KILL ID` from another
 * connection):
 * - `before`: before the command is written. Once the client has seen its
 *   connection close, the command goes to it: queued until it reconnects
 *   (ioredis's offline queue) or refused (`enableOfflineQueue: false`).
 * - `after`: once the server ran the command, before its reply reaches
 *   the client (the server was told not to send it, `CLIENT REPLY OFF`):
 *   the client holds a command without a reply, which it sends again once
 *   reconnected (`autoResendUnfulfilledCommands`, the default) or fails
 *   (`maxRetriesPerRequest: 0`).
 */
export type CommandFaultTiming = 'before' | 'after';

/** Where to lose the connection: at the first command `matches` takes. */
export type CommandFault = Fault<RedisCommand, CommandFaultTiming>;

/** The part of ioredis's `Command` the injector uses. */
interface DriverCommand {
  readonly name: string;
  readonly args: unknown[];
  readonly promise: Promise<unknown>;
}

type SendCommand = (command: DriverCommand, stream?: unknown) => unknown;

/** A command in RESP, as the server reads it. */
function resp(...args: string[]): string {
  return `*${args.length}\r\n${args
    .map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`)
    .join('')}`;
}

/**
 * Loses the connection of an ioredis client (one server, not a Cluster) at
 * a chosen command, as a network or a server would, without touching the
 * code that sends it: the client's `sendCommand` is wrapped, and the
 * connection is killed by the server (`CLIENT KILL ID`), asked from a
 * connection of the injector's own. While a fault is under way, the
 * client's other commands wait, and then go as the command did (after the
 * connection closed): nothing else reaches the server on the lost
 * connection after the command.
 */
export class RedisCommandFaults {
  private readonly armed = new ArmedFaults<RedisCommand, CommandFaultTiming>();
  /** Commands held while a fault is under way. */
  private held: Array<[DriverCommand, unknown]> | undefined;
  private restored = false;

  private constructor(
    private readonly client: Redis,
    private readonly admin: Redis,
    private readonly send: SendCommand,
    private readonly markerPrefix: string,
  ) {}

  /**
   * Starts watching the commands of `client`, killing its connections
   * through a connection to `server`. Markers (keys that tell a command
   * ran) are written under `markerPrefix`, each for a minute.
   */
  static install(
    client: Redis,
    server: RedisOptions,
    markerPrefix: string,
  ): RedisCommandFaults {
    const admin = new Redis(server);
    const target = client as unknown as { sendCommand: SendCommand };
    const faults = new RedisCommandFaults(
      client,
      admin,
      target.sendCommand.bind(client),
      markerPrefix,
    );
    target.sendCommand = (command, stream) => faults.intercept(command, stream);
    return faults;
  }

  /**
   * Loses the connection at the next command `fault` matches, at its
   * timing; its `injected` resolves once the client saw its connection
   * close.
   */
  arm(fault: CommandFault): ArmedFault<RedisCommand> {
    return this.armed.arm(fault);
  }

  /** Resolves once the client is connected and ready for commands. */
  ready(): Promise<void> {
    return clientReady(this.client);
  }

  /** Puts the client's `sendCommand` back and closes the injector's connection. */
  async restore(): Promise<void> {
    if (this.restored) {
      return;
    }
    this.restored = true;
    delete (this.client as unknown as { sendCommand?: SendCommand })
      .sendCommand;
    this.flush();
    await this.admin.quit().catch(() => this.admin.disconnect());
  }

  private intercept(command: DriverCommand, stream: unknown): unknown {
    if (this.held) {
      this.held.push([command, stream]);
      return command.promise;
    }
    const view: RedisCommand = { name: command.name, args: command.args };
    const fault = this.armed.take(view);
    if (!fault) {
      return this.send(command, stream);
    }
    this.held = [];
    this.inject(fault, command, stream).then(
      () => fault.injected(),
      (error: unknown) => {
        // The command goes as it is: the test fails on `injected`.
        this.flush(command, stream);
        fault.failed(error);
      },
    );
    return command.promise;
  }

  private async inject(
    fault: HitFault<RedisCommand, CommandFaultTiming>,
    command: DriverCommand,
    stream: unknown,
  ): Promise<void> {
    const socket = this.client.stream;
    if (this.client.status !== 'ready' || !socket?.writable) {
      throw new Error(
        `The client is ${this.client.status}: no connection to lose at ${command.name}`,
      );
    }
    const id = await this.connectionId(socket.localPort);
    const closed = nextEvent(this.client, 'close');
    if (fault.timing === 'before') {
      await this.admin.client('KILL', 'ID', id);
      await closed;
      this.flush(command, stream);
      return;
    }
    // The server runs the command, then writes a marker, and answers
    // neither (nor anything after them on this connection).
    const marker = `${this.markerPrefix}${randomUUID()}`;
    socket.write(resp('CLIENT', 'REPLY', 'OFF'));
    this.send(command, stream);
    socket.write(resp('SET', marker, '1', 'PX', '60000'));
    await until(
      async () => (await this.admin.exists(marker)) === 1,
      `the server to run ${command.name}`,
      10_000,
    );
    await this.admin.client('KILL', 'ID', id);
    await closed;
    this.flush();
  }

  /** Sends `first` (if given) and the commands held, in order. */
  private flush(first?: DriverCommand, stream?: unknown): void {
    const held = this.held ?? [];
    this.held = undefined;
    if (first) {
      this.send(first, stream);
    }
    for (const [command, commandStream] of held) {
      this.intercept(command, commandStream);
    }
  }

  /** The server's id of the client's connection from local port `port`. */
  private async connectionId(port: number | undefined): Promise<string> {
    const list = (await this.admin.call(
      'CLIENT',
      'LIST',
      'TYPE',
      'normal',
    )) as string;
    const line = list
      .split('\n')
      .find((entry) => entry.includes(` addr=127.0.0.1:${port} `));
    const id = line?.match(/^id=(\d+) /)?.[1];
    if (id === undefined) {
      throw new Error(`No connection of the server comes from port ${port}`);
    }
    return id;
  }
}
