import { admissionTimeline, paceSetBy } from '../../bench/storm-timeline';

/**
 * bench:storm's timeline when a scrape of the service's `/metrics` is not answered within its
 * second: the rows stay in the order of their seconds, and each admission is in exactly one row,
 * the row of the second its figures were read in (not the second the scrape was sent in).
 */
describe('the storm timeline', () => {
  const figures = (admitted: number, refused: number, late: number) => ({ admitted, refused, refused_late: late, window: 64, pace: 1000, lagMax: 0.5 });

  test('a scrape answered in its own second: its row has the figures since the last', () => {
    const timeline = admissionTimeline();
    timeline.second('1:90/50/0b3');
    timeline.scraped(figures(10, 5, 1));
    timeline.second('2:90/50/10b3');
    timeline.scraped(figures(25, 5, 1));
    expect(timeline.rows()).toBe('1:90/50/0b3[a10 r6 l1 w64 p1000 d500] 2:90/50/10b3[a15 r0 l0 w64 p1000 d500]');
  });

  test('a scrape answered two seconds late: the seconds in order, the admissions of both in the later row, none twice', () => {
    const timeline = admissionTimeline();
    timeline.second('1:90/50/0b3');
    timeline.scraped(figures(10, 0, 0));
    // Sent at second 2, answered during second 3 (second 3 sends no scrape: one at a time).
    timeline.second('2:100/50/10b3');
    timeline.second('3:100/50/20b3');
    timeline.scraped(figures(30, 4, 2));
    timeline.second('4:100/50/30b3');
    expect(timeline.rows()).toBe('1:90/50/0b3[a10 r0 l0 w64 p1000 d500] 2:100/50/10b3 3:100/50/20b3[a20 r6 l2 w64 p1000 d500] 4:100/50/30b3');
  });

  test('figures read before the first second are not lost: they count in the next', () => {
    const timeline = admissionTimeline();
    timeline.scraped(figures(5, 0, 0));
    timeline.second('1:10/10/0b1');
    timeline.scraped(figures(8, 0, 0));
    expect(timeline.rows()).toBe('1:10/10/0b1[a8 r0 l0 w64 p1000 d500]');
  });
});

describe('who set the pace of a storm', () => {
  test('a busy service sets it; a fleet out of CPU beside a waiting service sets it for a quarter of the seconds or more: machine-bound', () => {
    const seconds = [
      { service: 95, fleet: 99, machine: 194 }, // the service busy: its pace, whatever the fleet did
      { service: 40, fleet: 97, machine: 137 }, // the fleet out of CPU, the service waiting for it
      { service: 50, fleet: 60, machine: 110 }, // neither: backoff, bookings
      { service: 100, fleet: 30, machine: 130 },
    ];
    expect(paceSetBy(seconds, 1, 2)).toEqual({ seconds: 4, service: 2, fleet: 1, crowded: 0, machineBound: true });
    expect(paceSetBy([...seconds, { service: 92, fleet: 10, machine: 102 }], 1, 2)).toEqual({ seconds: 5, service: 3, fleet: 1, crowded: 0, machineBound: false });
  });

  test('a fleet on two cores is out of CPU at 180 % and more', () => {
    expect(paceSetBy([{ service: 20, fleet: 150, machine: 170 }], 2, 3)).toMatchObject({ fleet: 0, machineBound: false });
    expect(paceSetBy([{ service: 20, fleet: 185, machine: 205 }], 2, 3)).toMatchObject({ fleet: 1, machineBound: true });
  });

  test('every core busy with other work while the service and the fleet wait: crowded', () => {
    expect(paceSetBy([{ service: 30, fleet: 40, machine: 195 }], 1, 2)).toEqual({ seconds: 1, service: 0, fleet: 0, crowded: 1, machineBound: true });
  });

  test('no seconds: nothing to say', () => {
    expect(paceSetBy([], 1, 2)).toEqual({ seconds: 0, service: 0, fleet: 0, crowded: 0, machineBound: false });
  });
});
