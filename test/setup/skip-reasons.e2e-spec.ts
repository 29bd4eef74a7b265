import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

const path = (relative: string) =>
  fileURLToPath(new URL(relative, import.meta.url));
const JEST = path('../../node_modules/jest/bin/jest.js');
const FIXTURES = path('../fixtures/skipped-suites');
const REPORTER = path('./skip-reasons.reporter.js');

/** Runs jest on the fixture test files, with `reporters`. */
async function runJest(
  reporters: string[],
): Promise<{ code: number | null; output: string }> {
  const config = {
    rootDir: FIXTURES,
    testMatch: ['<rootDir>/*.fixture.js'],
    transform: {},
    reporters,
  };
  const child = spawn(
    process.execPath,
    [JEST, '--config', JSON.stringify(config), '--ci'],
    {
      cwd: FIXTURES,
      env: { ...process.env, NODE_OPTIONS: '--experimental-vm-modules' },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, output };
}

describe('the output of a jest run with skipped test files', () => {
  const REASON = 'Skipping the broker tests: nothing listens on 127.0.0.1:1';

  it("leaves out a skipped file's output with the default reporter alone", async () => {
    const { code, output } = await runJest(['default']);
    expect(code).toBe(0);
    expect(output).toContain('Test Suites: 2 skipped, 1 passed');
    expect(output).toContain('the output of a file whose tests ran');
    expect(output).not.toContain(REASON);
  });

  it('names each file whose tests all skipped, with what it logged as its reason, with the reporters of npm test', async () => {
    const { code, output } = await runJest(['default', REPORTER]);
    expect(code).toBe(0);
    expect(output).toContain(` SKIP  skipped.fixture.js\n  ${REASON}\n`);
    expect(output).toContain(
      ' SKIP  silent.fixture.js\n  (it logged no reason)\n',
    );
    expect(output).not.toContain('SKIP  passing.fixture.js');
    expect(output).toContain('Test Suites: 2 skipped, 1 passed');
  });
});
