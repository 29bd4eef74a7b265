import { TransactionUnfinishedError } from '../core/transaction.errors.js';
import { OpenSavepoints } from './open-savepoints.js';

/** The savepoints left open once `statements` were sent, innermost last. */
function openAfter(...statements: unknown[]): string | undefined {
  const savepoints = new OpenSavepoints();
  for (const statement of statements) {
    savepoints.see(statement);
  }
  try {
    savepoints.refuseCommit();
    return undefined;
  } catch (error) {
    expect(error).toBeInstanceOf(TransactionUnfinishedError);
    return /savepoint "(.*)"/.exec((error as Error).message)?.[1];
  }
}

describe('OpenSavepoints', () => {
  it('lets a transaction with no savepoint commit', () => {
    expect(openAfter('INSERT INTO t VALUES (1)', 'SELECT 1')).toBeUndefined();
  });

  it('refuses the commit while a savepoint is open, naming the innermost', () => {
    expect(openAfter('SAVEPOINT a', 'savepoint B')).toBe('b');
    expect(openAfter({ text: 'savepoint sp1', values: [] })).toBe('sp1');
  });

  it('ends a savepoint by release or rollback to it, in any spelling', () => {
    expect(openAfter('SAVEPOINT a', 'RELEASE SAVEPOINT a')).toBeUndefined();
    expect(openAfter('SAVEPOINT a', 'release a;')).toBeUndefined();
    expect(openAfter('SAVEPOINT a', 'ROLLBACK TO SAVEPOINT A')).toBeUndefined();
    expect(openAfter('SAVEPOINT a', ' rollback work to a ')).toBeUndefined();
    expect(
      openAfter('SAVEPOINT a', 'ROLLBACK TRANSACTION TO SAVEPOINT a'),
    ).toBeUndefined();
  });

  it('ends the savepoints begun after the one released', () => {
    expect(
      openAfter('SAVEPOINT a', 'SAVEPOINT b', 'RELEASE SAVEPOINT a'),
    ).toBeUndefined();
    expect(openAfter('SAVEPOINT a', 'SAVEPOINT b', 'RELEASE SAVEPOINT b')).toBe(
      'a',
    );
    // The newest of two of one name is the one a release ends.
    expect(openAfter('SAVEPOINT a', 'SAVEPOINT a', 'RELEASE a')).toBe('a');
  });

  it('reads quoted names as the server does', () => {
    expect(openAfter('SAVEPOINT "Nested"', 'RELEASE "Nested"')).toBeUndefined();
    expect(openAfter('SAVEPOINT "Nested"', 'RELEASE nested')).toBe('Nested');
    expect(openAfter('SAVEPOINT "a ""b"""', 'RELEASE "a ""b"""')).toBe(
      undefined,
    );
  });

  it('reads a statement with comments around it, and folds A to Z only, as the server does', () => {
    expect(openAfter('SAVEPOINT a', 'RELEASE a /* done */')).toBeUndefined();
    expect(openAfter('SAVEPOINT a', 'RELEASE a -- done\n')).toBeUndefined();
    expect(openAfter('/* nested */ SAVEPOINT a')).toBe('a');
    expect(openAfter('SAVEPOINT Ä', 'RELEASE ä')).toBe('Ä');
  });

  it('reads each statement of a query of several, and a statement after a line comment, as the server runs them', () => {
    expect(openAfter('-- a nested unit\nSAVEPOINT nested')).toBe('nested');
    expect(openAfter('SAVEPOINT nested; SELECT 1')).toBe('nested');
    expect(openAfter('SELECT 1; SAVEPOINT nested;')).toBe('nested');
    expect(
      openAfter('SAVEPOINT nested', '-- done\nRELEASE SAVEPOINT nested'),
    ).toBeUndefined();
    expect(
      openAfter('SAVEPOINT nested', '/* undo */ ROLLBACK TO SAVEPOINT nested'),
    ).toBeUndefined();
    expect(
      openAfter('SAVEPOINT nested', 'RELEASE SAVEPOINT nested; SELECT 1'),
    ).toBeUndefined();
    expect(openAfter('SAVEPOINT a; SAVEPOINT b; RELEASE b')).toBe('a');
    expect(openAfter('/* a /* nested */ comment */ SAVEPOINT a')).toBe('a');
  });

  it('reads no savepoint statement in a literal, a quoted name or a comment', () => {
    expect(
      openAfter("SELECT 'x; SAVEPOINT a; y'", 'SELECT $$; SAVEPOINT b;$$'),
    ).toBeUndefined();
    expect(openAfter("SELECT E'\\'; SAVEPOINT c'")).toBeUndefined();
    expect(openAfter("SELECT E'it\\'s'; SAVEPOINT d")).toBe('d');
    expect(openAfter('SELECT $tag$ $$; SAVEPOINT e; $tag$')).toBeUndefined();
    expect(openAfter('SELECT 1 -- ; SAVEPOINT f')).toBeUndefined();
    expect(openAfter('SELECT "a;b" FROM t; RELEASE x')).toBeUndefined();
    expect(openAfter('SELECT $1::text; SAVEPOINT g')).toBe('g');
  });

  it('reads a dollar sign within an identifier as no quote', () => {
    expect(openAfter('SELECT price$usd$ FROM t; SAVEPOINT nested')).toBe(
      'nested',
    );
  });

  it('notes an end of the transaction sent by hand, chained or not, and no end to a savepoint', () => {
    const sent = (...statements: string[]) => {
      const savepoints = new OpenSavepoints();
      statements.forEach((statement) => savepoints.see(statement));
      return savepoints.endSent;
    };
    for (const end of [
      'COMMIT',
      'commit and chain',
      'END',
      'ABORT',
      'ROLLBACK AND CHAIN',
      'rollback work',
      "PREPARE TRANSACTION 'x'",
      'SELECT 1; COMMIT; BEGIN',
      '-- done\nCOMMIT',
    ]) {
      expect({ end, sent: sent(end) }).toEqual({ end, sent: true });
    }
    for (const other of [
      'ROLLBACK TO nested',
      'rollback transaction to savepoint nested',
      "SELECT 'COMMIT'",
      'SELECT 1 -- ; COMMIT',
      'INSERT INTO commits VALUES (1)',
      'SELECT end_date FROM t',
    ]) {
      expect({ other, sent: sent(other) }).toEqual({ other, sent: false });
    }
  });

  it('ignores what is not a savepoint statement of its own', () => {
    expect(openAfter('ROLLBACK', 'SELECT 1', undefined, { name: 'q' })).toBe(
      undefined,
    );
    expect(openAfter("INSERT INTO t VALUES ('SAVEPOINT a')")).toBeUndefined();
    // An end of no savepoint known changes nothing.
    expect(openAfter('SAVEPOINT a', 'RELEASE b')).toBe('a');
  });
});
