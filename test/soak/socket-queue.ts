import { readFile } from 'node:fs/promises';

/**
 * Bytes that arrived on the local TCP connection from port `localPort` to
 * port `remotePort` and that its process has not read yet (the kernel's
 * receive queue, as `/proc/net/tcp` shows it: Linux only).
 * @returns `undefined` where the kernel does not say, or no such connection
 * is found.
 */
export async function unreadBytes(
  localPort: number,
  remotePort: number,
): Promise<number | undefined> {
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = await readFile(table, 'utf8');
    } catch {
      continue;
    }
    // `sl local_address rem_address st tx_queue:rx_queue ...`, addresses as
    // hex `ip:port`.
    for (const line of text.split('\n').slice(1)) {
      const [, local, remote, , queues] = line.trim().split(/\s+/);
      if (
        local &&
        remote &&
        queues &&
        parseInt(local.split(':')[1], 16) === localPort &&
        parseInt(remote.split(':')[1], 16) === remotePort
      ) {
        return parseInt(queues.split(':')[1], 16);
      }
    }
  }
  return undefined;
}
