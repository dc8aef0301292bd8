/**
 * GET /v1/models, GET /health and GET /metrics (gateway.md sections 4.2 and 15).
 */
import type { FastifyInstance } from 'fastify';
import type { RouteContext } from '../serve-generation.js';

/**
 * Register the informational routes:
 * - `/v1/models`: the served model like vLLM's (`id`, `object: 'model'`, `created`, `owned_by`, `root`, `parent`,
 *   `max_model_len` = the first engine's handshake value, gateway.md 15.1);
 * - `/health`: 200 `{status: 'ok'}` while the engine client is alive, else 503 with an OpenAI-style error whose
 *   message says the engine core is dead and names the recorded failure causes (gateway.md 4.2: liveness of the
 *   connection; nothing is sent to the engine);
 * - `/metrics`: the app's own Prometheus registry (metrics.ts).
 */
export function registerInfoRoutes(app: FastifyInstance, ctx: RouteContext, startedAtSeconds: number): void {
  app.get('/v1/models', async () => ({
    object: 'list',
    data: [
      {
        id: ctx.modelId,
        object: 'model',
        created: startedAtSeconds,
        owned_by: 'model-gateway',
        root: ctx.modelId,
        parent: null,
        max_model_len: ctx.backend.maxModelLen,
      },
    ],
  }));

  app.get('/health', async (_request, reply) => {
    if (ctx.backend.isAlive()) return { status: 'ok' };
    const causes = Object.entries(ctx.backend.stats.failures)
      .map(([cause, n]) => `${cause}×${n}`)
      .join(', ');
    reply.code(503);
    return {
      error: {
        message: `engine core dead: the engine client is closed${causes ? ` (failures: ${causes})` : ''}`,
        type: 'service_unavailable_error',
        param: null,
        code: 'engine_dead',
      },
    };
  });

  app.get('/metrics', async (_request, reply) => {
    const { contentType, body } = await ctx.metrics.render();
    reply.header('content-type', contentType);
    return body;
  });
}
