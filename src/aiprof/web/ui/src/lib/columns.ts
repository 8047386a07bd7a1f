// Which columns a table leaves out, and how it shows a figure the profile did not measure.
import type { Row } from "./api";

/** A cell the profile did not measure, and its tooltip. */
export const UNMEASURED = "—";
export const UNMEASURED_TITLE = "not measured in this profile";

export const isNull = (v: unknown): boolean => v === null || v === undefined || v === "";
const isEmpty = (v: unknown): boolean => isNull(v) || v === 0;

/** A column of measured figures (the API's Arrow type names of floating point numbers:
 * times, energies; an integer column is a key or a count, where null says something else,
 * such as the steps view's step null: no step markers). */
export const isFigureType = (type: string | null | undefined): boolean => /^(double|float|halffloat|decimal)/.test(type || "");

/** The columns a table leaves out (``hideEmpty``): those not measured (every row null, in a
 * table of ``unmeasured`` figures) and those empty (zero or null; with ``"null"``, null) on
 * every row. A number column of such a table with a null and a zero is kept: its zeros are
 * measured, its nulls are not. */
export function hiddenColumns(
  columns: { name: string; type: string }[], rows: Row[], hideEmpty: boolean | "null" | undefined, unmeasured = false,
): { notMeasured: string[]; empty: string[] } {
  if (!hideEmpty || !rows.length) return { notMeasured: [], empty: [] };
  const notMeasured: string[] = [];
  const empty: string[] = [];
  const test = hideEmpty === "null" ? isNull : isEmpty;
  for (const c of columns) {
    const vals = rows.map((r) => r[c.name]);
    const figures = unmeasured && isFigureType(c.type);
    if (figures && vals.every(isNull)) notMeasured.push(c.name);
    else if (figures && vals.some(isNull)) continue;
    else if (vals.every(test)) empty.push(c.name);
  }
  return { notMeasured, empty };
}
