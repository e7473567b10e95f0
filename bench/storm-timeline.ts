/**
 * The rows of bench:storm's second-by-second timeline (bench/storm.ts), and where the service's
 * admission figures go in them. A scrape of `/metrics` can take longer than a second (a busy
 * service answers late): the rows of the seconds it spans are written at their second, without
 * figures, and the figures, counted since the last scrape that answered, go to the row of the
 * second the answer came in. So a row's admissions are those since the last row with figures:
 * each counted once, and the rows in the order of their seconds.
 */

/** Admission figures read from `/metrics`: counters since the service started, gauges now. */
export type AdmissionScrape = Readonly<Record<string, number>>;

export interface AdmissionTimeline {
  /** The row of the second that just ended. */
  second(row: string): void;
  /** A scrape answered: its figures go to the latest row. */
  scraped(figures: AdmissionScrape): void;
  readonly rows: () => string;
}

export function admissionTimeline(): AdmissionTimeline {
  const rows: string[] = [];
  let counted: AdmissionScrape = {};
  return {
    second: (row) => {
      rows.push(row);
    },
    scraped: (figures) => {
      const last = rows.length - 1;
      if (last < 0) return;
      const delta = (k: string): number => (figures[k] ?? 0) - (counted[k] ?? 0);
      rows[last] += `[a${delta('admitted')} r${delta('refused') + delta('refused_late')} l${delta('refused_late')} w${figures.window ?? '?'} p${Math.round(figures.pace ?? 0)} d${Math.round((figures.lagMax ?? NaN) * 1000)}]`;
      counted = figures;
    },
    rows: () => rows.join(' '),
  };
}
