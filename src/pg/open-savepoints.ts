import { TransactionUnfinishedError } from '../core/transaction.errors.js';

/**
 * A statement that begins or ends a savepoint, whole (one statement, as a
 * data library sends it, comments around it aside): its verb, then its
 * name, quoted or not.
 */
const SAVEPOINT_STATEMENT =
  /^\s*(?:\/\*.*?\*\/\s*)*(savepoint|release(?:\s+savepoint)?|rollback(?:\s+(?:work|transaction))?\s+to(?:\s+savepoint)?)\s+("(?:[^"]|"")+"|[^\s;"/-]+)\s*;?\s*(?:--[^\n]*\s*|\/\*.*?\*\/\s*)*$/is;

/** A savepoint's name as the server knows it: A to Z folded unless quoted. */
function nameOf(written: string): string {
  return written.startsWith('"')
    ? written.slice(1, -1).replaceAll('""', '"')
    : written.replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
}

/**
 * @internal The savepoints a handler's transaction has open, as its
 * statements are sent: a data library's nested transaction (Drizzle's
 * `tx.transaction()`, Prisma's nested `$transaction()`, TypeORM's
 * `manager.transaction()`, Kysely's savepoints) begins one and ends it
 * (`RELEASE` once its work is done, `ROLLBACK TO` once it failed), and so
 * does a handler by hand.
 *
 * One still open when the module commits is work the handler did not see
 * through (a nested transaction it did not await): its statements so far
 * would commit without the rest, and the rest, refused, never would. The
 * commit is refused ({@link refuseCommit}), and nothing commits.
 *
 * Read as sent, not as answered: a savepoint statement that fails aborts
 * the transaction, whose COMMIT then fails all the same.
 */
export class OpenSavepoints {
  private names: string[] | undefined;

  /** Notes what `statement` (its text, or a query config with `text`) does. */
  see(statement: unknown): void {
    const text =
      typeof statement === 'string'
        ? statement
        : (statement as { text?: unknown } | null)?.text;
    if (typeof text !== 'string') {
      return;
    }
    const found = SAVEPOINT_STATEMENT.exec(text);
    if (!found) {
      return;
    }
    const name = nameOf(found[2]);
    if (/^s/i.test(found[1])) {
      (this.names ??= []).push(name);
      return;
    }
    // A release ends the savepoint and those begun after it; a rollback to
    // it ends the nested transaction it stood for (the savepoint stays on
    // the server, with nothing in it).
    const at = this.names?.lastIndexOf(name) ?? -1;
    if (at >= 0) {
      this.names!.length = at;
    }
  }

  /**
   * @throws TransactionUnfinishedError when a savepoint is still open: the
   * transaction must not commit.
   */
  refuseCommit(): void {
    const open = this.names?.at(-1);
    if (open !== undefined) {
      throw new TransactionUnfinishedError(open);
    }
  }
}
