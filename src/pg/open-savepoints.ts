import { TransactionUnfinishedError } from '../core/transaction.errors.js';

/**
 * A statement that begins or ends a savepoint (its comments removed): its
 * verb, then its name, quoted or not.
 */
const SAVEPOINT_STATEMENT =
  /^\s*(savepoint|release(?:\s+savepoint)?|rollback(?:\s+(?:work|transaction))?\s+to(?:\s+savepoint)?)\s+("(?:[^"]|"")+"|[^\s"]+)\s*$/is;

/**
 * A statement that ends the transaction (`COMMIT`, `END`, `ABORT`,
 * `ROLLBACK` but to a savepoint, `PREPARE TRANSACTION`), chained to another
 * one or not.
 */
const END_STATEMENT =
  /^\s*(?:commit|end|abort|prepare\s+transaction|rollback(?!(?:\s+(?:work|transaction))?\s+to\b))\b/i;

/**
 * Whether a query may hold a statement of either kind: one of their verbs
 * at its start or after a semicolon (comments before it aside). Most
 * queries skip the reading on this test alone.
 */
const MAY_HOLD =
  /(?:^|;)\s*(?:(?:--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/)\s*)*(?:savepoint|release|rollback|commit|end|abort|prepare)\b/i;

/** The tag of a dollar-quoted string opening at the start (`$$`, `$body$`). */
const DOLLAR_TAG = /\$(?:[A-Za-z_\u0080-\uffff][\w\u0080-\uffff]*)?\$/y;

/** What an identifier is made of: a `$` within one opens no dollar quote. */
const IDENTIFIER_CHARACTER = /[\w$\u0080-\uffff]/;

/**
 * The statements of a query as the server splits them: at semicolons
 * outside quotes, dollar-quoted strings and comments, each with its
 * comments (`--` and nested `/* *\/`) blanked out.
 */
function statementsOf(text: string): string[] {
  const statements: string[] = [];
  let current = '';
  let from = 0;
  let at = 0;
  const cut = (to: number, then: string) => {
    current += text.slice(from, to) + then;
  };
  while (at < text.length) {
    const char = text[at];
    const next = text[at + 1];
    if (char === '-' && next === '-') {
      cut(at, ' ');
      const end = text.indexOf('\n', at);
      at = from = end < 0 ? text.length : end;
    } else if (char === '/' && next === '*') {
      cut(at, ' ');
      let depth = 0;
      do {
        if (text.startsWith('/*', at)) {
          depth += 1;
          at += 2;
        } else if (text.startsWith('*/', at)) {
          depth -= 1;
          at += 2;
        } else {
          at += 1;
        }
      } while (depth > 0 && at < text.length);
      from = at;
    } else if (char === "'" || char === '"') {
      // E'...' strings escape with backslashes; others double the quote.
      const escapes = char === "'" && /[eE]/.test(text[at - 1] ?? '');
      at += 1;
      while (at < text.length) {
        if (escapes && text[at] === '\\') {
          at += 2;
        } else if (text[at] === char) {
          at += 1;
          if (text[at] !== char) {
            break;
          }
          at += 1;
        } else {
          at += 1;
        }
      }
    } else if (char === '$') {
      DOLLAR_TAG.lastIndex = at;
      const tag = IDENTIFIER_CHARACTER.test(text[at - 1] ?? '')
        ? undefined
        : DOLLAR_TAG.exec(text)?.[0];
      if (tag) {
        const end = text.indexOf(tag, at + tag.length);
        at = end < 0 ? text.length : end + tag.length;
      } else {
        at += 1;
      }
    } else if (char === ';') {
      cut(at, '');
      statements.push(current);
      current = '';
      at = from = at + 1;
    } else {
      at += 1;
    }
  }
  cut(text.length, '');
  statements.push(current);
  return statements;
}

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
  /**
   * Whether the handler sent a statement that ends the transaction (a
   * `COMMIT` or `ROLLBACK` by hand, chained to another one or not): what
   * it wrote before may have committed without the record. Read where the
   * server cannot tell any more (a chained transaction since aborted).
   */
  endSent = false;

  /** Notes what `statement` (its text, or a query config with `text`) does. */
  see(statement: unknown): void {
    const text =
      typeof statement === 'string'
        ? statement
        : (statement as { text?: unknown } | null)?.text;
    if (typeof text !== 'string') {
      return;
    }
    // One statement without comments, as data libraries send them: the
    // anchored patterns alone, which fail at its first word.
    const simple =
      !text.includes(';') && !text.includes('--') && !text.includes('/*');
    if (!simple && !MAY_HOLD.test(text)) {
      return;
    }
    for (const sql of simple ? [text] : statementsOf(text)) {
      const found = SAVEPOINT_STATEMENT.exec(sql);
      if (found) {
        this.saw(found[1], nameOf(found[2]));
      } else if (END_STATEMENT.test(sql)) {
        this.endSent = true;
      }
    }
  }

  /** Notes a savepoint statement: its verb, and the savepoint's name. */
  private saw(verb: string, name: string): void {
    if (/^s/i.test(verb)) {
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
