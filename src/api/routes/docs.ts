import { dirname, join } from 'node:path';
import { Router } from 'express';
// The tunnel's AsyncAPI description, from the contract package (src/tunnel/contract).
import asyncapi from '../../tunnel/contract/asyncapi.json';

/**
 * The API reference page, `GET /api/v1/docs`: Swagger UI rendering `/api/v1/openapi.json`,
 * served from the installed `swagger-ui-dist` package (no CDN). The page loads only
 * scripts and styles from this server, none inline, so it runs under a strict CSP.
 */

const SWAGGER_UI = dirname(require.resolve('swagger-ui-dist/package.json'));

const ASSETS = new Set(['swagger-ui.css', 'swagger-ui-bundle.js', 'swagger-ui-standalone-preset.js', 'favicon-32x32.png']);

const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Home Hub Cloud API</title>
  <link rel="icon" href="/api/v1/docs/favicon-32x32.png">
  <link rel="stylesheet" href="/api/v1/docs/swagger-ui.css">
</head>
<body>
  <p style="font-family: sans-serif; margin: 1em 2em">The tunnel (Socket.IO, <code>/tunnel</code>): events and payloads in
    <a href="/api/v1/docs/asyncapi.json">AsyncAPI</a>, typed in the <code>@home-hub-cloud/tunnel-contract</code> package.</p>
  <div id="swagger-ui"></div>
  <script src="/api/v1/docs/swagger-ui-bundle.js"></script>
  <script src="/api/v1/docs/swagger-ui-standalone-preset.js"></script>
  <script src="/api/v1/docs/init.js"></script>
</body>
</html>
`;

const INIT = `window.ui = SwaggerUIBundle({
  url: '/api/v1/openapi.json',
  dom_id: '#swagger-ui',
  deepLinking: true,
  tryItOutEnabled: false,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
  layout: 'StandaloneLayout',
});
`;

const CSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'";

export function docsRoutes(): Router {
  const router = Router();
  router.get('/docs', (_req, res) => {
    res.setHeader('Content-Security-Policy', CSP);
    res.type('html').send(PAGE);
  });
  router.get('/docs/asyncapi.json', (_req, res) => {
    res.json(asyncapi);
  });
  router.get('/docs/init.js', (_req, res) => {
    res.type('application/javascript').send(INIT);
  });
  router.get('/docs/:asset', (req, res, next) => {
    const asset = req.params.asset;
    if (!ASSETS.has(asset)) {
      next();
      return;
    }
    res.setHeader('Cache-Control', 'public, max-age=86400');
    res.sendFile(join(SWAGGER_UI, asset));
  });
  return router;
}

/** Where the page is, for the start log line and README. */
export const DOCS_PATH = '/api/v1/docs';

