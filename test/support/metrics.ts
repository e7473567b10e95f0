import type { TestService } from './harness';

/** One scrape of `GET /metrics`, parsed: the value of a series, or the sum over the series that match. */
export interface Scrape {
  /** Sum of every series of `name` whose labels include `labels` (0 when none). */
  value(name: string, labels?: Readonly<Record<string, string>>): number;
  readonly text: string;
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseMetrics(text: string): Scrape {
  const series: Array<{ name: string; labels: Record<string, string>; value: number }> = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line.trim() === '') continue;
    const match = LINE.exec(line);
    if (match === null) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const label of (match[2] ?? '').matchAll(LABEL)) labels[label[1] as string] = label[2] as string;
    series.push({ name: match[1] as string, labels, value: Number(match[3]) });
  }
  return {
    text,
    value(name, wanted = {}) {
      return series
        .filter((s) => s.name === name && Object.entries(wanted).every(([k, v]) => s.labels[k] === v))
        .reduce((sum, s) => sum + s.value, 0);
    },
  };
}

export async function scrape(service: Pick<TestService, 'baseUrl'>): Promise<Scrape> {
  const res = await fetch(`${service.baseUrl}/metrics`);
  if (res.status !== 200) throw new Error(`GET /metrics answered ${res.status}`);
  return parseMetrics(await res.text());
}
