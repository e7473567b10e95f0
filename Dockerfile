# syntax=docker/dockerfile:1
# The service image: compiled JavaScript on a supported Node LTS, production dependencies
# only (with their native platform packages), a non-root user, tini as PID 1 so that
# SIGTERM reaches node, and a healthcheck on /api/v1/health.
#   docker build --build-arg VERSION=$(git describe --always --dirty) -t home-hub-cloud .
ARG NODE_VERSION=24.21.0

FROM node:${NODE_VERSION}-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY scripts/bundle.ts ./scripts/
RUN npm run build

FROM node:${NODE_VERSION}-bookworm-slim AS production-deps
WORKDIR /app
COPY package.json package-lock.json ./
# Never --omit=optional: the argon2 binding ships as an optional platform package.
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM node:${NODE_VERSION}-bookworm-slim AS runtime
RUN apt-get update \
  && apt-get install -y --no-install-recommends tini \
  && rm -rf /var/lib/apt/lists/*
ARG VERSION=dev
LABEL org.opencontainers.image.title="home-hub-cloud" \
      org.opencontainers.image.version="${VERSION}"
ENV NODE_ENV=production \
    APP_VERSION=${VERSION} \
    PORT=3000 \
    DATA_DIR=/data
WORKDIR /app
COPY --from=production-deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 3000
VOLUME ["/data"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/api/v1/health').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["node", "dist/main.js"]
