import { relative } from 'node:path';

/**
 * Jest's default reporter prints nothing of a test file whose tests all
 * skipped, not even what it logged: a suite that skips itself for a missing
 * broker or PgBouncer, and logs why, would tell no one. This reporter, beside
 * the default one, names each such file with what it logged: its reason.
 */
export default class SkipReasonsReporter {
  /** @param {{ rootDir: string, verbose?: boolean, silent?: boolean }} globalConfig */
  constructor(globalConfig) {
    this.globalConfig = globalConfig;
  }

  /**
   * @param {{ context: { config: { verbose?: boolean, silent?: boolean } } }} test
   * @param {{ skipped: boolean, testFilePath: string, console?: Array<{ message: string }> }} result
   */
  onTestResult(test, result) {
    if (!result.skipped) {
      return;
    }
    const { config } = test.context;
    // Verbose runs (and runs of a single file) print the output as it comes;
    // silent ones print none.
    const printed =
      (config.verbose ?? this.globalConfig.verbose) ||
      (config.silent ?? this.globalConfig.silent);
    const reasons = printed
      ? []
      : (result.console?.map(({ message }) => message) ?? [
          '(it logged no reason)',
        ]);
    process.stderr.write(
      [
        ` SKIP  ${relative(this.globalConfig.rootDir, result.testFilePath)}`,
        ...reasons.map((reason) => `  ${reason}`),
        '',
      ].join('\n'),
    );
  }
}
