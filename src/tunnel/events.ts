/** The tunnel's contract lives in its own package (`contract/`), which apps and hubs install; the server uses the same file. */
export * from './contract/events';
