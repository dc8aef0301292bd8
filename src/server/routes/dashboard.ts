/**
 * GET /dashboard: the live dashboard (issue #13 part 2), plain HTML/JS/CSS committed under `dashboard/` at the
 * package root and served as they are (no build step). The page needs no key; its script polls
 * `GET /v1/gateway/ranks`, sending `Authorization: Bearer <key>` when the user typed one (COORDINATION G). Its
 * charts are uPlot's (issue 32 part 4: the `uplot` package), served from node_modules under `/dashboard/vendor/`, so
 * the page loads nothing from another origin.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { FastifyInstance } from 'fastify';

/** The dashboard's folder: `<package root>/dashboard/` (this file sits at src/server/routes or dist/server/routes). */
export const DASHBOARD_DIR = new URL('../../../dashboard/', import.meta.url);

/** The dashboard page's path. */
export const DASHBOARD_PATH = '/dashboard';

/** The dashboard's URL on a gateway serving at `baseUrl` (`http://host:port`), for the startup log lines. */
export function dashboardUrl(baseUrl: string): string {
  return `${baseUrl}${DASHBOARD_PATH}`;
}

/** The files served: URL path → file name and content type. */
const FILES: ReadonlyArray<{ path: string; file: string; type: string }> = [
  { path: DASHBOARD_PATH, file: 'index.html', type: 'text/html; charset=utf-8' },
  { path: `${DASHBOARD_PATH}/`, file: 'index.html', type: 'text/html; charset=utf-8' },
  { path: `${DASHBOARD_PATH}/app.js`, file: 'app.js', type: 'text/javascript; charset=utf-8' },
  { path: `${DASHBOARD_PATH}/charts.js`, file: 'charts.js', type: 'text/javascript; charset=utf-8' },
  { path: `${DASHBOARD_PATH}/events.js`, file: 'events.js', type: 'text/javascript; charset=utf-8' },
  { path: `${DASHBOARD_PATH}/style.css`, file: 'style.css', type: 'text/css; charset=utf-8' },
];

/** uPlot's browser build (it defines the global `uPlot`) and its style: URL path → module path → content type. */
const VENDOR_FILES: ReadonlyArray<{ path: string; module: string; type: string }> = [
  {
    path: `${DASHBOARD_PATH}/vendor/uPlot.iife.min.js`,
    module: 'uplot/dist/uPlot.iife.min.js',
    type: 'text/javascript; charset=utf-8',
  },
  {
    path: `${DASHBOARD_PATH}/vendor/uPlot.min.css`,
    module: 'uplot/dist/uPlot.min.css',
    type: 'text/css; charset=utf-8',
  },
];

/** Same-origin only: the page loads its own script and style and talks to this gateway alone. */
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'";

/**
 * Register the dashboard routes. The files are read once, here (they are small, uPlot's ~50 KB); throws the
 * `readFileSync` error (ENOENT naming the file) when the package is missing its `dashboard/` folder, and the module
 * resolution error (MODULE_NOT_FOUND) when `uplot` is not installed.
 */
export function registerDashboardRoutes(app: FastifyInstance): void {
  const resolve = createRequire(import.meta.url).resolve;
  const files = [
    ...FILES.map((f) => ({ path: f.path, type: f.type, body: readFileSync(new URL(f.file, DASHBOARD_DIR)) })),
    ...VENDOR_FILES.map((f) => ({ path: f.path, type: f.type, body: readFileSync(resolve(f.module)) })),
  ];
  for (const { path, type, body } of files) {
    app.get(path, async (_request, reply) => {
      reply.header('content-type', type).header('cache-control', 'no-cache').header('content-security-policy', CSP);
      return reply.send(body);
    });
  }
}
