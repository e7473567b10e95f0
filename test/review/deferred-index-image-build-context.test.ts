import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Severity: High (found while checking the production image for the bundle's Redis drivers;
 * present on main since the bundle came in, not added by the deferred indexing). The image
 * runs the bundle (CMD node dist/main.js, which loads dist/bundle/main.js); its build stage
 * makes it with `COPY scripts/bundle.ts ./scripts/` then `npm run build`. But .dockerignore
 * leaves the whole `scripts` directory out of the build context, so that COPY has nothing to
 * copy and `docker build` stops there ("not found" in the build context): no image, in any
 * mode. test/deploy/production.test.ts assembles the image from every file git has, so it
 * never reads .dockerignore and cannot see this.
 * Sequence: docker build . → context sent without scripts/ → step COPY scripts/bundle.ts fails
 * (Docker reports it beforehand as its build check CopyIgnoredFile).
 * Docker's rules, as implemented below: each line is a pattern (`*` within a path segment,
 * `**` across them, `!` re-includes); a path is left out when the last pattern matching it
 * or one of its parent directories is not a `!` one.
 */
const ROOT = join(__dirname, '..', '..');

function patternRegExp(pattern: string): RegExp {
  let source = '';
  for (let i = 0; i < pattern.length; i++) {
    const char = pattern[i] as string;
    if (char === '*' && pattern[i + 1] === '*') {
      source += '.*';
      i++;
    } else if (char === '*') source += '[^/]*';
    else if (char === '?') source += '[^/]';
    else source += char.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${source}$`);
}

function excludedFromContext(path: string, ignore: readonly string[]): boolean {
  const segments = path.split('/');
  const candidates = segments.map((_, i) => segments.slice(0, i + 1).join('/'));
  let excluded = false;
  for (const line of ignore) {
    const negated = line.startsWith('!');
    const pattern = (negated ? line.slice(1) : line).replace(/^\/+|\/+$/g, '');
    if (candidates.some((candidate) => patternRegExp(pattern).test(candidate))) excluded = !negated;
  }
  return excluded;
}

describe('the production image build context', () => {
  it('holds every file the Dockerfile copies from the context', () => {
    const ignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#'));
    const sources = readFileSync(join(ROOT, 'Dockerfile'), 'utf8')
      .split('\n')
      .filter((line) => /^COPY\s/.test(line) && !/--from=/.test(line))
      .flatMap((line) => line.trim().split(/\s+/).slice(1, -1).filter((arg) => !arg.startsWith('--')));
    expect(sources).toContain('scripts/bundle.ts');
    expect(sources.filter((source) => excludedFromContext(source.replace(/^\.\//, ''), ignore))).toEqual([]);
  });
});
