/**
 * POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's routes, served only with
 * `--allow-runtime-lora-updating` as vLLM serves them only with `VLLM_ALLOW_RUNTIME_LORA_UPDATING`): load an adapter
 * on every rank of every vLLM group (engine-client/lora-adapters.ts: a utility call per rank), or unload it. The
 * answers are vLLM's: 200 with a plain-text success line; 400 for a name already loaded or an engine's refusal, 404
 * for a path the engines cannot find ("No adapter found") or an unknown name on unload.
 */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { checkAdapterName, type AdapterChange } from '../../engine-client/lora-adapters.js';
import { refreshBackends } from '../backend.js';
import { ApiError, badRequest, toApiError } from '../errors.js';
import type { RouteContext } from '../route-context.js';

const LoadBody = Type.Object(
  {
    lora_name: Type.String({ minLength: 1, maxLength: 256 }),
    lora_path: Type.String({ minLength: 1, maxLength: 4096 }),
    base_model_name: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    load_inplace: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
const UnloadBody = Type.Object(
  {
    lora_name: Type.String({ minLength: 1, maxLength: 256 }),
    lora_int_id: Type.Optional(Type.Union([Type.Integer(), Type.Null()])),
  },
  { additionalProperties: false },
);

/** Register both routes on `app`. */
export function registerLoraRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const typed = app.withTypeProvider<TypeBoxTypeProvider>();
  typed.post('/v1/load_lora_adapter', { schema: { body: LoadBody } }, async (request, reply) => {
    const { lora_name: name, lora_path: path, base_model_name: base } = request.body;
    try {
      checkAdapterName(name);
    } catch (err) {
      throw badRequest(`'lora_name': ${(err as Error).message}`, 'lora_name');
    }
    if (ctx.servedModelNames.includes(name))
      throw badRequest(`'${name}' is the base model's name; an adapter needs another`, 'lora_name');
    if (request.body.load_inplace === true)
      throw badRequest(`'load_inplace' is not supported (unload the adapter, then load it again)`, 'load_inplace');
    const groups = loraGroups(ctx);
    const changes = await Promise.all(
      groups.map(({ worker, adapters }) =>
        adapters.load({ name, path, baseModelName: base ?? null }).then(named(worker, groups.length), failed),
      ),
    );
    // All groups or none: a group that loaded it unloads it again when another could not.
    if (changes.some((c) => !c.ok))
      await Promise.all(groups.map((g, i) => (changes[i]!.ok ? g.adapters.unload(name).catch(() => null) : null)));
    await refreshBackends(ctx.chooser.groups);
    answer(changes);
    reply.type('text/plain; charset=utf-8');
    return `Success: LoRA adapter '${name}' added successfully.`;
  });
  typed.post('/v1/unload_lora_adapter', { schema: { body: UnloadBody } }, async (request, reply) => {
    const name = request.body.lora_name;
    const changes = await Promise.all(loraGroups(ctx).map((g) => g.adapters.unload(name).catch(failed)));
    await refreshBackends(ctx.chooser.groups);
    // Unloaded where it was served: a 404 only when no group knew it.
    if (changes.some((c) => c.ok)) {
      reply.type('text/plain; charset=utf-8');
      return `Success: LoRA adapter '${name}' removed successfully.`;
    }
    answer(changes);
    return '';
  });
}

/** The adapter registries of the groups that serve adapters; 400 when none does (TokenSpeed only). */
function loraGroups(ctx: RouteContext) {
  const out = ctx.chooser.groups.flatMap((g) =>
    g.backend.adapters ? [{ worker: g.worker, adapters: g.backend.adapters }] : [],
  );
  if (out.length === 0)
    throw badRequest(
      'no engine group serves LoRA adapters (TokenSpeed groups cannot)',
      'lora_name',
      'unsupported_task',
    );
  return out;
}

/** With several groups, a failure's message names its group (two groups both have a DP rank 0). */
function named(worker: string, groups: number) {
  return (c: AdapterChange): AdapterChange =>
    c.ok || groups === 1 ? c : { ...c, message: `engine group ${worker}: ${c.message}` };
}

/** A registry call that threw (the ranks could not be asked) as a change that failed, keeping its error. */
function failed(err: unknown): AdapterChange & { error?: unknown } {
  return { ok: false, reason: 'engine', message: toApiError(err).message, error: err };
}

/** Throw the first failure of `changes` as vLLM answers it (see the module comment); nothing when all succeeded. */
function answer(changes: readonly (AdapterChange & { error?: unknown })[]): void {
  const bad = changes.find((c) => !c.ok);
  if (bad === undefined || bad.ok) return;
  if (bad.error !== undefined) throw toApiError(bad.error);
  const notFound = bad.reason === 'missing' || /No adapter found/.test(bad.message);
  throw new ApiError(notFound ? 404 : 400, bad.message, {
    type: notFound ? 'not_found_error' : 'invalid_request_error',
    param: 'lora_name',
    code: notFound ? 'lora_not_found' : bad.reason === 'exists' ? 'lora_exists' : 'lora_load_failed',
  });
}
