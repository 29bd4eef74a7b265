import { Logger } from '@nestjs/common';

const logger = new Logger('Idempotency');

/** @internal A pg client as the driver keeps it, for a cancel request. */
export interface DriverClient {
  /** pg 8.20 and later; `activeQuery` before (deprecated since). */
  _getActiveQuery?: () => unknown;
  activeQuery?: unknown;
  processID?: number;
  secretKey?: number;
  connectionParameters?: { host?: string; port?: number };
  connection?: { constructor: new () => CancelConnection };
}

/** The driver's protocol connection, as a cancel request uses it. */
interface CancelConnection {
  connect(port: number | string, host?: string): void;
  cancel(processID: number, secretKey: number): void;
  on(event: 'connect' | 'error', listener: (error?: Error) => void): void;
  end(): void;
}

/**
 * @internal Asks the server to cancel the statement that `client` runs, over a
 * connection of its own (PostgreSQL's cancel request, as the driver sends
 * it; PgBouncer forwards it to the right server connection).
 */
export function cancelStatement(client: DriverClient): void {
  const { host = 'localhost', port = 5432 } = client.connectionParameters ?? {};
  const Connection = client.connection?.constructor;
  if (!Connection || client.processID === undefined) {
    return;
  }
  const connection = new Connection();
  connection.on('error', (error) => {
    logger.warn(
      `Cancelling the statement of an abandoned request failed: ${error?.message ?? 'unknown error'}`,
    );
  });
  connection.on('connect', () => {
    connection.cancel(client.processID!, client.secretKey ?? 0);
  });
  if (host.startsWith('/')) {
    connection.connect(`${host}/.s.PGSQL.${port}`);
  } else {
    connection.connect(port, host);
  }
}

/** @internal Whether `client` runs a statement now. */
export function runningStatement(client: DriverClient): boolean {
  return Boolean(
    client._getActiveQuery ? client._getActiveQuery() : client.activeQuery,
  );
}
