/**
 * GET /v1/models, GET /health, GET /ready and GET /metrics (gateway.md sections 4.2 and 15; issue #8 parts 4, 6).
 */
import type { RouteContext } from '../route-context.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { wantsVerbose } from '../auth.js';
import { refreshBackends } from '../backend.js';
import { healthReport, readyReport } from '../health.js';
import { redactHealth } from '../health-redact.js';
import { adapterNames, checkModel, servedAdapters } from '../adapters.js';
import type { LoraTarget } from '../../protocols/types.js';

/**
 * Register the informational routes:
 * - `/v1/models/{id}`: that model (ids may contain `/`, as Hugging Face names do; any served name), 404 `model_not_found` otherwise;
 * - `/v1/models`: one card per served model name (`root` = the first name), then one per LoRA adapter (`root` its path,
 *   `parent` its base model), like vLLM's (`id`, `object: 'model'`, `created`, `owned_by`, `root`, `parent`,
 *   `max_model_len` = the first engine's handshake value, gateway.md 15.1; with several engine groups the smallest
 *   over the live ones, see `GroupChooser.maxModelLen`);
 * - `/health` (liveness): 200 while at least one engine group can serve, 503 when none can (`starting` before any
 *   rank joined, `unhealthy` after); the body lists every group with its status, joined/expected ranks and each
 *   rank's state (health.ts), and a 503 body adds an OpenAI-style error (gateway.md 4.2: nothing is sent to the
 *   engines);
 * - `/ready` (readiness): 200 `ready` while some group can serve and the gateway is not draining; 503 `draining`,
 *   `starting` or `unavailable` otherwise (same group list);
 * - on both, worker socket paths and pids are shown only with `?verbose=1` (otherwise groups read `group-<i>`,
 *   health-redact.ts);
 * - `/metrics`: the app's own Prometheus registry (metrics.ts).
 */
export function registerInfoRoutes(app: FastifyInstance, ctx: RouteContext, startedAtSeconds: number): void {
  const model = (id: string) => ({
    id,
    object: 'model',
    created: startedAtSeconds,
    owned_by: 'model-gateway',
    root: ctx.modelId,
    parent: null,
    max_model_len: ctx.chooser.maxModelLen,
  });
  // A LoRA adapter's card as vLLM's: `root` its path, `parent` the base model it applies to.
  const adapterCard = (a: LoraTarget) => ({
    ...model(a.name),
    root: a.path,
    parent: a.baseModelName ?? ctx.modelId,
  });
  // One card per served model name, as vLLM lists every `--served-model-name`, then one per LoRA adapter.
  app.get('/v1/models', async () => {
    await refreshBackends(ctx.chooser.groups);
    return { object: 'list', data: [...ctx.servedModelNames.map(model), ...servedAdapters(ctx).map(adapterCard)] };
  });
  // The served model by id (OpenAI `models.retrieve`); any other id is a 404 like a model the route does not serve.
  app.get('/v1/models/*', async (request) => {
    const id = (request.params as { '*': string })['*'];
    const adapter = servedAdapters(ctx).find((a) => a.name === id);
    if (adapter !== undefined) return adapterCard(adapter);
    checkModel(id, ctx.servedModelNames, adapterNames(ctx));
    return model(id);
  });

  // Both probes read fresh group state, and show socket paths and pids only with ?verbose=1 (which needs the API key
  // when one is set; auth.ts).
  const probe =
    (report: () => { statusCode: number; body: Parameters<typeof redactHealth>[0] }) =>
    async (request: FastifyRequest, reply: FastifyReply) => {
      await refreshBackends(ctx.chooser.groups);
      const { statusCode, body } = report();
      reply.code(statusCode);
      return wantsVerbose(request.query)
        ? body
        : redactHealth(
            body,
            ctx.chooser.groups.map((g) => ({ worker: g.worker, name: g.name })),
          );
    };
  app.get(
    '/health',
    probe(() => healthReport(ctx.chooser.groups)),
  );
  app.get(
    '/ready',
    probe(() => readyReport(ctx.chooser.groups, ctx.admission.draining)),
  );

  app.get('/metrics', async (_request, reply) => {
    const { contentType, body } = await ctx.metrics.render();
    reply.header('content-type', contentType);
    return body;
  });
}
