/** A number as printed: `n/a` when it was not measured. */
export const fixed = (value: number | undefined, digits: number): string =>
  value === undefined || Number.isNaN(value) ? 'n/a' : value.toFixed(digits);

/** A column: title, width (negative: left-aligned) and cell. */
export type Column<T> = [string, number, (row: T) => string];

/** Prints `rows` to the console, one line each, under a header. */
export function printTable<T>(
  rows: readonly T[],
  columns: readonly Column<T>[],
): void {
  const line = (cells: string[]) =>
    cells
      .map((cell, i) =>
        columns[i][1] < 0
          ? cell.padEnd(-columns[i][1])
          : cell.padStart(columns[i][1]),
      )
      .join(' ');
  const header = line(columns.map(([title]) => title));
  console.log(header);
  console.log('-'.repeat(header.length));
  for (const row of rows) {
    console.log(line(columns.map(([, , cell]) => cell(row))));
  }
}
