import { Router } from 'express';
import type { Registry } from 'prom-client';

/** `GET /metrics`: Prometheus text format, for the scraper (decisions §8). */
export function metricsRoutes(registry: Registry): Router {
  const router = Router();
  router.get('/metrics', async (_req, res) => {
    const body = await registry.metrics();
    res.status(200).type(registry.contentType).send(body);
  });
  return router;
}
