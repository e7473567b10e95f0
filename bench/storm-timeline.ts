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
      rows[last] += `[a${delta('admitted')} r${delta('refused') + delta('refused_late')} l${delta('refused_late')} w${figures.window ?? '?'} p${Math.round(figures.pace ?? 0)} d${Math.round((figures.lagMax ?? NaN) * 1000)}${figures.waiting !== undefined ? ` q${figures.waiting}` : ''}]`;
      counted = figures;
    },
    rows: () => rows.join(' '),
  };
}

/** One second of a storm: the share of one core the service and the fleet used, and the whole machine (100 = a whole core). */
export interface BusySecond {
  readonly service: number;
  readonly fleet: number;
  readonly machine: number;
}

/** Who the storm waited for, over its seconds (`paceSetBy`). */
export interface PaceSetters {
  readonly seconds: number;
  /** Seconds the service was busy (≥ `busy` % of its core): it set the pace. */
  readonly service: number;
  /** Seconds the fleet was out of CPU (≥ `busy` % of the cores it has) while the service was not. */
  readonly fleet: number;
  /** Seconds every core was busy (≥ `busy` %) while neither the service nor the fleet was: other work on the machine took the CPU. */
  readonly crowded: number;
  /** Whether the fleet or other work set the pace for a quarter of the seconds or more: the run measures the bench machine, not the service. */
  readonly machineBound: boolean;
}

/**
 * Who set the pace of a storm, second by second: the service when it was busy; the fleet when
 * it was out of CPU and the service was not (its hubs then time out of connections the
 * service would have served: the clients' own starvation, which a real fleet of separate
 * devices does not have); other work when every core was busy and neither was. `fleetCores` is
 * the number of cores the fleet runs on, `cores` the machine's.
 */
export function paceSetBy(seconds: readonly BusySecond[], fleetCores: number, cores: number, busy = 90): PaceSetters {
  let service = 0;
  let fleet = 0;
  let crowded = 0;
  for (const s of seconds) {
    if (s.service >= busy) service++;
    else if (s.fleet >= busy * fleetCores) fleet++;
    else if (s.machine >= busy * cores) crowded++;
  }
  return { seconds: seconds.length, service, fleet, crowded, machineBound: seconds.length > 0 && (fleet + crowded) * 4 >= seconds.length };
}
